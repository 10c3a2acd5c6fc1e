#!/usr/bin/env python3
"""Where ADAM_OPTIMIZER's time goes (issue 30: float32 at 76-82% of the same-bytes copy
roofline on an H200, float16 at 44%, both bound by instructions per element): the shipped
kernel against copies of it with parts taken out, on the benchmark's cases (16 and 256 MiB
per tensor, float32 and float16, in place).

Variants (text patches of shaders/, built here into SPIR-V with glslangValidator, as
tools/build_shaders.py builds; the lent GPU has no compiler, so build first and carry the
folder):
- shipped: shaders/ as they are (float16: the quick step, adam_step.glsl's half_step);
- no_quick: float16 without the quick step (every element through cr_div and cr_sqrt);
- quick_device_half: shipped storing float16 through packHalf2x16 (the device's rounding);
- no_cr: the device's own division and square root in place of cr_div and cr_sqrt, and no
  quick step (not the same bits: what the correctly rounded pair costs);
- no_checks: no_cr without the float path's checks (no exact path);
- device_half: no_checks storing float16 through packHalf2x16 instead of half_from_float;
- memory: x + g, m + g, v + g with device_half's stores (the seven streams' traffic alone);
- pairs, pairs_rte16: shipped and rte16 storing x', m' and v' word by word through
  halves_from_floats (a range test each): the stores before 2026-12-03 (night), when one
  halves_from_floats8 test for the six halves replaced them (run 2 of that night timed the
  row as "rows" against these stores as "shipped");
- row_xm, row_xm_rte16: x' and m' through one row test, v' (subnormal halves where gradients
  are small) through halves_from_floats;
- rte16: the shipped second SPIR-V (HALVES_ROUND_TO_NEAREST_EVEN: the device converts the
  halves under RoundingModeRTE for 16 bits);
- preserve16: rte16 also declaring DenormPreserve and SignedZeroInfNanPreserve for 16 bits
  (where a device offers them, as the H200 does), so the device converts v itself, sign and
  subnormal halves included, wherever v is zero or a normal float32 up to 65504 (not built
  into the package: what it would save). Its patch, and checked_half's, change
  halves_from_floats, which the packed float16 store now calls only for a row that fails
  halves_from_floats8's test: since 2026-12-03 (night) they time that rare road alone;
- prefetch2: each item's words loaded two passes ahead instead of one;
- rte16_scalars: rte16 with the Betas and Epsilon (push constants) as the benchmark's
  constants, which the compiler sees (what the push constants cost).
SAME_BITS must give the same bits (checked after the same timed steps, against the first of
them timed; preserve16 only where the device keeps subnormal halves, as the modes require).
ADAM_VARIANTS=shipped,rte16 (a list) and ADAM_DTYPES=float16 time only those; ADAM_DATA=small
times data of small gradients (small_moments: most float16 v' subnormal halves).

    python3 benchmarks/investigations/adam_variants.py --build DIR   (here: writes DIR/*.spv)
    python3 benchmarks/investigations/adam_variants.py --spirv DIR [--quick] [--repeat N]
                                                          [--out FILE]
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402

STEP = "include/adam_step.glsl"
KERNEL = "adam_optimizer.comp"
# variant -> [(file under shaders/, old text, new text)], applied in order
NO_QUICK = [(STEP, "if (half_outputs && half_step(", "if (false && half_step(")]
NO_CR = NO_QUICK + [
    (STEP, "cr_div(num, float_add(cr_sqrt(new_v), EPSILON))", "num / (sqrt(new_v) + EPSILON)")]
NO_CHECKS = NO_CR + [
    (STEP, "    if (EXACT_ONLY ||", "    if (false && EXACT_ONLY ||"),
    (STEP, "if (m_bits != 0u &&", "if (false && m_bits != 0u &&"),
    (STEP, "if (below(step, SUMMAND_LEAST))", "if (false)")]
DEVICE_HALF = NO_CHECKS + [(KERNEL, "half_from_float(", "HALF_FROM_FLOAT(")]
MEMORY = DEVICE_HALF + [
    (STEP, "          bool half_outputs) {\n",
     "          bool half_outputs) {\n    return vec3(xe + ge, me + ge, ve + ge);\n")]
QUICK_DEVICE_HALF = [(KERNEL, "half_from_float(", "HALF_FROM_FLOAT(")]
RTE16 = [(KERNEL, "#version 450\n", "#version 450\n#define HALVES_ROUND_TO_NEAREST_EVEN\n")]
_LS = "include/load_store.glsl"
PRESERVE16 = RTE16 + bench_timing.PRESERVE16_MODES + [
    (_LS, "uint half_from_float(float v) {\n",
     "bool device_takes(uint m) { return m - 0x00800000u <= 0x477FE000u - 0x00800000u"
     " || m == 0u; }\nuint half_from_float(float v) {\n"),
    (_LS, "    if (device_rounds(magnitude)) return sign | "
          "DEVICE_HALF_BITS(uintBitsToFloat(magnitude));",
     "    if (device_takes(magnitude)) return DEVICE_HALF_BITS(v);"),
    (_LS, "    if (device_rounds(magnitude.x) && device_rounds(magnitude.y)) {",
     "    if (device_takes(magnitude.x) && device_takes(magnitude.y)) return DEVICE_HALF_PAIR(v);"
     "\n    if (device_rounds(magnitude.x) && device_rounds(magnitude.y)) {")]
# float16 words stored one at a time through halves_from_floats (three range tests a word
# triple; shipped before 2026-12-03 (night), when halves_from_floats8's one test replaced them).
ROW_STORE = """        const uvec4 w = halves_from_floats8(vec4(lo.x, hi.x, lo.y, hi.y),
                                           vec4(lo.z, hi.z, 0.0, 0.0));
        new_x[i] = w.x;
        new_m[i] = w.y;
        new_v[i] = w.z;"""  # the kernel's store of a pair of elements' six halves
PAIRS = [(KERNEL, ROW_STORE, """        new_x[i] = halves_from_floats(vec2(lo.x, hi.x));
        new_m[i] = halves_from_floats(vec2(lo.y, hi.y));
        new_v[i] = halves_from_floats(vec2(lo.z, hi.z));""")]
# x' and m' through one row test (halves_from_floats8 of the four values twice: the compiler
# folds the repeat), v' (subnormal halves for small gradients) through halves_from_floats.
ROW_XM = [(KERNEL, ROW_STORE, """        const vec4 xm = vec4(lo.x, hi.x, lo.y, hi.y);
        const uvec4 w = halves_from_floats8(xm, xm);
        new_x[i] = w.x;
        new_m[i] = w.y;
        new_v[i] = halves_from_floats(vec2(lo.z, hi.z));""")]
# Each item's words loaded two passes ahead (two items' loads in flight while one computes;
# 4 more registers).
PREFETCH2 = [
    (KERNEL, """    uvec4 next = uvec4(0u);
    if (PACKED && PREFETCH && i0 < count) next = uvec4(x[i0], m[i0], v[i0], g[i0]);
