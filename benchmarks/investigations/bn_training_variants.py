"""BATCH_NORMALIZATION_TRAINING's plan choices on a real GPU: the kernel time of the whole
operator and of each of its two dispatches (the sums with each channel's statistics, Output),
for several work-item targets (TARGET_ITEMS) and
chunks per lane (CHUNKS_PER_LANE_MAX), against the copy roofline of the same bytes (X read,
Output written). Every variant gives the same bits (exact sums); this checks it too.

    python benchmarks/investigations/bn_training_variants.py [--quick] [--repeat N]
"""

import dataclasses
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pyvkgrad import DataType, TensorDesc  # noqa: E402
from pyvkgrad.ops import batch_normalization_training as bnt  # noqa: E402
from pyvkgrad.ops import _batch_normalization_sums as bn_sums  # noqa: E402

from bench_timing import copy_roofline, part_times, variant_script_start  # noqa: E402

PARTS = {"sums": "_sums", "output": "_output"}


def main():
    args, dev = variant_script_start()
    shapes = ([(4, 64, 56, 56)] if args.quick else
              [(32, 64, 112, 112), (256, 256, 14, 14), (256, 512, 7, 7)])
    # (TARGET_ITEMS, CHUNKS_PER_LANE_MAX, workgroup width)
    variants = [(512, 16, 256), (2048, 16, 256), (128, 16, 256), (512, 16, 128),
                (2048, 16, 64)]
    defaults = (bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX)
    rng = np.random.default_rng(0)
    for shape in shapes:
        c = shape[1]
        for dt, np_dt in ((DataType.FLOAT32, np.float32), (DataType.FLOAT16, np.float16)):
            x = (rng.standard_normal(shape, dtype=np.float32) + 0.5).astype(np_dt)
            s = rng.standard_normal((1, c, 1, 1)).astype(np_dt)
            big, small = TensorDesc(dt, shape), TensorDesc(dt, (1, c, 1, 1))
            tensors = dict(input_tensor=dev.upload(x), scale_tensor=dev.upload(s),
                           bias_tensor=dev.upload(s), output_tensor=dev.empty(big),
                           output_mean_tensor=dev.empty(small),
                           output_variance_tensor=dev.empty(small))
            nbytes = 2 * x.nbytes
            roof = copy_roofline(dev, x.nbytes, args.repeat)
            bits = None
            for target, per_lane, wg in variants:
                bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX = target, per_lane
                limits = dataclasses.replace(dev.limits, local_size=wg)
                times, whole, out = part_times(
                    dev, bnt.BatchNormalizationTrainingDesc, bnt._plan,
                    (big, small, small, None, big, small, small, 1e-5), PARTS, tensors,
                    args.repeat, limits)
                same = bits is None or out == bits
                bits = bits or out
                sums = [d for d in whole.dispatches if d.kernel.endswith("sums")]
                items = (sums[0].workgroups, dict(sums[0].constants)["CHUNKS_PER_LANE"],
                         dict(sums[0].constants)["LK"])
                pct = 100 * nbytes / (times["all"] * 1e-6) / roof
                print(f"{dt.name} {list(shape)} target {target} per-lane {per_lane} wg {wg} "
                      f"(workgroups, chunks/lane, slots) {items}: all {times['all']:.1f} us "
                      f"({pct:.1f}% of copy), sums {times['sums']:.1f}, output "
                      f"{times['output']:.1f}; same bits {same}", flush=True)
            for t in tensors.values():
                t.close()
    bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX = defaults


if __name__ == "__main__":
    main()
