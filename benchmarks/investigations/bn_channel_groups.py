"""BATCH_NORMALIZATION_TRAINING_GRAD in channel groups: a third design, measured before building.

The training grad reads X and dY twice: once for the per-channel sums, once for dX. If the
channels are processed a group at a time, small enough for X and dY of a group to stay in the
50 MB L2 cache, the second read hits the cache and the kernels approach minimum traffic
(each input read once). This times that plan with today's kernels: the problem cut into G
groups of C/G channels, each group its own tensors (contiguous [N, C/G, H, W]) and compiled
operator (sums, finalize, dX), all G in one recording, in group order. Kernel time is the span
of the recording's Vulkan timestamps (median of replays); "% copy" is minimum traffic over the
best copy of the same bytes in the same run (Vulkan's or PyTorch's, as benchmarks/run.py).

    python3 benchmarks/investigations/bn_channel_groups.py --out DIR [--quick]
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
from bench_cases import _bn  # noqa: E402
from bench_timing import Torch, diagnostic_args, same_bytes_roofline  # noqa: E402


def main():
    args = diagnostic_args()
    dev = pyvkgrad.default_device()
    T = Torch()  # for the roofline: the better of Vulkan's and PyTorch's copies
    shapes = [(4, 64, 56, 56)] if args.quick else [(32, 64, 112, 112), (256, 256, 14, 14)]
    rows = []
    for shape in shapes:
        n, c, h, w = shape
        for dt in ("float32", "float16"):
            item = 4 if dt == "float32" else 2
            nbytes = 3 * n * c * h * w * item
            roof = same_bytes_roofline(dev, T, nbytes, args.repeat)
            for groups in (1, 2, 4, 8, 16, 32):
                if c % groups:
                    continue
                rng = np.random.default_rng(0)
                parts = [_bn(dev, rng, (n, c // groups, h, w), True, dt)[:2]
                         for _ in range(groups)]
                with dev.record(timestamps=True) as rec:
                    for op, tensors in parts:
                        rec.execute(op, **tensors)
                times = []
                for _ in range(args.repeat):
                    rec.replay()
                    times.append(sum(rec.kernel_times_ns()))
                ns = statistics.median(times)
                row = {"shape": list(shape), "dtype": dt, "groups": groups,
                       "group_mb_x_dy": 2 * nbytes / 3 / groups / 1e6, "us": ns / 1e3,
                       "pct_copy": 100 * nbytes / (ns * 1e-9) / roof,
                       "steps": len(rec.labels)}
                print(json.dumps(row), flush=True)
                rows.append(row)
                rec.close()
                for op, tensors in parts:
                    op.close()
                    for t in tensors.values():
                        t.close()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bn_channel_groups.json"), "w") as f:
        json.dump({"device": dev.name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
