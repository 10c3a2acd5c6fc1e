#!/usr/bin/env python3
"""Where the pooling grads' time goes (issue 31: float16 2x2 at 57-63% of the copy
roofline on an H200, float32 at 91%; max 3x3 at 12% in float16, 32% in float32): the shipped
kernels against copies with parts taken out or changed, on the benchmark's pooling cases (the
plan's tiles), one shape.

Variants (text patches of shaders/, built here, each with its rte16 SPIR-V:
bench_timing.build_variants):
- shipped: shaders/ as they are;
- sums: the float16 tiles of non-overlapping windows summing float32 terms and rounding them
  (before 2026-12-03 (evening)), in place of working on dY's halves (HALF_TERMS);
- term_after, prev_cells: the tiles' float road in other forms (TERM_AFTER's comment);
- half_roads, winner_first, term_first_half, winner_by_window: the forms before 2026-12-03
  (late), and one not kept (the comments of HALF_ROADS and WINNER_BY_WINDOW);
- scalar_keys, sums_scalar_keys: max pooling's tiles loading X's footprint element by element
  (before 2026-12-03 (evening)) instead of a 16-byte vector a row (KEY_VECTORS), with the
  halves or (together the previous kernel) the sums;
- pairs: the float16 tile rows stored pair by pair through halves_from_floats (a range test
  and branch per pair; before 2026-12-03 (night)), in place of halves_from_floats8's one test a row;
- row_unrolled: halves_from_floats8 with its rare road's loop unrolled;
- preserve16, preserve16_max: the rte16 SPIR-V also under DenormPreserve and
  SignedZeroInfNanPreserve for 16 bits, a row of magnitudes within range converted as it is
  (see PRESERVE16; the same bits on a device that offers the modes, as an H200 does);
- device_half: the float16 stores through the device's conversion (pack_halves) in place of
  halves_from_floats (not the same bits on every device);
- device_div: average pooling's term v / count by the device's division (not the same bits);
- loads_only: average pooling's term dY itself, and device_half's stores (the tile's loads,
  sums and stores alone);
- half_reciprocal: float16 dY over a whole window's count through the reciprocal's product
  (before 2026-12-03 (evening)) instead of HALF_BY_INTEGERS' integer quotient;
- by_integers: average pooling's division by a whole window's count through the integer
  quotient (div_count_of, as before 2026-12-02) instead of the reciprocal's product;
- unguarded: the reciprocal's road without the tests that make its one step right for any
  rounding of the product (as run 4 of 2026-12-02 timed it; the same bits where the product
  rounds to nearest);
- first_cell: max pooling's argmax over the window's first cell only (the compiler drops the
  other keys' loads: what the footprint's loads and comparisons cost);
- by_windows: max pooling's winners' pass by windows, each its own cells one by one (before
  2026-12-02: the plan's ARGMAX_ROWS off);
- every_cell_test: the tiles testing each window's winner against EVERY_CELL too (before
  2026-12-02; the kernel's EVERY_CELL_WINS now drops that test);
- winners_only / tiles_only: max pooling's two dispatches, the other one doing nothing (what
  each costs; the tiles then read stale winners, the winners pass's time stands alone).
Commit cad154e (run 1 of 2026-12-03 (later)) also had light_rare (div_count_of's zeros, Inf,
NaN and subnormal v without cr_div where no window holds more than 128 cells: now the kernel)
and no_rare (those cases' cr_div taken out: what its code cost).
previous: with POOLING_PREVIOUS=DIR at --build, the kernels of the shaders/ folder DIR (an
earlier commit's: git archive COMMIT shaders | tar -x -C PARENT).
Same bits: SAME_BITS, checked against the first of them timed. Each row says which SPIR-V ran
(a variant without an rte16 build runs its first one where the device takes rte16).
POOLING_KINDS=avg (or max) times one kernel's variants only; POOLING_VARIANTS=shipped,pairs
those variants only; POOLING_DTYPES=float16 those cases only.

    python3 benchmarks/investigations/pooling_ablation.py --build DIR   (here: DIR/<kernel>/*.spv)
    python3 benchmarks/investigations/pooling_ablation.py --spirv DIR [--repeat N] [--out FILE]
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
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402

TILES = "include/pooling_grad.glsl"
AVERAGE = "average_pooling_grad.comp"
MAX = "max_pooling_grad.comp"
ROW = "halves_from_floats8(row[0], row[1])"
DEVICE_HALF = [(TILES, "halves_from_floats(", "pack_halves("),
               (TILES, ROW, "uvec4(pack_halves(row[0].xy), pack_halves(row[0].zw), "
                            "pack_halves(row[1].xy), pack_halves(row[1].zw))")]
# The float16 rows' stores pair by pair (before 2026-12-03 (night): a range test and a
# branch per pair, the rare roads unrolled four times), and the row's rare road unrolled.
PAIRS = [(TILES, ROW, "uvec4(halves_from_floats(row[0].xy), halves_from_floats(row[0].zw), "
                      "halves_from_floats(row[1].xy), halves_from_floats(row[1].zw))")]
ROW_UNROLLED = [("include/half_rows.glsl", "[[dont_unroll]]", "[[unroll]]")]
# The rte16 SPIR-V also declaring DenormPreserve and SignedZeroInfNanPreserve for 16-bit
# results (an H200 offers both), so that the device converts v itself, sign and subnormal
# halves included: a row whose eight magnitudes are zero or from float32's least normal up to
# 65504 (preserve16; preserve16_max: up to 65504, float32 subnormals too) goes straight to
# the pairs' conversions (the rte16 SPIR-V only; not the same bits on a device without the
# modes).


def _preserved_row(test):
    """The rte16 SPIR-V under bench_timing.PRESERVE16_MODES, a row that passes `test` (GLSL
    lines ending in an `if (...) {`) converted as it is, ahead of halves_from_floats8's test."""
    anchor = "    const uint excess ="
    return bench_timing.PRESERVE16_MODES + [(
        "include/half_rows.glsl", anchor,
        "#ifdef HALVES_ROUND_TO_NEAREST_EVEN\n" + test
        + "\n        return PAIRS_OF_ROW(lo, hi);\n    }\n#endif\n" + anchor)]


