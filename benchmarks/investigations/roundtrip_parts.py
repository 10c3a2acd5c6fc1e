"""Where a numpy round trip's time goes, and what mapped inputs and threaded copies change
(issue 13's round-trip and one-call overhead targets).

For ReLU grad 1 Mi float32 and BN training grad [32,64,56,56] float32, under four variants
(one-call inputs staged or mapped; host copies on 1 or `_copy.COPY_THREADS` threads), median
wall times of: the one-call function, PyTorch from numpy interleaved with it, and the one-call
function's cache-hit parts (copying the inputs in; the submission: uploads, kernels, downloads;
reading the outputs back into new arrays). Then the same parts for a 1024-element ReLU grad
(host overhead), and the device's memory types (flags, heap).

    python3 benchmarks/investigations/roundtrip_parts.py --out DIR [--quick] [--repeat N]
"""
import json
import os
import statistics
import sys
import time

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root
import pyvkgrad  # noqa: E402
from pyvkgrad import _copy, _vulkan_info as vi, runtime  # noqa: E402
from pyvkgrad.device import one_call_cache  # noqa: E402
from pyvkgrad.tensor import elements_of, words_to_array  # noqa: E402
from bench_timing import diagnostic_args  # noqa: E402


def interleaved(fns, repeat):
    """Median wall microseconds of each of `fns`, run in turn `repeat` times."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for t, fn in zip(times, fns):
            t0 = time.perf_counter_ns()
            fn()
            t.append(time.perf_counter_ns() - t0)
    return [statistics.median(t) / 1e3 for t in times]


def med(fn, repeat):
    """Median wall microseconds of `fn` over `repeat` calls (after one)."""
    return interleaved([fn], repeat)[0]


def parts(dev, call, arrays, repeat):
    """The cache-hit parts of the one-call entry `call` made (its inputs: `arrays`)."""
    call()
    entry = one_call_cache(dev).entries()[-1]
    ins = [(entry.tensors[n], elements_of(a, d)) for (n, d), a in zip(entry.inputs, arrays)]
    outs = [entry.tensors[n] for n in entry.outputs]

    def write():
        for t, e in ins:
            t.storage.write_elements(e)
    write_us, write_run_us, read_us = interleaved(
        [write, lambda: (write(), entry.recording.replay()),
         lambda: [words_to_array(t.storage.buffer.words(), t.desc) for t in outs]], repeat)
    return {"input_kinds": sorted({t.storage.buffer.kind for t, _ in ins}),
            "write_inputs_us": write_us,
            # after write(): the submission with whatever uploads the inputs need
            "submit_us": write_run_us - write_us,
            "read_outputs_us": read_us}


def main():
    args = diagnostic_args(repeat=30)
    os.makedirs(args.out, exist_ok=True)
    repeat = 5 if args.quick else args.repeat
    result = {"memory_types": vi.memory_types()}
    print(json.dumps(result), flush=True)
    dev = pyvkgrad.default_device()
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        torch, cuda = None, False
    rng = np.random.default_rng(0)
    n = 1 << 16 if args.quick else 1 << 20
    x1 = rng.standard_normal(n).astype(np.float32)
    dy1 = rng.standard_normal(n).astype(np.float32)
    shape = (4, 64, 28, 28) if args.quick else (32, 64, 56, 56)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    scale = np.ones_like(mean)

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()

    def torch_bn():
        out = torch.ops.aten.native_batch_norm_backward(
            t(dy), t(x), t(scale.ravel()), None, None, t(mean.ravel()),
            torch.rsqrt(t(var.ravel()) + 1e-5), True, 1e-5, [True, True, True])
        return [o.cpu().numpy() for o in out]
    cases = [(f"ReLU grad {n} float32",
              lambda: pyvkgrad.activation_relu_grad(x1, dy1, device=dev), (x1, dy1),
              lambda: torch.ops.aten.threshold_backward(t(dy1), t(x1), 0).cpu().numpy()),
             (f"BN training grad {list(shape)} float32",
              lambda: pyvkgrad.batch_normalization_training_grad(x, dy, mean, var, scale, 1e-5,
                                                                 device=dev),
              (x, dy, mean, var, scale), torch_bn)]
    mapped = runtime.Runtime.mapped_device_local
    threads = _copy.COPY_THREADS
    rows = []
    for inputs in ("staged", "mapped"):
        for copy_threads in (1, threads):
            # Variants by patching the library in this process only.
            runtime.Runtime.mapped_device_local = (property(lambda self: False)
                                                   if inputs == "staged" else mapped)
            _copy.COPY_THREADS = copy_threads
            dev.close()
            for name, ours, arrays, theirs in cases:
                fns = [ours] + ([theirs] if cuda else [])
                times = interleaved(fns, repeat)
                row = {"case": name, "inputs": inputs, "copy_threads": copy_threads,
                       "one_call_us": times[0]}
                if cuda:
                    row["torch_from_numpy_us"] = times[1]
                    row["torch_over_pyvkgrad"] = times[1] / times[0]
                row.update(parts(dev, ours, arrays, repeat))
                print(json.dumps(row), flush=True)
                rows.append(row)
    runtime.Runtime.mapped_device_local = mapped
    _copy.COPY_THREADS = threads
    result["rows"] = rows
    dev.close()
    small = np.random.default_rng(2).standard_normal(1024).astype(np.float32)
    call = lambda: pyvkgrad.activation_relu_grad(small, small, device=dev)  # noqa: E731
    row = {"case": "ReLU grad 1024 float32 (host overhead)",
           "one_call_us": med(call, 2000 if not args.quick else 100)}
    row.update(parts(dev, call, (small, small), 2000 if not args.quick else 100))
    print(json.dumps(row), flush=True)
    result["small"] = row
    with open(os.path.join(args.out, "roundtrip_parts.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
