"""BATCH_NORMALIZATION_GRAD in place (dX bound over X, then over dY) against separate buffers,
bit for bit, on shapes whose plan is one kernel that stores dX as it reads dY (float32, dX
laid out as dY: the exact sums kernel's WRITE_DX, and the direct kernel). Prints, per shape
and binding, how many of `--repeat` calls differ. Run from the project root (or another
tree, h200_prelude.sh's `in_tree`):

    python3 benchmarks/investigations/bn_in_place.py [--repeat 20]
"""

from __future__ import annotations

import argparse

import numpy as np

import pyvkgrad
from pyvkgrad import DataType, TensorDesc

SHAPES = (((3, 10, 7), (1, 1, 1)), ((2, 3, 64), (1, 3, 1)), ((64, 4099), (1, 4099)),
          ((1000, 33), (1, 33)), ((8, 32, 28, 28), (1, 32, 1, 1)),
          # the direct kernel (at most 32 elements per channel), which stores dX as it reads too
          ((3, 10, 7), (1, 10, 1)), ((32, 4099), (1, 4099)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    device = pyvkgrad.default_device()
    rng = np.random.default_rng(7)
    for shape, stat in SHAPES:
        d, s = TensorDesc(DataType.FLOAT32, shape), TensorDesc(DataType.FLOAT32, stat)
        desc = pyvkgrad.BatchNormalizationGradDesc(d, d, s, s, s, d, s, s, 1e-3)
        kernels = [k.kernel for k in desc.plan(device.limits).dispatches]
        op = device.compile(desc)
        bad = {"X": 0, "dY": 0}
        for _ in range(args.repeat):
            x = rng.standard_normal(shape).astype(np.float32)
            dy = rng.standard_normal(shape).astype(np.float32)
            axes = tuple(i for i, n in enumerate(stat) if n == 1)
            mean = x.mean(axes, keepdims=True).astype(np.float32)
            var = x.var(axes, keepdims=True).astype(np.float32)
            scale = rng.standard_normal(stat).astype(np.float32)
            ins = [device.upload(a) for a in (x, dy, mean, var, scale)]
            outs = [device.empty(d), device.empty(s), device.empty(s)]
            names = [n for n, _ in desc.tensor_fields()]
            op(**dict(zip(names, ins + outs)))
            want = [o.numpy() for o in outs]
            for over, index in (("X", 0), ("dY", 1)):
                ins = [device.upload(a) for a in (x, dy, mean, var, scale)]
                outs = [ins[index], device.empty(s), device.empty(s)]
                op(**dict(zip(names, ins + outs)))
                got = [o.numpy() for o in outs]
                bad[over] += any(g.tobytes() != w.tobytes() for g, w in zip(got, want))
        print(f"{shape} over {stat} ({', '.join(kernels)}): calls differing from separate "
              f"buffers, of {args.repeat}: dX over X {bad['X']}, dX over dY {bad['dY']}",
              flush=True)


if __name__ == "__main__":
    main()
