"""How exactly DirectML's RESAMPLE1 parameters reproduce PyTorch's interpolate taps (docs/torch.md).

For every (input size, output size) pair in a range, and for scale factors that reach the
kernel, this compares per axis:

* nearest / nearest-exact: PyTorch's taps (read off its forward on an index probe) with the taps
  of the parameters pyvkgrad.torch chooses: how many pairs the natural parameters (Scale 1/s)
  reproduce, how many need a nudged InputPixelOffset, how many no candidate reproduces
  (InexactResample); and how often PyTorch's own backward is not the transpose of its forward;
* linear (align_corners False / True): the largest weight difference between PyTorch's forward
  matrix (its forward on an identity) and DirectML's, in units of 2^-24 * input size, and how
  many axes agree bitwise.

    python benchmarks/investigations/torch_resample_map.py [--max-in 64] [--max-out 128]
"""

import argparse
import collections

import numpy as np
import torch
import torch.nn.functional as F

from pyvkgrad.torch import _resample_map as rm

SCALE_FACTORS = (2.0, 3.0, 4.0, 0.5, 1.5, 2.5, 1 / 3, 0.25, 0.75, 1.25, 1.7, 2.3, 0.3, 1.05)


def torch_matrix(i, o, mode, align_corners, size=None, scale=None, recompute=None):
    """PyTorch's forward as an (out, in) matrix: its forward on the identity (float32)."""
    x = torch.eye(i, dtype=torch.float32).reshape(1, i, i)
    y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align_corners,
                      recompute_scale_factor=recompute)
    return y[0].T.double().numpy()


def torch_backward_matrix(i, o, mode, align_corners, size=None, scale=None, recompute=None):
    """PyTorch's backward as an (out, in) matrix: the gradients of one-hot output gradients."""
    x = torch.zeros(1, o, i, requires_grad=True)
    y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align_corners,
                      recompute_scale_factor=recompute)
    (g,) = torch.autograd.grad(y, x, torch.eye(o).reshape(1, o, o))
    return g[0].double().numpy()


def cases(max_in, max_out):
    for i in range(1, max_in + 1):
        for o in range(1, max_out + 1):
            yield i, o, dict(size=o), None
    for sf in SCALE_FACTORS:
        for i in range(1, max_in + 1):
            o = int(np.floor(i * sf))
            if o >= 1:
                yield i, o, dict(scale=sf, recompute=False), sf


def nearest_study(mode, max_in, max_out):
    counts = collections.Counter()
    inexact, inconsistent = [], []
    for i, o, kw, sf in cases(max_in, max_out):
        (taps,) = rm.probe_nearest_taps(torch, F, mode, (i,), (o,), kw.get("size"),
                                        kw.get("scale"), kw.get("recompute"), "cpu")
        natural = next(rm.nearest_candidates(mode, i, o, sf))
        try:
            params = rm.nearest_params(mode, i, o, sf, taps)
            kind = ("identity" if params.identity else
                    "natural" if params == natural else "nudged")
        except rm.InexactResample:
            kind = "inexact"
            inexact.append((i, o, sf))
        counts[("size" if sf is None else "scale_factor", kind)] += 1
        if not np.array_equal(torch_matrix(i, o, mode, None, **kw),
                              torch_backward_matrix(i, o, mode, None, **kw)):
            inconsistent.append((i, o, sf))
    return counts, inexact, inconsistent


def linear_study(align_corners, max_in, max_out):
    worst, bitwise, total = 0.0, 0, 0
    for i, o, kw, sf in cases(max_in, max_out):
        params = rm.linear_params(i, o, sf, align_corners)
        diff = np.abs(torch_matrix(i, o, "linear", align_corners, **kw)
                      - rm.dml_matrix(i, o, params, True)).max()
        worst = max(worst, diff / (2.0**-24 * max(i, 1)))
        bitwise += diff == 0
        total += 1
    return worst, bitwise, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-in", type=int, default=64)
    ap.add_argument("--max-out", type=int, default=128)
    args = ap.parse_args()
    print(f"torch {torch.__version__}; input sizes 1..{args.max_in}, output sizes "
          f"1..{args.max_out}, scale factors {SCALE_FACTORS} (not recomputed)")
    for mode in rm.NEAREST_MODES:
        counts, inexact, inconsistent = nearest_study(mode, args.max_in, args.max_out)
        print(f"\n{mode}:")
        for (source, kind), n in sorted(counts.items()):
            print(f"  {source:12s} {kind:9s} {n}")
        print(f"  inexpressible (first 12): {inexact[:12]}")
        print(f"  PyTorch's backward is not its forward's transpose in {len(inconsistent)} "
              f"cases (first 12): {inconsistent[:12]}")
    for align_corners in (False, True):
        worst, bitwise, total = linear_study(align_corners, args.max_in, args.max_out)
        print(f"\nlinear, align_corners={align_corners}: {bitwise}/{total} axes bitwise equal; "
              f"largest weight difference {worst:.2f} x 2^-24 x input size")


if __name__ == "__main__":
    main()
