#!/usr/bin/env python3
"""Does a kernel's time depend on the process it runs in? (issue 33: ReLU grad on 256 MiB
float16 tensors took 465 us in a process that had not started CUDA, 268 us in one that imports
torch and starts CUDA first; float32 and 16 MiB the same in both.)

Times the ReLU grad kernel (Vulkan timestamps, medians of replays) for float16 and float32 at
16 MiB and 256 MiB per tensor, each variant in a fresh process:
- plain: no torch, the cases in the benchmark's order (float32 then float16, small to large);
- alone: no torch, float16 256 MiB only (as the benchmark's --isolate runs it);
- cuda_first: torch imported and CUDA started (a tensor on cuda) before the Vulkan device
  (torch imported only where there is no CUDA);
- small_allocations_first: 2000 small device tensors allocated and kept before the cases;
- reverse: the cases in reverse order (float16 first, large first) and each case's output
  allocated before its inputs.
Records `nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate` before and after each variant
where nvidia-smi exists, and the device's memory types. One JSON line per variant on stdout;
all of them in --out/f16_process.json. --quick: 1 and 4 MiB (lavapipe).

    python3 benchmarks/investigations/f16_process.py --out DIR [--quick] [--repeat N]
"""
import json
import os
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root

MiB = 2**20
VARIANTS = ("plain", "alone", "cuda_first", "small_allocations_first", "reverse")


def child(variant, sizes, repeat):
    """One variant, in this (fresh) process: one JSON line."""
    row = {"variant": variant, "torch": None}
    if variant == "cuda_first":
        try:
            import torch
            row["torch"] = torch.__version__
            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")
                torch.cuda.synchronize()
                row["torch"] += " (CUDA started)"
        except ImportError:
            row["torch"] = "not importable"
    import numpy as np
    import pyvkgrad
    from pyvkgrad import DataType, TensorDesc, operators
    from bench_cases import _elementwise
    from bench_timing import vulkan_time
    if variant != "cuda_first":
        assert "torch" not in sys.modules
    dev = pyvkgrad.default_device()
    record = operators.BY_NAME["activation_relu_grad"]
    keep = []
    if variant == "small_allocations_first":
        desc = TensorDesc(DataType.FLOAT32, (1024,))
        keep = [dev.empty(desc) for _ in range(2000)]
    cases = [(dt, s) for dt in ("float32", "float16") for s in sizes]
    if variant == "alone":
        cases = [("float16", sizes[-1])]
    if variant == "reverse":
        cases = cases[::-1]
    rng = np.random.default_rng(0)
    row["cases"] = []
    for dt, nbytes in cases:
        n = nbytes // (4 if dt == "float32" else 2)
        if variant == "reverse":  # the output first, then the inputs
            desc = TensorDesc(DataType.FLOAT32 if dt == "float32" else DataType.FLOAT16, (n,))
            out = dev.empty(desc)
            np_dt = np.float32 if dt == "float32" else np.float16
            x = dev.upload(rng.standard_normal(n, dtype=np.float32).astype(np_dt))
            dy = dev.upload(rng.standard_normal(n, dtype=np.float32).astype(np_dt))
            op = dev.compile(record.descriptor(desc, desc, desc))
            tensors = dict(input_tensor=x, input_gradient_tensor=dy, output_gradient_tensor=out)
        else:
            op, tensors, _, _ = _elementwise(dev, rng, record, dt, n)
        ns, _ = vulkan_time(dev, op, tensors, repeat)
        kinds = sorted({t.storage.buffer.kind for t in tensors.values()})
        row["cases"].append({"dtype": dt, "MiB_per_tensor": nbytes // MiB, "kernel_us": ns / 1e3,
                             "buffer_kinds": kinds})
        for t in tensors.values():
            t.close()
        op.close()
    del keep
    print("ROW " + json.dumps(row), flush=True)


def main():
    from bench_timing import child_row, diagnostic_args, gpu_clocks
    if sys.argv[1:2] == ["--child"]:
        return child(sys.argv[2], [int(s) for s in sys.argv[3].split(",")], int(sys.argv[4]))
    args = diagnostic_args(repeat=20)
    repeat = 3 if args.quick else args.repeat
    sizes = [1 * MiB, 4 * MiB] if args.quick else [16 * MiB, 256 * MiB]
    os.makedirs(args.out, exist_ok=True)
    from pyvkgrad import _vulkan_info as vi
    result = {"memory_types": vi.memory_types(), "repeat": repeat, "rows": []}
    for variant in VARIANTS:
        before = gpu_clocks() or None
        t0 = time.time()
        row = child_row([sys.executable, __file__, "--child", variant,
                         ",".join(map(str, sizes)), str(repeat)], {"variant": variant})
        row.update(clocks_before=before, clocks_after=gpu_clocks() or None, seconds=round(time.time() - t0, 1))
        print(json.dumps(row), flush=True)
        result["rows"].append(row)
    with open(os.path.join(args.out, "f16_process.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