PRESERVE16 = _preserved_row(
    "    if (max(range_excess(ulo, 0x00800000u), range_excess(uhi, 0x00800000u))\n"
    "            <= HALF_MAX - 0x00800000u) {")
PRESERVE16_MAX = _preserved_row(
    "    const uvec4 mlo = ulo & 0x7FFFFFFFu, mhi = uhi & 0x7FFFFFFFu;\n"
    "    if (max(max(max(mlo.x, mlo.y), max(mlo.z, mlo.w)), max(max(mhi.x, mhi.y), "
    "max(mhi.z, mhi.w))) <= HALF_MAX) {")
# 2026-12-03 (evening), the tiles' forms. term_after: the float road's term computed in a
# branch of its own after `adds` (run 2's "shipped": 65% slower for float16 3x3 average
# pooling on an H200); the shipped form computes it within the condition (run 2's
# "prev_window"). prev_cells: each cell's sum under one condition, as before HALF_TERMS.
# (Run 2 also timed the row's float16 stores position by position, as before: no change.)
TERM_AFTER = [(TILES, "            adds[w] = IN_DY(o) && tile_window_term(w, o, dy_base, terms[w], "
                      "winners[w]);",
               "            adds[w] = IN_DY(o) && tile_window(w, o, winners[w]);\n"
               "            if (adds[w]) terms[w] = tile_term(dy_base, o);")]
PREV_CELLS = [(TILES,
               """            if (!adds[w] || !(EVERY_CELL_WINS || winners[w] == own)) continue;
            if (HALF_TERMS) {
                halves[k] = half_terms[w];  // this position's one window
            } else {
                acc = acc + terms[w];
            }
""", """            const bool takes = adds[w] && (EVERY_CELL_WINS || winners[w] == own);
            if (!HALF_TERMS && takes) acc = acc + terms[w];
            if (HALF_TERMS && takes) halves[k] = half_terms[w];
""")]
HALF_RECIPROCAL = [(AVERAGE, "        if (IS_F16 && a - 1u < 0x7F7FFFFFu) {",
                    "        if (false) {")]
