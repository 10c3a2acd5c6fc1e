#!/usr/bin/env python3
"""Exploration (not part of the benchmark): BATCH_NORMALIZATION_TRAINING_GRAD's fused kernel
across chunk lengths and in-flight budgets, next to the three-kernel plan, and
BATCH_NORMALIZATION_GRAD's chunk length; each variant in a fresh process (long-lived processes
were measured up to 2x slower on the H100), with the same-bytes copy measured in that process.
One table; JSON into --out."""

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
from benchmarks.run import _bn, copy_roofline, vulkan_time  # noqa: E402
from pyvkgrad.ops import _batch_normalization as bn  # noqa: E402

SHAPES = ((32, 64, 112, 112), (256, 256, 14, 14))


def variants():
    for shape in SHAPES:
        for dt in ("float32", "float16"):
            yield dict(shape=shape, dtype=dt, training=True, waits=False, iters=None, bytes=None)
            for iters in (4, 8):
                for budget in (4 << 20, 8 << 20, 16 << 20):
                    yield dict(shape=shape, dtype=dt, training=True, waits=True, iters=iters,
                               bytes=budget)
            for iters in (4, 8):
                yield dict(shape=shape, dtype=dt, training=False, waits=False, iters=iters,
                           bytes=None)


def one(v, repeat):
    dev = pyvkgrad.default_device()
    if v["training"] and v["waits"]:
        bn.FUSED_ITERS, bn.FUSED_IN_FLIGHT_BYTES = v["iters"], v["bytes"]
    if not v["training"]:
        bn.ITERS_MAX_VECTORS = v["iters"]
    limits = dataclasses.replace(dev.limits, cross_workgroup_waits=v["waits"])  # its plan
    op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), tuple(v["shape"]),
                                 v["training"], v["dtype"], limits)
    ns, _ = vulkan_time(dev, op, tensors, repeat)
    roof = copy_roofline(dev, nbytes // 2 // 16 * 16, repeat)
    out = tensors["output_gradient_tensor"].numpy()
    return dict(v, us=ns / 1e3, pct_copy=100 * nbytes / ns / (roof / 1e9),
                checksum=float(np.abs(out.astype(np.float64)).sum()),
                workgroups=[d.workgroups for d in op.plan.dispatches])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one(json.loads(args.one), args.repeat)), flush=True)
        return
    rows = []
    for v in variants():
        res = subprocess.run([sys.executable, __file__, "--one", json.dumps(v),
                              "--repeat", str(args.repeat)], capture_output=True, text=True)
        line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            print("failed:", v, res.stderr[-500:], flush=True)
            continue
        r = json.loads(line[0][7:])
        rows.append(r)
        name = ("grad iters %d" % r["iters"] if not r["training"] else
                "training three kernels" if not r["waits"] else
                f"training fused iters {r['iters']} in-flight {r['bytes'] >> 20} MiB")
        print(f"{str(tuple(r['shape'])):<20}{r['dtype']:<9}{name:<42}{r['us']:9.1f} us "
              f"{r['pct_copy']:6.1f}% copy  wg {r['workgroups']}  sum {r['checksum']:.6e}",
              flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bn_fused_sweep.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