""", """    uvec4 next = uvec4(0u), next2 = uvec4(0u);
    if (PACKED && PREFETCH && i0 < count) next = uvec4(x[i0], m[i0], v[i0], g[i0]);
    if (PACKED && PREFETCH && i0 + stride < count) {
        const uint j = i0 + stride;
        next2 = uvec4(x[j], m[j], v[j], g[j]);
    }
"""),
    (KERNEL, """            const uvec4 words = next;
            if (i + stride < count) {
                const uint j = i + stride;
                next = uvec4(x[j], m[j], v[j], g[j]);
            }
""", """            const uvec4 words = next;
            next = next2;
            if (i + 2u * stride < count) {
                const uint j = i + 2u * stride;
                next2 = uvec4(x[j], m[j], v[j], g[j]);
            }
""")]
# The Betas and Epsilon (push constants) as constants the compiler sees, the benchmark's (0.9,
# 0.999, 1e-8): what they cost as push constants. (Run 2 of 2026-12-04 (evening) timed the
# float path's limits and switches as push constants too, each group patched back to
# constants in turn; they are specialization constants again since.)
_SCALARS_AT = "#define ONE_MINUS_BETA2 uintBitsToFloat(one_minus_beta2)\n"
SCALARS = [(STEP, _SCALARS_AT, _SCALARS_AT +
            "#define beta1 0x3F666666u\n#define beta2 0x3F7FBE77u\n"
            "#define epsilon 0x322BCC77u\n#define one_minus_beta1 0x3DCCCCD0u\n"
            "#define one_minus_beta2 0x3A831200u\n")]
VARIANTS = dict(shipped=[], no_quick=NO_QUICK, pairs=PAIRS, pairs_rte16=RTE16 + PAIRS,
                row_xm=ROW_XM, row_xm_rte16=RTE16 + ROW_XM,
                quick_device_half=QUICK_DEVICE_HALF, checked_half=bench_timing.CHECKED_HALF,
                no_cr=NO_CR, no_checks=NO_CHECKS, device_half=DEVICE_HALF, memory=MEMORY,
                rte16=RTE16, preserve16=PRESERVE16, prefetch2=PREFETCH2,
                rte16_scalars=RTE16 + SCALARS)
SAME_BITS = ("shipped", "no_quick", "pairs", "pairs_rte16", "row_xm", "row_xm_rte16",
             "checked_half", "rte16", "preserve16", "prefetch2", "rte16_scalars")
OUTPUTS = ("input_parameters_tensor", "input_first_moment_tensor",
           "input_second_moment_tensor")  # in place: the outputs are these tensors


def small_moments(x, m, v, g):
    """ADAM_DATA=small: the case's data with gradients of 1e-3 (g scaled), m = g / 10 and
    v = g^2, so that in float16 most of v (and v') are subnormal halves, as small gradients
    make them in training: the stores' rare road, which the benchmark's v = |g| never takes."""
    g32 = g.astype(np.float32) * np.float32(1e-3)
    return x, (g32 / 10).astype(g.dtype), (g32 * g32).astype(g.dtype), g32.astype(g.dtype)


def main() -> None:
    args = bench_timing.variant_spirv_args(__doc__.splitlines()[0])
    if args.build:
        bench_timing.build_variants(args.build, KERNEL, VARIANTS)
        return
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    names = os.environ.get("ADAM_VARIANTS", ",".join(VARIANTS)).split(",")
    spirv = {n: (Path(args.spirv) / f"{n}.spv").read_bytes() for n in names}
    dtypes = os.environ.get("ADAM_DTYPES")
    rows = []
    no_torch = types.SimpleNamespace(torch=None)
    for dt, (x, m, v, g) in bench_cases.adam_sweep(1 << 20 if args.quick else None):
        if dtypes and str(dt) not in dtypes.split(","):
            continue
        if os.environ.get("ADAM_DATA") == "small":
            x, m, v, g = small_moments(x, m, v, g)
        n = x.size
        nbytes = 7 * x.nbytes
        roofline = bench_timing.same_bytes_roofline(dev, no_torch, nbytes, args.repeat)
        outputs = {}
        for name, data in spirv.items():
            # the pipeline is made at the first recording: time inside too
            with bench_timing.serving("adam_optimizer", data):
                op, tensors = bench_cases.adam_operator(dev, x, m, v, g, dt)
                ns, rec = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
            if name in SAME_BITS:
                outputs[name] = [tensors[k].numpy().view(np.uint8) for k in OUTPUTS]
            rows.append(dict(case=f"{nbytes // 7 >> 20} MiB per tensor", dtype=dt,
                             variant=name, us=ns / 1e3, roofline_gbps=roofline / 1e9,
                             roofline_share=nbytes / ns / (roofline / 1e9),
                             g_elements_per_s=n / ns))
            rec.close()
            op.close()
            del tensors
        # against the first same-bits variant timed (shipped where it is among them)
        first = next(iter(outputs.values()), [])
        same = all(np.array_equal(a, b) for out in outputs.values() for a, b in zip(out, first))
        for row in rows[-len(spirv):]:
            row["same_bits"] = same if row["variant"] in SAME_BITS else None
            print(f"{row['case']:20s} {row['dtype']:8s} {row['variant']:12s} "
                  f"{row['us']:9.1f} us {row['g_elements_per_s']:7.1f} G elem/s "
                  f"{100 * row['roofline_share']:6.1f}% of copy  same bits: "
                  f"{row['same_bits']}")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