PREV_VARIANTS = dict(term_after=TERM_AFTER, prev_cells=PREV_CELLS)
# 2026-12-03 (late), run 2 timed the other side of each (now shipped). half_roads: a float16
# dY's zeros, Inf and NaN over a whole window's count through the reciprocal's road and
# div_count_of, as before (now given at once after HALF_BY_INTEGERS, so that the float16
# kernel carries neither road). winner_first: max pooling's float road loading dY only once
# the window's winner is known, as before (now dY first, its load in flight with the
# winner's). term_first_half: the halves road's dY loaded first too (not kept: float16 2x2
# 39.4 us against 39.2).
HALF_ROADS = [(AVERAGE,
               "        if (IS_F16) return a > 0x7F800000u ? uintBitsToFloat(0x7FC00000u) : v;\n",
               "")]
WINNER_FIRST = [(TILES, """    term = tile_term(dy_base, o);
    if (tile_window(w, o, winner)) return true;
    term = 0.0;
    return false;""", """    term = 0.0;
    if (!tile_window(w, o, winner)) return false;
    term = tile_term(dy_base, o);
    return true;""")]
TERM_FIRST_HALF = [(TILES, """            adds[w] = IN_DY(o) && tile_window(w, o, winners[w]);
            if (adds[w]) half_terms[w] = half_term(HALF_BITS(dy, dy_offset(dy_base, uvec3(o))));""",
    """            const uint h = IN_DY(o) ? HALF_BITS(dy, dy_offset(dy_base, uvec3(o))) : 0u;
            adds[w] = IN_DY(o) && tile_window(w, o, winners[w]);
            if (adds[w]) half_terms[w] = half_term(h);""")]
# winner_by_window: max pooling's tiles over the winners' pass loading each window's winner
# word by word (before 2026-12-03 (late) run 5), not each row of winners as two words
# (WINNER_WORDS).
WINNER_BY_WINDOW = [(MAX, "const bool WINNER_WORDS = ARGMAX == 2u",
                     "const bool WINNER_WORDS = false && ARGMAX == 2u")]
TERM = "    return div_count(LOAD(dy, dy_offset(dy_base, o)), count);"  # average_term's
# The float16 tiles of non-overlapping windows summing float32 terms and rounding them (before
# 2026-12-03 (evening)), in place of working on dY's halves (HALF_TERMS).
SUMS = [(TILES, "const bool HALF_TERMS = IS_F16", "const bool HALF_TERMS = false && IS_F16")]
# Max pooling's tiles loading X's footprint element by element (before 2026-12-03 (evening)).
SCALAR_KEYS = [(MAX, "        if (KEY_VECTORS && (first & (VECTOR - 1u)) == 0u) {",
                "        if (false) {")]
KERNELS = {
    "avg": ("average_pooling_grad", AVERAGE, dict(
        shipped=[], sums=SUMS, pairs=PAIRS, row_unrolled=ROW_UNROLLED, device_half=DEVICE_HALF,
        preserve16=PRESERVE16, preserve16_max=PRESERVE16_MAX,
        checked_half=bench_timing.CHECKED_HALF,
        device_div=[(AVERAGE, TERM, "    return LOAD(dy, dy_offset(dy_base, o)) / float(count);")],
        loads_only=DEVICE_HALF + [(AVERAGE, TERM, "    return LOAD(dy, dy_offset(dy_base, o));")],
        by_integers=[(AVERAGE, "    if (WHOLE_BY_RECIPROCAL && count == WINDOW_CELLS) {",
                      "    if (false) {")],
        half_reciprocal=HALF_RECIPROCAL, half_roads=HALF_ROADS, **PREV_VARIANTS,
        unguarded=[(AVERAGE, "        if (eq - 2u < 253u && abs(2 * r) < 3 * int(WINDOW_CELLS) "
                             "&& !(r < 0 && mq == 0x800000u)) {",
                    "        if (eq - 2u < 253u) {")])),
    "max": ("max_pooling_grad", MAX, dict(
        shipped=[], sums=SUMS, pairs=PAIRS, row_unrolled=ROW_UNROLLED, device_half=DEVICE_HALF,
        preserve16=PRESERVE16, preserve16_max=PRESERVE16_MAX,
        checked_half=bench_timing.CHECKED_HALF,
        scalar_keys=SCALAR_KEYS, sums_scalar_keys=SUMS + SCALAR_KEYS, **PREV_VARIANTS,
        winner_first=WINNER_FIRST, term_first_half=TERM_FIRST_HALF,
        winner_by_window=WINNER_BY_WINDOW,
        by_windows=[(MAX, "        if (ARGMAX_ROWS) {", "        if (false) {")],
        every_cell_test=[(TILES, "(EVERY_CELL_WINS || winners[w] == own)",
                          "(winners[w] == EVERY_CELL || winners[w] == own)")],
        winners_only=[(TILES, "        tile_main();", "")],
        tiles_only=[(MAX, "    if (ARGMAX != 1u) return false;",
                     "    if (true) return ARGMAX == 1u;")],
        first_cell=[(MAX, "[[unroll]] for (uint f = 0u; f < WINDOW0 * WINDOW1 * WINDOW2; ++f) {",
                     "[[unroll]] for (uint f = 0u; f < 1u; ++f) {")])),
}

