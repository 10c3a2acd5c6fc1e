"""What the PyTorch bridge tests share: importing torch (skip locally, fail in CI), layouts,
tolerances, and the interpolate oracle.

Tolerances follow the operator tests (tests/test_*_grad.py): errors are bounded relative to the
magnitude of the terms an element is made of (the same computation on absolute values), float32
1e-5 of it; float16 adds one float16 rounding of the result (2^-10 relative to the magnitude,
which also covers PyTorch's own float16 rounding on the other side) plus 2^-24 absolute
(float16's subnormal spacing). Extra terms are justified where they are used.
"""


import numpy as np
import os

import pytest

from conftest import IN_CI

INSTALL_HINT = ("PyTorch is not installed: pip install 'pyvkgrad[torch]' (tools/test installs "
                "a CPU build of torch==2.13.0 when CI=true or when one is at hand)")


# tools/test_wheel's installed-wheel passes install no PyTorch on purpose (the bridge's tests
# run in tools/test's main pass): there a test that needs it is skipped, in CI too.
WHEEL_PASS = os.environ.get("PYVKGRAD_EXPECT_INSTALLED") == "1"


def require(module: str, hint: str = INSTALL_HINT):
    """Import `module`; skip the calling test (module) without it, except in CI (CI=true), where
    the bridge tests must run: there a missing module fails the run, outside the installed-wheel
    passes."""
    try:
        return __import__(module)
    except ImportError as e:
        if IN_CI and not WHEEL_PASS:
            raise ImportError(f"CI=true but {module} is missing ({hint})") from e
        pytest.skip(hint, allow_module_level=True)


torch = require("torch")
F = torch.nn.functional

DTYPES = [torch.float32, torch.float16]
F32_RTOL = 1e-5


@pytest.fixture(autouse=True)
def on_the_test_device(device):
    """pyvkgrad.torch on the tests' Vulkan device (skips locally, fails in CI without one),
    reset after the test. Autouse: a test module that imports it runs every test on it."""
    import pyvkgrad.torch as vt
    vt.set_device(device)
    yield
    vt.set_device(None)


def layouts(rank):
    """Memory formats a tensor of `rank` can take: contiguous, and channels_last (4-D) or
    channels_last_3d (5-D)."""
    out = ["contiguous"]
    if rank in (4, 5):
        out.append("channels_last")
    return out


def laid_out(t, layout):
    if layout == "contiguous":
        return t.contiguous()
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.contiguous(memory_format=fmt)


def same_layout(got, like):
    """The gradient has the input's strides (where they matter), dtype and device."""
    assert got.dtype == like.dtype, f"dtype {got.dtype} != {like.dtype}"
    assert got.device == like.device
    assert got.shape == like.shape
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        if fmt != torch.contiguous_format and like.dim() != {torch.channels_last: 4,
                                                            torch.channels_last_3d: 5}[fmt]:
            continue
        assert got.is_contiguous(memory_format=fmt) == like.is_contiguous(memory_format=fmt), fmt


def assert_close(got, expected, magnitude, dtype, what, extra=0.0):
    """|got - expected| <= rtol * magnitude (+ float16's rounding) + extra, elementwise."""
    got = got.detach().double().cpu().numpy()
    expected = np.asarray(expected, np.float64)
    magnitude = np.asarray(magnitude, np.float64)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    tol = F32_RTOL * magnitude + extra
    if dtype == torch.float16:
        tol = tol + 2.0**-10 * magnitude + 2.0**-24
    err = np.abs(got - expected)
    bad = ~(err <= tol)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} beyond tolerance; first at {i}: "
                             f"got {got[i]!r}, expected {expected[i]!r}, tolerance "
                             f"{np.broadcast_to(tol, got.shape)[i]!r}")


# ---- interpolate oracle --------------------------------------------------------------------------

def forward_matrices(x_shape, **kwargs):
    """Per spatial axis, PyTorch's float32 forward as an (out, in) float64 matrix: F.interpolate
    with the caller's arguments on one-channel-per-input-index probes (one-hot along the axis,
    constant along the others) of the input's spatial sizes."""
    spatial = list(x_shape[2:])
    mats = []
    for a, n in enumerate(spatial):
        shape = [1] * len(spatial)
        shape[a] = n
        probe = torch.eye(n, dtype=torch.float32).reshape([1, n] + shape)
        probe = probe.expand([1, n] + spatial).contiguous()
        with torch.no_grad():
            out = F.interpolate(probe, **kwargs)
        index = [0, slice(None)] + [slice(None) if d == a else 0 for d in range(len(spatial))]
        mats.append(out[tuple(index)].T.double().numpy())  # (out, in)
    return mats


def apply_transpose(mats, dy):
    """dX = W^T dY over the spatial axes, in float64."""
    letters = "defgh"[:len(mats)]
    spec = ("nc" + letters + "," + ",".join(f"{c}{c.upper()}" for c in letters) + "->nc"
            + letters.upper())
    return np.einsum(spec, np.asarray(dy, np.float64), *mats)


def window(w):
    """The taps an output may read once coordinates move by one float32 rounding: the nonzero
    weights and their neighbours."""
    p = (w != 0).astype(np.float64)
    q = p.copy()
    q[:, 1:] += p[:, :-1]
    q[:, :-1] += p[:, 1:]
    return (q > 0).astype(np.float64)


def interpolate_reference(x_shape, dy, mode, **kwargs):
    """(expected dX, magnitude, coordinate term, consistent) for F.interpolate(x, mode=mode,
    **kwargs) with output gradient dy (a float tensor):

    * expected: the transpose of PyTorch's float32 forward applied to dy in float64, the exact
      gradient of what the forward computed;
    * magnitude: the same on |dy|;
    * coordinate term: linear modes compute each coordinate in float32, PyTorch as s * (o + 0.5)
      (a fused multiply-add on CPU), DirectML as (o + 0.5) / Scale; the two may differ by one
      rounding of the coordinate (measured: at most 2 * 2^-24 * input size, see
      benchmarks/investigations/torch_resample_map.py), which moves each weight by as much.
      The term bounds the result: per axis 2^-22 * input size times the sum of |dy| over the
      outputs whose taps lie within one index of the element;
    * consistent: whether PyTorch's own backward is that transpose (it is not always, for
      nearest modes: tests/test_torch_resample_map.py).
    """
    kwargs = dict(kwargs, mode=mode)
    mats = forward_matrices(x_shape, **kwargs)
    dy64 = dy.detach().double().cpu().numpy()
    expected = apply_transpose(mats, dy64)
    magnitude = apply_transpose([np.abs(m) for m in mats], np.abs(dy64))
    coordinate = 0.0
    if mode not in ("nearest", "nearest-exact"):
        near = apply_transpose([window(m) for m in mats], np.abs(dy64))
        coordinate = sum(2.0**-22 * m.shape[1] for m in mats) * near
    x = torch.zeros(x_shape, dtype=torch.float32, requires_grad=True)
    (pt,) = torch.autograd.grad(F.interpolate(x, **kwargs), x, dy.detach().float())
    consistent = bool(np.all(np.abs(pt.double().numpy() - expected)
                             <= F32_RTOL * magnitude + coordinate))
    return expected, magnitude, coordinate, consistent, pt


def randn(rng, shape, dtype=None, low=-2.0, high=2.0):
    t = torch.from_numpy(rng.uniform(low, high, size=shape).astype(np.float32))
    return t if dtype is None else t.to(dtype)
