#!/usr/bin/env python3
"""RANDOM_GENERATOR's blocks per invocation (issue 30: 64-73% of a fill of the same bytes at
16-256 MiB on an H200, 96% at 1 GiB: a cost per invocation, not per byte). The benchmark's
cases (16 MiB to 1 GiB of uint32, the state in place) timed with the kernel's BLOCKS from 1 to
4 (pyvkgrad/ops/random_generator.py's BLOCKS_PER_INVOCATION), against the write-only
roofline measured in the same run, and the outputs compared bit for bit with BLOCKS 1's.
--state here,after,none: also with the new state stored by the one dispatch (STATE_HERE, the
default since 2026-12-02), by a second dispatch after it (before), or not at all (no
OutputStateTensor: what the state costs); the new state is checked too.
(2026-12-04 timed two more ticket designs, both slower, with --tickets: commits b54768a,
tickets spread over several words, and e0b47a5, each workgroup's ticket taken after its first
pass; benchmarks/results/h200-2026-12-04-tickets.)

    python3 benchmarks/investigations/random_variants.py [--quick] [--repeat N]
        [--blocks 1,2,3,4] [--passes 8] [--state here,after,none]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad.ops import random_generator as random_generator_module  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--blocks", default="1,2,3,4")
    ap.add_argument("--state", default="here")
    ap.add_argument("--passes", default="1", help="PASSES_PER_INVOCATION settings")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    rows = []
    module = random_generator_module  # the plan's settings, switched in this process
    shipped = module.BLOCKS_PER_INVOCATION, module.STATE_HERE, module.PASSES_PER_INVOCATION
    settings = [(int(b), where, int(p)) for where in args.state.split(",")
                for b in args.blocks.split(",") for p in args.passes.split(",")]
    for _, label, _, build in bench_cases.random_generator_cases(args.quick):
        base = None
        fill = None
        for blocks, where, passes in settings:
            module.BLOCKS_PER_INVOCATION = blocks
            module.PASSES_PER_INVOCATION = passes
            module.STATE_HERE = where == "here"
            op, tensors, nbytes, _, _ = build(dev, np.random.default_rng(1))
            if where == "none":  # the same output, no OutputStateTensor
                op.close()
                op = dev.compile(pyvkgrad.RandomGeneratorDesc(
                    tensors["input_state_tensor"].desc, tensors["output_tensor"].desc, None))
                del tensors["output_state_tensor"]
            if fill is None:
                fill = bench_timing.write_roofline(dev, nbytes, args.repeat)
            start = tensors["input_state_tensor"].numpy().copy()
            ns, rec = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
            # One more execute from the starting state, for the bits.
            tensors["input_state_tensor"].write(start)
            op(**tensors)
            out = tensors["output_tensor"].numpy()
            if base is None:
                base = out.copy()
            words = [int(w) for w in start.reshape(-1)]
            counter = sum(w << (32 * i) for i, w in enumerate(words[:4]))
            counter = (counter + (0 if where == "none" else -(-out.size // 4))) % 2**128
            want = [(counter >> (32 * i)) & 0xFFFFFFFF for i in range(4)] + words[4:]
            row = dict(case=label, blocks=blocks, passes=passes, state=where,
                       dispatches=len(op.plan.dispatches),
                       workgroups=op.plan.dispatches[0].workgroups, us=ns / 1e3,
                       fill_gbps=fill / 1e9, fill_share=nbytes / ns / (fill / 1e9),
                       same_bits=bool(np.array_equal(out, base)),
                       state_ok=tensors["input_state_tensor"].numpy().reshape(-1).tolist()
                       == want)
            rows.append(row)
            print(f"{label:36s} BLOCKS {blocks} passes {passes} state {where:5s} "
                  f"({row['workgroups']:6d} "
                  f"workgroups, {row['dispatches']} dispatches) {row['us']:9.1f} us "
                  f"{100 * row['fill_share']:6.1f}% of fill  same bits: {row['same_bits']}, "
                  f"state: {row['state_ok']}", flush=True)
            rec.close()
            op.close()
            del tensors
    module.BLOCKS_PER_INVOCATION, module.STATE_HERE, module.PASSES_PER_INVOCATION = shipped
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
