#!/usr/bin/env python3
"""Exploration (not part of the benchmark): BATCH_NORMALIZATION_TRAINING_GRAD's fused kernel
across chunk lengths and worker counts, next to the three-kernel plan and the same-bytes copy,
checked against the three-kernel results. One table; JSON into --out."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
from benchmarks.run import _bn, copy_roofline, vulkan_time  # noqa: E402
from pyvkgrad.ops import _batch_normalization as bn  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    dev = pyvkgrad.default_device()
    rows = []
    variants = [("three kernels", None, None)] + [
        (f"fused iters {i} in-flight {b >> 20} MiB", i, b)
        for i in (4, 8, 16) for b in (8 << 20, 16 << 20, 32 << 20, 1 << 40)]
    for shape in ((32, 64, 112, 112), (256, 256, 14, 14)):
        for dt in ("float32", "float16"):
            base = None
            for name, iters, inflight in variants:
                waits = iters is not None
                if waits:
                    bn.FUSED_ITERS, bn.FUSED_IN_FLIGHT_BYTES = iters, inflight
                limits = dataclasses.replace(dev.limits, cross_workgroup_waits=waits)
                dev._limits = (dev._limits[0], limits)  # this run's plan choice
                op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), shape, True, dt)
                ns, _ = vulkan_time(dev, op, tensors, args.repeat)
                out = tensors["output_gradient_tensor"].numpy().astype(np.float64)
                if base is None:
                    base = out
                err = float(np.abs(out - base).max() / np.abs(base).max())
                roof = copy_roofline(dev, nbytes // 2 // 16 * 16, args.repeat)
                row = dict(shape=shape, dtype=dt, variant=name, us=ns / 1e3,
                           gbps=nbytes / ns, pct_copy=100 * nbytes / ns / (roof / 1e9),
                           rel_diff_vs_three_kernels=err,
                           kernels=[d.kernel for d in op.plan.dispatches],
                           workgroups=[d.workgroups for d in op.plan.dispatches])
                rows.append(row)
                print(f"{str(shape):<20}{dt:<9}{name:<34}{row['us']:9.1f} us "
                      f"{row['pct_copy']:6.1f}% copy  diff {err:.1e}", flush=True)
                for t in tensors.values():
                    t.close()
                op.close()
    # BATCH_NORMALIZATION_GRAD: vectors per lane in a chunk of its (dX-writing) reduction.
    for shape in ((32, 64, 112, 112), (256, 256, 14, 14)):
        for dt in ("float32", "float16"):
            for iters in (4, 8, 16):
                bn.ITERS_MAX_VECTORS = iters
                dev._limits = (dev._limits[0], dev._make_limits())
                op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), shape, False, dt)
                ns, _ = vulkan_time(dev, op, tensors, args.repeat)
                roof = copy_roofline(dev, nbytes // 2 // 16 * 16, args.repeat)
                row = dict(shape=shape, dtype=dt, variant=f"grad iters {iters}", us=ns / 1e3,
                           pct_copy=100 * nbytes / ns / (roof / 1e9))
                rows.append(row)
                print(f"{str(shape):<20}{dt:<9}{row['variant']:<34}{row['us']:9.1f} us "
                      f"{row['pct_copy']:6.1f}% copy", flush=True)
                for t in tensors.values():
                    t.close()
                op.close()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bn_fused_sweep.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
