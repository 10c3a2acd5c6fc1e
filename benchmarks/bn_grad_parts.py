"""BATCH_NORMALIZATION_GRAD: what its time is made of, and whether other plan settings help.

For each benchmark shape and dtype, and for workgroup widths and vectors per invocation per
chunk (`ITERS_MAX_VECTORS`, patched in this process only): the time of each recorded step
(partial sums with dX, barrier, finalize) from Vulkan timestamps (median of replays), the
total, and % of the best copy of the same bytes in the same run (as benchmarks/run.py).

    python3 benchmarks/bn_grad_parts.py --out DIR [--quick]
"""
import dataclasses
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pyvkgrad  # noqa: E402
from pyvkgrad.ops import _batch_normalization as bn  # noqa: E402
from run import Torch, _bn, diagnostic_args, same_bytes_roofline  # noqa: E402


def main():
    args = diagnostic_args()
    dev = pyvkgrad.default_device()
    T = Torch()
    shapes = [(4, 64, 56, 56)] if args.quick else [(256, 256, 14, 14), (32, 64, 112, 112)]
    default_iters = bn.ITERS_MAX_VECTORS
    rows = []
    for shape in shapes:
        for dt in ("float32", "float16"):
            roof = None
            for wg in (128, 256, 512, 1024):
                for iters in (2, 4, 8, 16):
                    bn.ITERS_MAX_VECTORS = iters
                    limits = dataclasses.replace(dev.limits, local_size=wg)
                    op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), shape, False,
                                                 dt, limits)
                    if roof is None:
                        roof = same_bytes_roofline(dev, T, nbytes, args.repeat)
                    with dev.record(timestamps=True) as rec:
                        rec.execute(op, **tensors)
                    steps = []
                    for _ in range(args.repeat):
                        rec.replay()
                        steps.append(rec.kernel_times_ns())
                    per_step = [statistics.median(s[i] for s in steps) / 1e3
                                for i in range(len(rec.labels))]
                    total = statistics.median(sum(s) for s in steps)
                    row = {"shape": list(shape), "dtype": dt, "local_size": wg,
                           "iters_max_vectors": iters, "labels": rec.labels,
                           "step_us": per_step, "us": total / 1e3,
                           "pct_copy": 100 * nbytes / (total * 1e-9) / roof,
                           "default": wg == 256 and iters == default_iters}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    rec.close()
                    op.close()
                    for t in tensors.values():
                        t.close()
    bn.ITERS_MAX_VECTORS = default_iters
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bn_grad_parts.json"), "w") as f:
        json.dump({"device": dev.name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
