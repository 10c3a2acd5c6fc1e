"""LOCAL_RESPONSE_NORMALIZATION_GRAD: the worked examples of docs/semantics.md §15, PyTorch's
local_response_norm backward (odd sizes: the same windows), the accuracy of pow_fixed, the
special cases (N <= 0, Beta = 0), the spatial window (CrossChannel false), sizes that break
kernels, strided tensors, the same bits under other workgroup widths, loop limits (windows
walked over several dispatches) and buffer cuts, and the error rules. The operator table's
tests cover the rest (the oracle at every layout and data type, fuzzing, the compiled
descriptor)."""

import dataclasses

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, operators, reference
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.ops.local_response_normalization_grad import LocalResponseNormalizationGradDesc
from pyvkgrad.plan import Limits

LRN = pyvkgrad.local_response_normalization_grad
RECORD = operators.BY_NAME["local_response_normalization_grad"]


def bits(array):
    return np.asarray(array).view(f"u{array.dtype.itemsize}")


def check(device, x, dy, *parameters):
    """The device within the record's tolerance of the oracle; inputs unchanged."""
    before = x.copy(), dy.copy()
    got = LRN(x, dy, *parameters, device=device)
    operators.assert_close(RECORD, got, (x, dy, *parameters), {}, x.dtype)
    np.testing.assert_array_equal(bits(x), bits(before[0]))
    np.testing.assert_array_equal(bits(dy), bits(before[1]))
    return got


def normal(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- worked examples (docs/semantics.md §15) ----------------------------------------------------

@pytest.mark.parametrize("size, want", [
    (3, [29 / 225, -56 / 225, 467 / 9075, 1643 / 18150]),   # LRN-1
    (2, [1 / 9, -125 / 882, -323 / 5929, 12 / 121]),        # LRN-2: even, windows {c, c + 1}
])
def test_worked_examples(device, size, want):
    """X [1, 2, 3, -1], dY [1, -1, 2, 0.5], Bias 1, Beta 1, Alpha = L (so Alpha / L = 1)."""
    x = np.array([1, 2, 3, -1], np.float32).reshape(1, 4, 1, 1)
    dy = np.array([1, -1, 2, 0.5], np.float32).reshape(1, 4, 1, 1)
    got = LRN(x, dy, True, size, float(size), 1.0, 1.0, device=device).reshape(-1)
    np.testing.assert_allclose(got, want, rtol=2e-6)
    np.testing.assert_allclose(reference.local_response_normalization_grad(
        x, dy, True, size, float(size), 1.0, 1.0).reshape(-1), want, rtol=1e-14)
    # The same window along H or W with CrossChannel false (one channel, an L x L window over
    # a 4 x 1 or 1 x 4 plane is the channel window's).
    for shape in ((1, 1, 4, 1), (1, 1, 1, 4)):
        got = LRN(x.reshape(shape), dy.reshape(shape), False, size, float(size), 1.0, 1.0,
                  device=device)
        np.testing.assert_allclose(got.reshape(-1), want, rtol=2e-6)


# ---- PyTorch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1, 3, 5, 7])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pytorch_local_response_norm_backward(device, rng, size, dtype):
    """F.local_response_norm(x, size, alpha, beta, k) backward is this operator with
    CrossChannel, L = size and Alpha = alpha (both divide by L), for odd sizes, where the
    windows agree; float16 within the float16 tolerance of PyTorch's float32 result."""
    from torch_support import torch
    # float16 values in float32 for PyTorch: only the result's rounding differs.
    x = torch.from_numpy(normal(rng, (2, 9, 5, 4), dtype).astype(np.float32)).requires_grad_()
    dy = normal(rng, (2, 9, 5, 4), dtype).astype(np.float32)
    alpha, beta, k = 1e-2, 0.75, 2.0
    torch.nn.functional.local_response_norm(x, size, alpha, beta, k).backward(
        torch.from_numpy(dy))
    want = x.grad.numpy().astype(np.float64)
    got = LRN(x.detach().numpy().astype(dtype), dy.astype(dtype), True, size, alpha, beta, k,
              device=device)
    magnitude, = RECORD.magnitudes((x.detach().numpy(), dy, True, size, alpha, beta, k), {})
    tolerance = RECORD.tolerance_for(dtype).bound(want, magnitude) + 1e-6 * magnitude
    assert np.all(np.abs(got - want) <= tolerance)


# ---- pow_fixed's accuracy, special cases --------------------------------------------------------

@pytest.mark.parametrize("beta, ulps", [(0.75, 2), (0.5, 2), (1.0, 2), (1 / 3, 2), (1.7, 3),
                                        (-0.75, 2), (3.5, 4.5), (7.9, 9)])
def test_pow_fixed_within_a_few_ulps(device, rng, beta, ulps):
    """N^-Beta alone: with X = 0 in channel 0 and dY = 1 there, dX = N^-Beta exactly, where
    N = Bias + (Alpha / 3) X_1^2 is float32 the host can repeat; over N from 1e-3 to 1e6,
    within 1 + |Beta| float32 ulps (docs/semantics.md §15), or 0 for a subnormal result on a
    device that flushes them (an H200: Beta 7.9 puts N^-Beta below 2^-126 for N > 6e4)."""
    x1 = (10 ** rng.uniform(-3, 3, 4000)).astype(np.float32)
    for bias in (1.0, 1e-3):
        x = np.zeros((1, 2, x1.size, 1), np.float32)
        x[0, 1, :, 0] = x1
        dy = np.zeros_like(x)
        dy[0, 0] = 1
        got = LRN(x, dy, True, 3, 3.0, beta, bias, device=device)[0, 0, :, 0]
        n = np.float32(bias) + np.float32(1.0) * (np.float32(0) + x1 * x1)
        want = n.astype(np.float64) ** -float(np.float32(beta))
        error = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
        # A result below 2^-126 may flush to 0 on a device that flushes float32 subnormals,
        # which is outside the same-bits contract (docs/semantics.md §17): an H200 does.
        flushed = (want < 2.0**-126) & (got == 0)
        assert error[~flushed].max() <= ulps, (beta, bias, error[~flushed].max())


def test_special_cases(device):
    """Beta = 0: dX = dY (N^0 = 1, the coefficient 0); N < 0 (a negative Bias): NaN, also for
    an integer Beta and for Beta = 0 (N^(-Beta - 1) = N^-1 is NaN there, times 0); Bias 0 with
    an all-zero window: N = 0, NaN (0 Inf)."""
    x = np.array([0, 0, 1, 2, 0, 0, 0], np.float32).reshape(1, 7, 1, 1)
    dy = np.arange(1, 8, dtype=np.float32).reshape(1, 7, 1, 1)
    np.testing.assert_array_equal(LRN(x, dy, True, 3, 1.0, 0.0, 1.0, device=device), dy)
    assert np.isnan(LRN(x, dy, True, 3, 1.0, 1.0, -10.0, device=device)).all()
    for alpha, bias in ((0.0, -1.0), (1.0, -2.0), (-9.0, 1.0)):  # Beta = 0, some N < 0
        got = LRN(x, dy, True, 3, alpha, 0.0, bias, device=device)
        want = reference.local_response_normalization_grad(x, dy, True, 3, alpha, 0.0, bias)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~np.isnan(got)], dy[~np.isnan(got)])
        assert np.isnan(got).any()
    got = LRN(x, dy, True, 3, 1.0, 0.75, 0.0, device=device).reshape(-1)
    want = reference.local_response_normalization_grad(x, dy, True, 3, 1.0, 0.75, 0.0)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want.reshape(-1)))
    assert np.isnan(got[-1]) and np.isfinite(got[2])


