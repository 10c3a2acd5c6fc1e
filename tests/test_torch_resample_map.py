"""The mapping from PyTorch's interpolate to DirectML's RESAMPLE1 parameters (docs/torch.md),
checked against PyTorch's own float32 forward over many sizes and scale factors:

* nearest, nearest-exact: the taps of the chosen parameters equal PyTorch's exactly, or the
  bridge refuses (InexactResample) where no parameters can (a small, documented fraction);
* linear, align_corners False and True: every weight within 4 * 2^-24 * input size of
  PyTorch's (one float32 rounding of the coordinate: PyTorch multiplies by 1/scale, DirectML
  divides by Scale);
* PyTorch's own nearest backward is not always its forward's transpose (documented cases).

benchmarks/investigations/torch_resample_map.py prints the same figures over larger ranges.
"""

import numpy as np
import pytest

from torch_support import F, torch

import pyvkgrad
from pyvkgrad.torch import _resample_map as rm

MAX_IN, MAX_OUT = 20, 40
SCALE_FACTORS = (2.0, 3.0, 0.5, 1.5, 2.5, 1 / 3, 0.75, 1.7, 2.3, 0.3, 1.05)


def cases():
    for i in range(1, MAX_IN + 1):
        for o in range(1, MAX_OUT + 1):
            yield i, o, dict(size=o), None
    for sf in SCALE_FACTORS:
        for i in range(1, MAX_IN + 1):
            if int(i * sf) >= 1:  # the output size (int(i * sf) when recomputed)
                yield i, None, dict(scale_factor=sf, recompute_scale_factor=False), sf
                yield i, None, dict(scale_factor=sf, recompute_scale_factor=True), None


def forward_matrix(i, mode, align_corners=None, **kw):
    x = torch.eye(i, dtype=torch.float32).reshape(1, i, i)
    with torch.no_grad():
        y = F.interpolate(x, mode=mode, align_corners=align_corners, **kw)
    return y[0].T.double().numpy()  # (out, in)


def backward_matrix(i, o, mode, **kw):
    x = torch.zeros(1, o, i, requires_grad=True)
    (g,) = torch.autograd.grad(F.interpolate(x, mode=mode, **kw), x,
                               torch.eye(o).reshape(1, o, o))
    return g[0].double().numpy()


@pytest.mark.parametrize("mode", rm.NEAREST_MODES)
def test_nearest_taps_exact_or_refused(mode):
    refused, total = [], 0
    for i, o, kw, sf in cases():
        w = forward_matrix(i, mode, **kw)
        o = w.shape[0]
        (taps,) = rm.probe_nearest_taps(torch, F, mode, (i,), (o,), kw.get("size"),
                                        kw.get("scale_factor"), kw.get("recompute_scale_factor"),
                                        "cpu")
        assert np.array_equal(taps, w.argmax(axis=1)), "the probe reads PyTorch's taps"
        total += 1
        try:
            params = rm.nearest_params(mode, i, o, sf, taps)
        except rm.InexactResample:
            refused.append((i, o, sf))
            continue
        np.testing.assert_array_equal(rm.dml_matrix(i, o, params, False), w,
                                      err_msg=f"{mode} {i}->{o} {kw}: {params}")
    assert len(refused) <= 0.02 * total, refused


def test_device_gradient_is_the_forward_transpose_bitwise(device):
    """The chosen parameters through the device's ResampleGrad (not just the host tables): a
    nearest gradient of integer-valued dY is exact, so it must equal W^T dY bit for bit."""
    rng = np.random.default_rng(7)
    for mode in rm.NEAREST_MODES:
        for i, o, sf in ((5, 13, None), (7, 3, None), (6, 14, 2.3), (9, 15, 1.7), (4, 41, None)):
            kw = dict(size=o) if sf is None else dict(scale_factor=sf,
                                                     recompute_scale_factor=False)
            w = forward_matrix(i, mode, **kw)
            o = w.shape[0]
            (taps,) = rm.probe_nearest_taps(torch, F, mode, (i,), (o,), kw.get("size"),
                                            kw.get("scale_factor"), False if sf else None,
                                            "cpu")
            params = rm.nearest_params(mode, i, o, sf, taps)
            dy = rng.integers(-50, 50, size=(2, o)).astype(np.float32)
            dx = pyvkgrad.resample_grad(dy, (2, i), scales=(1.0, params.scale),
                                        input_pixel_offsets=(0.0, params.input_pixel_offset),
                                        output_pixel_offsets=(0.0, params.output_pixel_offset),
                                        device=device)
            np.testing.assert_array_equal(dx, dy @ w, err_msg=f"{mode} {i}->{o} sf={sf}")


@pytest.mark.parametrize("align_corners", [False, True])
def test_linear_weights_within_one_coordinate_rounding(align_corners):
    worst = 0.0
    for i, o, kw, sf in cases():
        w = forward_matrix(i, "linear", align_corners, **kw)
        o = w.shape[0]
        params = rm.linear_params(i, o, sf, align_corners)
        diff = np.abs(rm.dml_matrix(i, o, params, True) - w).max()
        worst = max(worst, diff / (2.0**-24 * i))
    # measured up to 2.46 (benchmarks/investigations/torch_resample_map.py)
    assert worst <= 4.0, worst


def test_known_refusal_and_pytorch_inconsistencies():
    """Figures docs/torch.md quotes: nearest-exact 20 -> 46 is refused; PyTorch's nearest-exact
    backward for 2 -> 41 and nearest with scale_factor 1.05 on 5 -> 5 are not the transpose of
    its forward (the bridge follows the forward)."""
    (taps,) = rm.probe_nearest_taps(torch, F, "nearest-exact", (20,), (46,), 46, None, None,
                                    "cpu")
    with pytest.raises(rm.InexactResample):
        rm.nearest_params("nearest-exact", 20, 46, None, taps)
    assert not np.array_equal(forward_matrix(2, "nearest-exact", size=41),
                              backward_matrix(2, 41, "nearest-exact", size=41))
    kw = dict(scale_factor=1.05, recompute_scale_factor=False)
    assert not np.array_equal(forward_matrix(5, "nearest", **kw),
                              backward_matrix(5, 5, "nearest", **kw))
