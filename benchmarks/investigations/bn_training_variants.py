"""BATCH_NORMALIZATION_TRAINING's plan choices on a real GPU: the kernel time of the whole
operator and of each of its dispatches (the sums with each channel's statistics, Output when
the sums kernel does not write it itself), against the copy roofline of the same bytes (X
read, Output written), for settings of `_batch_normalization_sums`: OUTPUT_HERE (Output
written by the sums kernel where each work item takes its channels whole), OUTPUT_HERE_UNITS_MAX
(the chunks a lane may take for it), TARGET_ITEMS and the workgroup width. Every variant gives
the same bits (exact sums); this checks it too.

    python benchmarks/investigations/bn_training_variants.py [--quick] [--repeat N] [--cuda-first]

BN_VARIANTS="name;name..." picks among VARIANTS, BN_SHAPES="NxCxHxW,..." the shapes.
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
# name -> (module settings, workgroup width): the first is the plan before OUTPUT_HERE.
VARIANTS = {
    "element-wise": (dict(OUTPUT_HERE=False), 256),
    "here": (dict(), 256),
    "here, 2 a lane": (dict(OUTPUT_HERE_UNITS_MAX=2), 256),
    "here, 4 a lane": (dict(OUTPUT_HERE_UNITS_MAX=4), 256),
    "element-wise, target 2048": (dict(OUTPUT_HERE=False, TARGET_ITEMS=2048), 256),
}


def main():
    args, dev = variant_script_start()
    shapes = ([(4, 64, 56, 56), (8, 64, 7, 7)] if args.quick else
              [tuple(int(v) for v in t.split("x")) for t in os.environ.get(
                  "BN_SHAPES", "32x64x112x112,256x256x14x14,256x512x7x7").split(",")])
    names = os.environ.get("BN_VARIANTS")
    variants = {n: VARIANTS[n] for n in (names.split(";") if names else VARIANTS)}
    defaults = {k: getattr(bn_sums, k) for k in
                ("OUTPUT_HERE", "OUTPUT_HERE_UNITS_MAX", "TARGET_ITEMS")}
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
            for name, (settings, wg) in variants.items():
                for k, v in dict(defaults, **settings).items():
                    setattr(bn_sums, k, v)
                limits = dataclasses.replace(dev.limits, local_size=min(
                    wg, dev.limits.max_local_size))
                times, whole, out = part_times(
                    dev, bnt.BatchNormalizationTrainingDesc, bnt._plan,
                    (big, small, small, None, big, small, small, 1e-5), PARTS, tensors,
                    args.repeat, limits)
                same = bits is None or out == bits
                bits = bits or out
                sums = [d for d in whole.dispatches if d.kernel.endswith("sums")]
                k = dict(sums[0].constants)
                pct = 100 * nbytes / (times["all"] * 1e-6) / roof
                print(f"{dt.name:7} {str(list(shape)):18} {name:28} {times['all']:7.1f} us "
                      f"({pct:5.1f}% of copy), sums {times['sums']:6.1f}, output "
                      f"{times['output']:5.1f}; workgroups {sums[0].workgroups}, wide "
                      f"{k['WG']}, chunks/lane {k['CHUNKS_PER_LANE']}, slots {k['LK']}, "
                      f"here {k['OUTPUT_HERE']}, passes {len(sums)}; same bits {same}",
                      flush=True)
            for t in tensors.values():
                t.close()
    for k, v in defaults.items():
        setattr(bn_sums, k, v)


if __name__ == "__main__":
    main()