# ---- sizes, layouts, data types -----------------------------------------------------------------

@pytest.mark.parametrize("channels", [1, 2, 7, 31, 255, 256, 257])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=str)
def test_channel_counts(device, rng, channels, dtype):
    for size in (1, 4, 5, 300):
        check(device, normal(rng, (2, channels, 3, 2), dtype), normal(rng, (2, channels, 3, 2),
                                                                      dtype),
              True, size, 1e-2 * size, 0.75, 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=str)
def test_spatial_window(device, rng, dtype):
    """CrossChannel false: an L x L window over H and W, clipped, divisor L."""
    for size, shape in ((3, (2, 3, 7, 5)), (4, (1, 2, 16, 17)), (9, (1, 1, 5, 3))):
        check(device, normal(rng, shape, dtype), normal(rng, shape, dtype), False, size, 0.1,
              0.75, 1.5)


def test_strided_tensors(device, rng):
    """Strided and channels-last views keep their strides on the device; a strided dX through
    the descriptor writes only the elements its strides address."""
    x = normal(rng, (2, 5, 6, 9)).transpose(0, 3, 1, 2)  # NHWC memory, NCHW sizes (2, 9, 5, 6)
    dy = normal(rng, (2, 9, 10, 6))[:, :, ::2]
    want = check(device, x, dy, True, 5, 0.5, 0.75, 1.0)
    data_type = DataType.FLOAT32
    dx = TensorDesc(data_type, x.shape, (1, 4, 36, 180))  # column-major, N padded to 4
    packed = TensorDesc(data_type, x.shape)
    desc = LocalResponseNormalizationGradDesc(packed, packed, dx, True, 5, 0.5, 0.75, 1.0)
    out = device.empty(dx)
    sentinel = np.full(dx.element_span, 77, np.float32)
    out.write(np.lib.stride_tricks.as_strided(sentinel, dx.sizes, [4 * s for s in dx.strides]))
    device.compile(desc)(input_tensor=device.upload(np.ascontiguousarray(x)),
                         input_gradient_tensor=device.upload(np.ascontiguousarray(dy)),
                         output_gradient_tensor=out)
    np.testing.assert_array_equal(out.numpy(), want)


