#!/usr/bin/env python3
"""ADAM_OPTIMIZER's items per invocation (issue 30: float32 at 74-84% of the same-bytes copy
roofline on an H200, float16 at 58-65%): the plan's ITEMS_PER_INVOCATION (words or elements
an invocation takes; its workgroup computes alpha once) and PREFETCH (each item's words loaded
a pass ahead: "ahead") switched in this process, on the
benchmark's cases (16 and 256 MiB per tensor, in place). Every setting must give the same bits
(one step on fresh data, compared after the timed replays).

At 6f1be48 (results/h200-2026-12-02-adam-items/run1-vectors) this script also timed items of
one 16-byte vector of each tensor (a kernel constant VECTORS, since taken out): 30-40%
slower than words on the H200 in both data types.

    python3 benchmarks/investigations/adam_items.py [--quick] [--repeat N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad.ops import adam_optimizer as adam  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402

# name -> (ITEMS_PER_INVOCATION, PREFETCH)
LAYOUTS = {"x4": (4, False), "x8": (8, False), "x16": (16, False), "x4 ahead": (4, True),
           "x8 ahead": (8, True), "x16 ahead": (16, True)}
OUTPUTS = ("input_parameters_tensor", "input_first_moment_tensor",
           "input_second_moment_tensor")  # in place: the outputs are these tensors


def use(layout):
    adam.ITEMS_PER_INVOCATION, adam.PREFETCH = LAYOUTS[layout]


def compiled(dev, layout, x, m, v, g, dt):
    """bench_cases.adam_operator under `layout`, through a descriptor class of its own (the
    compile cache never returns another setting's plan)."""
    class Desc(pyvkgrad.AdamOptimizerDesc):
        pass
    Desc.__name__ = f"Adam_{layout.replace(' ', '_')}"
    real = pyvkgrad.AdamOptimizerDesc
    pyvkgrad.AdamOptimizerDesc = Desc
    try:
        use(layout)
        return bench_cases.adam_operator(dev, x, m, v, g, dt)
    finally:
        pyvkgrad.AdamOptimizerDesc = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    saved = adam.ITEMS_PER_INVOCATION, adam.PREFETCH
    rows = []
    no_torch = types.SimpleNamespace(torch=None)
    for dt, (x, m, v, g) in bench_cases.adam_sweep(1 << 18 if args.quick else None):
        n = x.size
        nbytes = 7 * x.nbytes
        roofline = bench_timing.same_bytes_roofline(dev, no_torch, nbytes, args.repeat)
        bits = {}
        for layout in LAYOUTS:
            op, tensors = compiled(dev, layout, x, m, v, g, dt)
            ns, rec = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
            rec.close()
            # one step on fresh data for the bits
            op2, fresh = compiled(dev, layout, x, m, v, g, dt)
            op2(**fresh)
            bits[layout] = [fresh[k].numpy().view(np.uint8) for k in OUTPUTS]
            dispatch = op.plan.dispatches[0]
            rows.append(dict(case=f"{nbytes // 7 >> 20} MiB per tensor", dtype=dt,
                             layout=layout, us=ns / 1e3, roofline_gbps=roofline / 1e9,
                             roofline_share=nbytes / ns / (roofline / 1e9),
                             workgroups=dispatch.workgroups))
            op.close()
            op2.close()
            del tensors, fresh
        first = next(iter(bits.values()))
        for row in rows[-len(LAYOUTS):]:
            row["same_bits"] = all(np.array_equal(a, b)
                                   for a, b in zip(bits[row["layout"]], first))
            print(f"{row['case']:20s} {row['dtype']:8s} {row['layout']:11s} "
                  f"{row['us']:9.1f} us {100 * row['roofline_share']:6.1f}% of copy "
                  f"({row['workgroups']} workgroups)  same bits: {row['same_bits']}",
                  flush=True)
    adam.ITEMS_PER_INVOCATION, adam.PREFETCH = saved
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
