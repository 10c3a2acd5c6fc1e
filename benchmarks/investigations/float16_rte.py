#!/usr/bin/env python3
"""The kernels' rte16 SPIR-V (float16 rounded by the device under RoundingModeRTE) against the
integer rounding, in turn in one process (PYVKGRAD_FLOAT16_RTE=1 and 0; the same bits): the
benchmark's float16 ADAM_OPTIMIZER and pooling cases, kernel time (Vulkan timestamps). On
lavapipe: the same times (a first design, packHalf2x16 under the mode, was 12-30% slower
there).

    python3 benchmarks/investigations/float16_rte.py [--quick] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402


def cases(quick):
    """(label, build): build(device) -> (operator, tensors), float16 only."""
    for dt, (x, m, v, g) in bench_cases.adam_sweep(1 << 20 if quick else None):
        if dt == "float16":
            yield (f"ADAM_OPTIMIZER {x.size} elements",
                   lambda dev, t=(x, m, v, g): bench_cases.adam_operator(dev, *t, "float16"))
    for kind in ("avg", "max"):
        for operator, label, dt, build in bench_cases.pooling_cases(kind)(quick):
            if dt == "float16":
                yield (f"{operator} {label}",
                       lambda dev, b=build: b(dev, np.random.default_rng(1))[:2])


def main() -> None:
    args = bench_timing.diagnostic_args(repeat=5)
    dev = pyvkgrad.default_device()
    lines = [f"device: {dev.name}"]
    print(lines[0], flush=True)
    for label, build in cases(args.quick):
        for setting in ("1", "0", "1", "0"):
            os.environ["PYVKGRAD_FLOAT16_RTE"] = setting
            op, tensors = build(dev)
            ns, rec = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
            lines.append(f"{label:60s} {'rte16' if setting == '1' else 'integer':8s} "
                         f"{ns / 1e6:9.3f} ms")
            print(lines[-1], flush=True)
            rec.close()
            op.close()
    os.environ.pop("PYVKGRAD_FLOAT16_RTE")
    Path(args.out, "float16_rte.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
