"""The pooling grads' tiles against the per-element gather (pyvkgrad/ops/_pooling_grad.py's
TILE_WIDTH and TILE_HEIGHT; width 0 is the gather, None the plan's default): the benchmark's
pooling cases timed per variant, outputs checked bit for bit against the gather's, and the
SPIR-V each plan runs counted after specialization (spirv-opt folds the plan's constants,
inlines and unrolls what it can: static instructions per dX element, a rough,
device-independent proxy for the ALU work; needs spirv-opt on PATH, else 0).

    python3 benchmarks/investigations/pooling_grad_variants.py [--quick] [--widths 0,2,4,8,None]
        [--heights 2,4,None] [--kinds avg,max] [--argmax None,False,True]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad import kernels  # noqa: E402
from pyvkgrad.ops import _pooling_grad, max_pooling_grad  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402


def spirv_instructions(dispatch) -> int:
    """Instructions of `dispatch`'s kernel once its constants are folded and its loops
    unrolled (0 without spirv-opt)."""
    if not shutil.which("spirv-opt") or not shutil.which("spirv-dis"):
        return 0
    iface = kernels.manifest_entry(dispatch.kernel)
    words = kernels.specialization(dispatch.kernel, dispatch.constants)
    values = []
    for c, w in zip(iface["constants"], words):
        values.append(f"{c['id']}:{('true' if w else 'false') if c['type'] == 'bool' else int(w)}")
    src = Path(kernels.__file__).parent / "spirv" / f"{dispatch.kernel}.spv"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.spv"
        subprocess.run(["spirv-opt", str(src), "-o", str(out),
                        "--set-spec-const-default-value", " ".join(values),
                        "--freeze-spec-const", "--fold-spec-const-op-composite", "-O",
                        "--loop-unroll", "-O"], check=True)
        text = subprocess.run(["spirv-dis", "--raw-id", str(out)], check=True,
                              capture_output=True, text=True).stdout
    body = text[text.index("OpFunction "):]
    return sum(1 for line in body.splitlines()
               if line.strip() and not line.strip().startswith(("OpLabel", "OpFunction",
                                                                 "OpLine", "OpName")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--widths", default="0,2,4,8,None")
    ap.add_argument("--heights", default="None", help="TILE_HEIGHT values (2, 4, None, ...)")
    ap.add_argument("--kinds", default="avg,max", help="avg, max or both")
    ap.add_argument("--argmax", default="None",
                    help="max pooling's ARGMAX_PASS values (None, False, True, ...)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    args = ap.parse_args()
    widths = [None if w == "None" else int(w) for w in args.widths.split(",")]
    heights = [None if h == "None" else int(h) for h in args.heights.split(",")]
    argmaxes = [{"None": None, "False": False, "True": True}[a] for a in args.argmax.split(",")]
    dev = pyvkgrad.default_device()
    rng = np.random.default_rng(0)
    rows = []
    print(f"device: {dev.name}")
    for kind in args.kinds.split(","):
        for operator, label, dt, build in bench_cases.pooling_cases(kind)(args.quick):
            base = None
            shapes = [(w, h) for w in widths for h in (heights if w != 0 else [None])]
            for width, height, argmax in [(w, h, a) for w, h in shapes
                                          for a in (argmaxes if kind == "max" and w != 0
                                                    else [None])]:
                _pooling_grad.TILE_WIDTH, _pooling_grad.TILE_HEIGHT = width, height
                max_pooling_grad.ARGMAX_PASS = argmax
                op, tensors, nbytes, _ = build(dev, np.random.default_rng(1))
                ns, _ = bench_timing.vulkan_time(dev, op, tensors, args.repeat)
                us = ns / 1e3
                dx = tensors["output_gradient_tensor"].numpy()
                out = dx.view(np.uint8)
                if base is None:
                    base = out.copy()
                d = op.plan.dispatches[-1]  # the gather's or tiles' (after ARGMAX's)
                per_invocation = dx.size / dict(d.push)["count"]
                instr = spirv_instructions(d)
                row = dict(operator=operator, case=label, dtype=dt, tile_width=width,
                           tile_height=height, argmax=d.constant("ARGMAX") if kind == "max"
                           else None, tile=d.constant("TILE"),
                           tiled=bool(d.constant("TILED")), us=us, gbps=nbytes / us / 1e3,
                           same_bits=bool((out == base).all()), spirv=instr,
                           spirv_per_element=round(instr / per_invocation, 1))
                rows.append(row)
                print(f"{operator:20s} {label:40s} {dt:8s} tile {width}x{height} "
                      f"argmax {row['argmax']}: "
                      f"{row['tiled'] and row['tile']!s:10s} {us:10.1f} us "
                      f"{row['gbps']:7.1f} GB/s, SPIR-V {instr} "
                      f"({row['spirv_per_element']} per element), same bits "
                      f"{row['same_bits']}", flush=True)
    _pooling_grad.TILE_WIDTH = _pooling_grad.TILE_HEIGHT = None
    max_pooling_grad.ARGMAX_PASS = None
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