# preserve16 where the device offers the modes; preserve16_max also needs the device to keep a
# float32 subnormal's sign in the conversion, which Vulkan does not promise: not listed.
SAME_BITS = ("shipped", "previous", "sums", "scalar_keys", "sums_scalar_keys", "half_reciprocal",
             "term_after", "prev_cells", "pairs", "row_unrolled", "preserve16", "checked_half",
             "by_windows", "by_integers", "every_cell_test", "unguarded", "half_roads",
             "winner_first", "term_first_half", "winner_by_window")


def main() -> None:
    args = bench_timing.variant_spirv_args(__doc__.splitlines()[0])
    if args.build:
        previous = os.environ.get("POOLING_PREVIOUS")  # an earlier commit's shaders/ folder
        for kind, (name, source, variants) in KERNELS.items():
            for stale in (Path(args.build) / name).glob("previous*.spv"):
                stale.unlink()  # an earlier build's: only this build's POOLING_PREVIOUS
            bench_timing.build_variants(Path(args.build) / name, source,
                                        dict(variants, **({"previous": []} if previous else {})),
                                        shaders_of={"previous": previous}, rte16=True)
        return
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    rows = []
    kinds = os.environ.get("POOLING_KINDS", "avg,max").split(",")
    for kind, (name, _, variants) in KERNELS.items():
        if kind not in kinds:
            continue
        chosen = os.environ.get("POOLING_VARIANTS")
        folder = Path(args.spirv) / name
        # each variant's first SPIR-V, and its second (rte16) where the device takes that
        spirv = {v: ((folder / f"{v}.spv").read_bytes(),
                     (folder / f"{v}.rte16.spv").read_bytes()
                     if (folder / f"{v}.rte16.spv").exists() else None)
                 for v in [*variants, "previous"] if (not chosen or v in chosen.split(","))
                 and (folder / f"{v}.spv").exists()}
        for operator, label, dt, build in bench_cases.pooling_cases(kind)(args.quick):
            if not args.quick and "[64, 128" in label:
                continue  # one shape: the other's rows track it within a few percent
            if dt not in os.environ.get("POOLING_DTYPES", "float32,float16").split(","):
                continue
            roofline = None  # the case's, measured once
            reference = None  # (variant, dX) of the first same-bits variant timed
            for variant, (data, rte16_data) in spirv.items():
                with bench_timing.serving(name, data, rte16_data):
                    op, tensors, nbytes, _ = build(dev, np.random.default_rng(1))
                    if roofline is None:
                        roofline = bench_timing.copy_roofline(dev, nbytes // 2 // 16 * 16,
                                                              args.repeat)
                    ns, rec = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
                dx = tensors["output_gradient_tensor"].numpy().view(np.uint8)
                if variant in SAME_BITS and reference is None:
                    reference = variant, dx
                same = None if variant not in SAME_BITS else bool((dx == reference[1]).all())
                # the SPIR-V served: a variant without an rte16 build runs its first one
                served = "rte16" if op.float16_rte and rte16_data is not None else "first"
                row = dict(operator=operator, case=label, dtype=dt, variant=variant,
                           us=ns / 1e3, roofline_share=nbytes / ns / (roofline / 1e9),
                           same_bits=same, spirv=served)
                rows.append(row)
                print(f"{operator:20s} {label:36s} {dt:8s} {variant:12s} {row['us']:8.1f} us "
                      f"{100 * row['roofline_share']:6.1f}% of copy ({served} SPIR-V)"
                      + ("" if same is None else f", same bits as {reference[0]} {same}"),
                      flush=True)
                rec.close()
                op.close()
                del tensors
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
