"""Does a process's earlier Vulkan work change its later costs? (issue 33, H100, 2026-11-25)

In one process: the host-overhead calls (bench_cases.overhead_calls) and a float16 ReLU grad
kernel over 256 MiB tensors, measured fresh, then again after the benchmark's copy roofline
(two 1 GiB buffers made, used and destroyed). Medians; one JSON line per stage."""

import json
import os
import sys

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)
sys.path.insert(0, os.path.dirname(BENCHMARKS))
import pyvkgrad  # noqa: E402
from bench_cases import overhead_calls  # noqa: E402
from bench_timing import copy_roofline, median_wall_ns, vulkan_time  # noqa: E402


def relu_kernel_us(dev, n, repeat):
    d = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT16, (n,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(d, d, d))
    x = np.ones(n, np.float16)
    ts = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(x),
              output_gradient_tensor=dev.empty(d))
    ns, _ = vulkan_time(dev, op, ts, repeat)
    for t in ts.values():
        t.close()
    op.close()
    return ns / 1e3


def main():
    quick = "--quick" in sys.argv
    dev = pyvkgrad.default_device()
    n = (1 << 20) if quick else (128 << 20)  # 256 MiB of float16 per tensor
    calls = overhead_calls(dev)
    for stage in ("fresh", "after a 1 GiB copy roofline", "after a second kernel"):
        if stage.startswith("after a 1"):
            copy_roofline(dev, (16 << 20) if quick else (1 << 30), 5)
        out = {name: round(median_wall_ns(fn, 200) / 1e3, 1) for name, fn in calls.items()}
        out["relu_f16_kernel_us"] = round(relu_kernel_us(dev, n, 20), 1)
        print(json.dumps({"stage": stage, **out}), flush=True)


if __name__ == "__main__":
    main()
