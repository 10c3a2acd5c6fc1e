"""The BatchNorm grads' exact-sum plan on a real GPU: the kernel time of the whole operator and
of each part (the sums with each channel's finish, the dX pass) for several work-item targets
(TARGET_ITEMS) and chunks per lane (CHUNKS_PER_LANE_MAX), against the copy roofline of the
operator's bytes (X and dY read, dX written). Every variant gives the same bits (exact sums);
this checks it too.

    python benchmarks/investigations/bn_grad_variants.py [--quick] [--repeat N] [--cuda-first]
    (BN_VARIANTS=512:16,1024:8 the variants; BN_SHAPES=4x64x56x56,32x256x14x14 the shapes)
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc  # noqa: E402
from pyvkgrad.ops import _batch_normalization_sums as bn_sums  # noqa: E402
from pyvkgrad.ops._batch_normalization_plan import plan as bn_plan  # noqa: E402

from bench_timing import copy_roofline, part_times, variant_script_start  # noqa: E402

PARTS = {"sums": "_sums", "output": ("_output", "_output_packed")}


def main():
    args, dev = variant_script_start()
    shapes = ([(4, 64, 28, 28)] if args.quick else
              [(32, 64, 112, 112), (256, 256, 14, 14), (256, 512, 7, 7)])
    if os.environ.get("BN_SHAPES"):  # e.g. 4x64x56x56,32x256x14x14
        shapes = [tuple(int(v) for v in s.split("x")) for s in os.environ["BN_SHAPES"].split(",")]
    variants = [(512, 16), (2048, 16), (256, 16)]  # (TARGET_ITEMS, CHUNKS_PER_LANE_MAX)
    if os.environ.get("BN_VARIANTS"):  # e.g. 512:16,1024:8
        variants = [tuple(int(v) for v in x.split(":"))
                    for x in os.environ["BN_VARIANTS"].split(",")]
    defaults = (bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX)
    rng = np.random.default_rng(0)
    for base in (pyvkgrad.BatchNormalizationGradDesc, pyvkgrad.BatchNormalizationTrainingGradDesc):
        for shape in shapes:
            c = shape[1]
            for dt, np_dt in ((DataType.FLOAT32, np.float32), (DataType.FLOAT16, np.float16)):
                big, small = TensorDesc(dt, shape), TensorDesc(dt, (1, c, 1, 1))
                arrays = [rng.standard_normal(shape).astype(np_dt) for _ in range(2)] + [
                    rng.standard_normal((1, c, 1, 1)).astype(np_dt) for _ in range(3)]
                arrays[3] = np.abs(arrays[3]) + np_dt(0.5)
                names = ["input_tensor", "input_gradient_tensor", "mean_tensor",
                         "variance_tensor", "scale_tensor"]
                tensors = {n: dev.upload(a) for n, a in zip(names, arrays)}
                tensors.update(output_gradient_tensor=dev.empty(big),
                               output_scale_gradient_tensor=dev.empty(small),
                               output_bias_gradient_tensor=dev.empty(small))
                nbytes = 3 * arrays[0].nbytes
                roof = copy_roofline(dev, arrays[0].nbytes * 3 // 2 // 16 * 16, args.repeat)
                bits = None
                for target, per_lane in variants:
                    bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX = target, per_lane
                    times, whole, out = part_times(
                        dev, base, lambda d, limits: bn_plan(d, limits, d.TRAINING),
                        (big, big, small, small, small, big, small, small, 1e-5), PARTS,
                        tensors, args.repeat)
                    same = bits is None or out == bits
                    bits = bits or out
                    sums = [d for d in whole.dispatches if d.kernel.endswith("_sums")]
                    shape_of = (sums[0].workgroups, dict(sums[0].push)["groups"],
                                dict(sums[0].constants)["CHUNKS_PER_LANE"],
                                dict(sums[0].constants)["LK"])
                    pct = 100 * nbytes / (times["all"] * 1e-6) / roof
                    print(f"{base.OPERATOR} {dt.name} {list(shape)} target {target} per-lane "
                          f"{per_lane} (workgroups, groups, chunks/lane, slots) {shape_of}: "
                          f"all {times['all']:.1f} us ({pct:.1f}% of copy), sums "
                          f"{times['sums']:.1f}, output {times['output']:.1f}; same bits {same}",
                          flush=True)
                for t in tensors.values():
                    t.close()
    bn_sums.TARGET_ITEMS, bn_sums.CHUNKS_PER_LANE_MAX = defaults


if __name__ == "__main__":
    main()
