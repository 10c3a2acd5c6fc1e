"""Which part of a kernel's storage-buffer traffic bounds a device: issue 13's lavapipe target.

For a tensor of --mib MiB (16, the target's size): vkCmdCopyBuffer; the storage_access kernel
(benchmarks/shaders/storage_access.comp) copying, only reading and only writing 16-byte vectors,
at several workgroup widths; and the ReLU grad operator (float32, which reads two such tensors
and writes one). Each time is the median of --repeat submissions (Vulkan timestamps); rates
count the bytes each moves (a copy: read + written; read or write only: that tensor once).

    python3 benchmarks/investigations/storage_access.py --out DIR [--mib 16] [--repeat 5]

Writes storage_access.json into --out and prints a table.
"""
import json
import os
import statistics
import sys

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root
import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc, kernels  # noqa: E402
from bench_timing import benchmark_kernel, commands_ns as timed, diagnostic_args  # noqa: E402

MODES = {0: "copy", 1: "read only", 2: "write only"}


def main():
    ap_args = sys.argv[1:]
    mib = 16
    if "--mib" in ap_args:
        k = ap_args.index("--mib")
        mib = int(ap_args[k + 1])
        del ap_args[k:k + 2]
    args = diagnostic_args(ap_args, repeat=5)
    dev = pyvkgrad.default_device()
    runtime = dev.runtime()
    nbytes = mib * 2**20
    src, dst = runtime.buffer(nbytes), runtime.buffer(nbytes)  # zeros: no vector's xor is 1
    rows = [{"kernel": "vkCmdCopyBuffer", "ns": timed(dev, lambda c: c.copy(src, dst),
                                                      args.repeat), "bytes": 2 * nbytes}]
    spirv, iface = benchmark_kernel("storage_access")
    bound = [{"src": src, "dst": dst}[n]
             for n in kernels.binding_order(iface, {"src": "src", "dst": "dst"})]
    vectors = nbytes // 16
    push = np.array(kernels.push_words(iface, {"count": vectors, "key": 1}), dtype=np.uint32)
    for mode, what in MODES.items():
        for wg in sorted({64, 256, 1024, dev.limits.local_size}):
            program = runtime.program(bound, spirv, min(-(-vectors // wg), 65535),
                                      kernels.specialization(iface, {"WG": wg, "MODE": mode}),
                                      len(push))
            ns = timed(dev, lambda c: c.dispatch(program, push), args.repeat)
            rows.append({"kernel": f"storage_access {what}", "local_size": wg, "ns": ns,
                         "bytes": (2 if mode == 0 else 1) * nbytes})
            program.destroy()
    src.destroy()
    dst.destroy()
    n = nbytes // 4
    desc = TensorDesc(DataType.FLOAT32, (n,))
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(x),
                   output_gradient_tensor=dev.empty(desc))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    with dev.record(timestamps=True) as rec:
        rec.execute(op, **tensors)
    times = []
    for _ in range(args.repeat + 1):
        rec.replay()
        times.append(sum(rec.kernel_times_ns()))
    rows.append({"kernel": "ReLU grad float32", "local_size": dev.limits.local_size,
                 "ns": statistics.median(times[1:]), "bytes": 3 * nbytes})
    rec.close()
    op.close()
    copy_rate = rows[0]["bytes"] / rows[0]["ns"]
    print(f"{dev.info.name}: {mib} MiB per tensor; rates in GB/s of the bytes each moves, and "
          f"% of vkCmdCopyBuffer's")
    for r in rows:
        r["gbps"] = r["bytes"] / r["ns"]
        r["pct_of_copy_buffer"] = 100 * r["gbps"] / copy_rate
        print(f"{r['kernel']:<28}{r.get('local_size', ''):>6}{r['ns'] / 1e6:10.2f} ms"
              f"{r['gbps']:8.2f} GB/s{r['pct_of_copy_buffer']:7.1f}%")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "storage_access.json"), "w") as f:
        json.dump({"device": dev.info.name, "mib": mib, "repeat": args.repeat, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
