#!/usr/bin/env python3
"""The BatchNorm exact sums' float16 loads (issues 29 and 30): the three operators that use
batch_normalization_training_sums (BATCH_NORMALIZATION_GRAD, BATCH_NORMALIZATION_TRAINING_GRAD,
BATCH_NORMALIZATION_TRAINING) on the benchmark's shapes, in float32 and float16, against the
copy roofline of the operator's bytes (X and dY read, dX written; the forward: X read, Output
written), for the work-item targets in BN_TARGETS.

Variants:
- previous: the kernel before chunk pairs (`--previous DIR` at --build: that commit's
  shaders/, e.g. from `git archive`; built here by bench_timing.build_variants), its plan;
- unpaired: shaders/ as they are, chunks one at a time (the plan's PAIR_HALVES off);
- paired: shaders/ as they are, BATCH_NORMALIZATION_TRAINING's float16 chunks in pairs where
  the layout allows (PAIRED: one word loaded gives an element of each chunk).
- no_runs: shipped, paired, but the element-wise passes find each element's channel alone
  (VECTOR_RUNS off: as before 2026-12-04) where a vector spans two channels;
- without the shift, without the exact sums, without the tail (timing only, not the same
  bits; for where the time goes, shipped otherwise): no_shift, the forward's shift 0 and
  chunk (0, 0) not loaded; no_exact, each chunk sum added to a 32-bit word instead of the
  exact window; no_tail, every item rounds and finishes its channels itself (no partials,
  counts or fences); no_flush, the exact windows emptied without adding them to the
  digits.
2026-12-04 also timed `prefetch` (runs 2 and 3), each lane's next chunk loaded before it sums
the current one (commit d5e9a32's PREFETCH): 2 of 6 forward rows faster, 4 slower; and
`one_copy` against 8 copies of the digits (run 4, commit 42390ff's DIGIT_COPIES, each lane
flushing into the copy of its index mod 8): the copies were 0-37% slower.
Run 2 of 2026-12-03 timed an earlier kernel that paired the grads' chunks too (X and dY) and
float32's (8-byte loads), both slower; `--previous` there was 239d257's shaders/.
Every variant but the three ablations gives the same bits (exact sums), checked against the
first here.

    python3 benchmarks/investigations/bn_sums_ablation.py --build DIR [--previous SHADERS]
    python3 benchmarks/investigations/bn_sums_ablation.py --spirv DIR [--quick] [--repeat N]
        (BN_TARGETS=512,256: the plan's TARGET_ITEMS values; BN_OPS=grad,training_grad,training;
         BN_VARIANTS=previous,unpaired,paired,no_runs,no_shift,no_exact,no_tail,
         no_flush: those of them to time)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc  # noqa: E402
from pyvkgrad.ops import _batch_normalization_axes as bn_axes  # noqa: E402
from pyvkgrad.ops import _batch_normalization_sums as bn_sums  # noqa: E402
from pyvkgrad.ops import batch_normalization_training as bnt  # noqa: E402
from pyvkgrad.ops._batch_normalization_plan import plan as bn_plan  # noqa: E402
import bench_timing  # noqa: E402

KERNEL = "batch_normalization_training_sums"
SOURCE = f"{KERNEL}.comp"
# variant: (SPIR-V file built here, the plan's settings that differ from `paired`'s)
VARIANTS = dict(previous=("previous", dict(PAIR_HALVES=False)),
                unpaired=("shipped", dict(PAIR_HALVES=False)), paired=("shipped", {}),
                no_runs=("shipped", dict(VECTOR_RUNS=False)),
                no_shift=("no_shift", {}), no_exact=("no_exact", {}), no_tail=("no_tail", {}),
                no_flush=("no_flush", {}))
# Where each setting lives, and `paired`'s value.
SETTINGS = dict(PAIR_HALVES=(bn_sums, True), VECTOR_RUNS=(bn_axes, True))
# The ablations' patches (file under shaders/, old text, new text).
ABLATIONS = dict(
    no_shift=[(SOURCE, "        if (!GRAD) {\n            for (uint i = lane; i < 16u; i += LR) {",
               "        if (false) {\n            for (uint i = lane; i < 16u; i += LR) {"),
              (SOURCE, "shift_of[slot] = chunk_mean_shift(slot);", "shift_of[slot] = 0.0;")],
    no_exact=[("include/exact_sums.glsl",
               "void exact_add(inout ExactWindow a, float x, uint slot) {\n",
               "void exact_add(inout ExactWindow a, float x, uint slot) {\n"
               "    a.w.x += floatBitsToUint(x);\n    a.anchor = 0;\n    return;\n")],
    no_tail=[(SOURCE, "        if (groups > 1u) {\n            // The digits, normalised",
              "        if (false) {\n            // The digits, normalised")],
    no_flush=[("include/exact_sums.glsl", "    if (a.w == uvec3(0u)) return;\n",
               "    if (a.w == uvec3(0u) || a.anchor != -7) { a.w = uvec3(0u); return; }\n")])


def cases(dev, quick):
    """(operator, shape, dtype, descriptor class, plan, args, tensors, bytes moved) for each
    case."""
    shapes = ([(4, 64, 28, 28), (3, 5, 7, 11)] if quick else
              [(32, 64, 112, 112), (256, 256, 14, 14), (256, 512, 7, 7)])
    ops = os.environ.get("BN_OPS", "grad,training_grad,training").split(",")
    rng = np.random.default_rng(0)
    for op in ops:
        for shape in shapes:
            c = shape[1]
            for dt, np_dt in ((DataType.FLOAT32, np.float32), (DataType.FLOAT16, np.float16)):
                big, small = TensorDesc(dt, shape), TensorDesc(dt, (1, c, 1, 1))
                x = (rng.standard_normal(shape, dtype=np.float32) + 0.5).astype(np_dt)
                per = [rng.standard_normal((1, c, 1, 1)).astype(np_dt) for _ in range(3)]
                if op == "training":
                    tensors = dict(input_tensor=dev.upload(x), scale_tensor=dev.upload(per[0]),
                                   bias_tensor=dev.upload(per[1]), output_tensor=dev.empty(big),
                                   output_mean_tensor=dev.empty(small),
                                   output_variance_tensor=dev.empty(small))
                    yield (op, shape, dt, bnt.BatchNormalizationTrainingDesc, bnt._plan,
                           (big, small, small, None, big, small, small, 1e-5), tensors,
                           2 * x.nbytes)
                    continue
                dy = rng.standard_normal(shape).astype(np_dt)
                per[1] = np.abs(per[1]) + np_dt(0.5)
                tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                               mean_tensor=dev.upload(per[0]),
                               variance_tensor=dev.upload(per[1]),
                               scale_tensor=dev.upload(per[2]),
                               output_gradient_tensor=dev.empty(big),
                               output_scale_gradient_tensor=dev.empty(small),
                               output_bias_gradient_tensor=dev.empty(small))
                base = (pyvkgrad.BatchNormalizationGradDesc if op == "grad"
                        else pyvkgrad.BatchNormalizationTrainingGradDesc)
                yield (op, shape, dt, base, lambda d, limits: bn_plan(d, limits, d.TRAINING),
                       (big, big, small, small, small, big, small, small, 1e-5), tensors,
                       3 * x.nbytes)


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", metavar="DIR")
    ap.add_argument("--previous", metavar="SHADERS")
    ap.add_argument("--spirv", metavar="DIR")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.build:
        variants = dict(shipped=[], **({"previous": []} if args.previous else {}), **ABLATIONS)
        bench_timing.build_variants(Path(args.build), SOURCE, variants,
                                    {"previous": args.previous} if args.previous else None,
                                    rte16=True)
        return
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    chosen = os.environ.get("BN_VARIANTS", ",".join(VARIANTS)).split(",")
    folder = Path(args.spirv)

    def read(name):
        return (folder / name).read_bytes() if (folder / name).exists() else None
    spirv = {v: (read(f"{f}.spv"), read(f"{f}.rte16.spv"), settings)
             for v, (f, settings) in VARIANTS.items()
             if v in chosen and (folder / f"{f}.spv").exists()}
    targets = [int(t) for t in os.environ.get("BN_TARGETS", "512,256").split(",")]
    defaults = {name: getattr(module, name) for name, (module, _) in SETTINGS.items()}
    default_target = bn_sums.TARGET_ITEMS
    rows = []
    for op, shape, dt, base, plan, op_args, tensors, nbytes in cases(dev, args.quick):
        roof = bench_timing.copy_roofline(dev, nbytes // 2 // 16 * 16, args.repeat)
        bits = None
        for target in targets:
            bn_sums.TARGET_ITEMS = target
            for variant, (data, rte16, settings) in spirv.items():
                for name, (module, value) in SETTINGS.items():
                    setattr(module, name, settings.get(name, value))
                with bench_timing.serving(KERNEL, data, rte16):
                    times, whole, out = bench_timing.part_times(
                        dev, base, plan, op_args, {"sums": "_sums"}, tensors, args.repeat)
                same = bits is None or out == bits
                bits = bits or out
                sums = [d for d in whole.dispatches if d.kernel.endswith("_sums")]
                row = dict(operator=op, shape=list(shape), dtype=dt.name, target=target,
                           variant=variant, us=times["all"], sums_us=times["sums"],
                           roofline_share=nbytes / (times["all"] * 1e-6) / roof,
                           workgroups=sums[0].workgroups,
                           chunks_per_lane=dict(sums[0].constants)["CHUNKS_PER_LANE"],
                           paired=bool(dict(sums[0].constants).get("PAIRED")),
                           runs=[dict(d.constants).get("RUN") for d in whole.dispatches
                                 if "RUN" in dict(d.constants)],
                           same_bits=same)
                rows.append(row)
                print(f"{op:14s} {str(list(shape)):18s} {dt.name:8s} target {target:4d} "
                      f"{variant:11s} {row['us']:7.1f} us ({100 * row['roofline_share']:5.1f}% "
                      f"of copy), sums {row['sums_us']:6.1f}; workgroups {row['workgroups']}, "
                      f"units/lane {row['chunks_per_lane']}, runs {row['runs']}; "
                      f"same bits {same}", flush=True)
        for t in tensors.values():
            t.close()
    bn_sums.TARGET_ITEMS = default_target
    for name, (module, _) in SETTINGS.items():
        setattr(module, name, defaults[name])
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