# ---- the same bits everywhere -------------------------------------------------------------------

def test_same_bits_under_other_limits(device, rng):
    """Workgroup widths, a loop limit that walks each window over several dispatches (with
    one narrow workgroup), and cuts of the one-call problem beyond a small buffer limit: the
    same bits."""
    for dtype, cross_channel, size, shape in ((np.float32, True, 9, (2, 21, 5, 3)),
                                              (np.float16, False, 5, (2, 3, 9, 11))):
        x, dy = normal(rng, shape, dtype), normal(rng, shape, dtype)
        parameters = (cross_channel, size, 0.3, 0.75, 1.0)
        want = check(device, x, dy, *parameters)
        data_type = DataType.from_numpy(dtype, "", "")
        desc = LocalResponseNormalizationGradDesc(*[TensorDesc(data_type, shape)] * 3,
                                                  *parameters)
        walked = Limits(local_size=1, max_local_size=1, max_workgroups=16,
                        max_loop_iterations=64 + 4 * (3 + 4))  # windows in pieces of 3
        assert len(desc.plan(walked).dispatches) > 2 * len(desc.plan(Limits()).dispatches)
        for limits in (Limits(local_size=32), Limits(local_size=64), walked):
            out = device.empty(desc.output_gradient_tensor)
            device.compile(desc, limits=limits)(input_tensor=device.upload(x),
                                                input_gradient_tensor=device.upload(dy),
                                                output_gradient_tensor=out)
            np.testing.assert_array_equal(bits(out.numpy()), bits(want), err_msg=str(limits))


def test_cut_beyond_the_buffer_limit(device, rng, monkeypatch):
    """Along N, H and W (CrossChannel) the one-call function cuts a problem beyond the buffer
    limit into pieces: the same bits."""
    x, dy = normal(rng, (4, 16, 6, 5)), normal(rng, (4, 16, 6, 5))
    want = check(device, x, dy, True, 5, 0.3, 0.75, 1.0)
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "2048")
    before = device.cache_info()
    got = LRN(x, dy, True, 5, 0.3, 0.75, 1.0, device=device)
    assert device.cache_info().misses > before.misses
    np.testing.assert_array_equal(bits(got), bits(want))


# ---- errors before device work ------------------------------------------------------------------

@pytest.mark.parametrize("parameters, kind, message", [
    ((True, 0, 1e-4, 0.75, 1.0), ValueError, "LocalSize is out of range"),
    ((True, 2.0, 1e-4, 0.75, 1.0), TypeError, "LocalSize must be an integer"),
    ((1, 5, 1e-4, 0.75, 1.0), TypeError, "CrossChannel must be a bool"),
    ((True, 5, float("nan"), 0.75, 1.0), ValueError, "Alpha must be finite"),
    ((True, 5, 1e-4, 1e39, 1.0), ValueError, "Beta must be finite"),
    ((True, 5, 1e-4, 0.75, "1"), TypeError, "Bias must be a number"),
])
def test_errors_before_device_work(device, monkeypatch, parameters, kind, message):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    x = np.ones((1, 3, 2, 2), np.float32)
    with pytest.raises(kind, match=f"^LOCAL_RESPONSE_NORMALIZATION_GRAD: {message}"):
        LRN(x, x, *parameters, device=device)
    with pytest.raises(ValueError, match="^LOCAL_RESPONSE_NORMALIZATION_GRAD: InputTensor."
                                         "DimensionCount is out of range: expected 4 to 4"):
        LRN(x[0], x[0], True, 5, 1e-4, 0.75, 1.0, device=device)
    desc = RECORD.describe(RECORD.make_case(np.random.default_rng(0), (1, 3, 2, 2), np.float32))
    with pytest.raises(TypeError, match="InputTensor.DataType must be a float type"):
        dataclasses.replace(desc, **{f: TensorDesc(DataType.INT32, (1, 3, 2, 2)) for f in (
            "input_tensor", "input_gradient_tensor", "output_gradient_tensor")})
