"""ACTIVATION_RELU_GRAD against the float64 oracle, the worked examples of docs/semantics.md §2, and its error rules."""

import dataclasses

import numpy as np
import pytest

from pyvkgrad.one_call_cache import OneCallCache

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, reference
from cases import (BEYOND_WORKGROUP_LIMIT, DTYPES, EDGE_COUNTS, SHAPES_BY_RANK, broadcast_view,
                   random_array, strided_view)


def expected(x, dy):
    return reference.activation_relu_grad(x, dy).astype(x.dtype)


def check(device, x, dy):
    x_before, dy_before = x.copy(), dy.copy()
    out = pyvkgrad.activation_relu_grad(x, dy, device=device)
    assert out.shape == x.shape, "output_gradient shape"
    assert out.dtype == x.dtype, "output_gradient dtype"
    # A select copies bits: bitwise equality, NaNs and signed zeros included.
    bits = np.uint16 if x.dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(out.view(bits), expected(x, dy).view(bits),
                                  err_msg="output_gradient bits")
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(dy, dy_before)


# ---- spec vectors (section 10.2) ----

def test_rl1_special_values(device):
    x = np.array([-2, -0.0, 0, 1e-7, 3, np.nan, np.inf, -np.inf], np.float32)
    dy = np.arange(1, 9, dtype=np.float32)
    out = pyvkgrad.activation_relu_grad(x, dy, device=device)
    np.testing.assert_array_equal(out, [0, 0, 0, 4, 5, 0, 7, 0])
    assert not np.signbit(out).any(), "dropped gradients are +0"


def test_rl2_nan_gradient_passes_only_where_x_positive(device):
    out = pyvkgrad.activation_relu_grad(np.array([1, -1, 2, 0], np.float32),
                                        np.array([np.nan, np.nan, 5, -5], np.float32),
                                        device=device)
    np.testing.assert_array_equal(out, [np.nan, 0, 5, 0])


def test_rl3_float16(device):
    out = pyvkgrad.activation_relu_grad(np.array([0.5, -0.5], np.float16),
                                        np.array([65504, 1], np.float16), device=device)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [65504, 0])


def test_rl4_row_broadcast_descriptor(device):
    # X sizes {2,3}, strides {0,1}: the row [-1, 2, 0] broadcast over both rows.
    x = np.broadcast_to(np.array([-1, 2, 0], np.float32), (2, 3))
    dy = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(x, dy, device=device),
                                  [[0, 2, 0], [0, 5, 0]])


# ---- against the oracle ----

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", EDGE_COUNTS)
def test_edge_counts(device, rng, dtype, n):
    check(device, random_array(rng, (n,), dtype), random_array(rng, (n,), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES_BY_RANK, ids=lambda s: f"rank{len(s)}")
def test_every_rank(device, rng, dtype, shape):
    check(device, random_array(rng, shape, dtype), random_array(rng, shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES_BY_RANK[1:], ids=lambda s: f"rank{len(s)}")
def test_strided_and_broadcast_views(device, rng, dtype, shape):
    check(device, strided_view(rng, shape, dtype), broadcast_view(rng, shape, dtype, axis=0))
    check(device, broadcast_view(rng, shape, dtype, axis=len(shape) - 1),
          strided_view(rng, shape, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values_random(device, rng, dtype):
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45], dtype)
    x = rng.choice(specials, size=1000).astype(dtype)
    dy = rng.choice(specials, size=1000).astype(dtype)
    check(device, x, dy)


@pytest.mark.slow
def test_workgroup_count_beyond_limit(device, rng):
    n = BEYOND_WORKGROUP_LIMIT
    check(device, random_array(rng, (n,), np.float32), random_array(rng, (n,), np.float32))
    # The strided kernel too (float16 output written through word atomics).
    x = random_array(rng, (n // 2 + 1, 2), np.float16)
    check(device, x.T, random_array(rng, (2, n // 2 + 1), np.float16))


@pytest.mark.parametrize("layout", ["packed", "strided"])
@pytest.mark.parametrize("dtype", [DataType.FLOAT32, DataType.FLOAT16])
def test_one_lane_under_the_loop_limit(device, rng, dtype, layout):
    """One workgroup of one lane under lavapipe's loop limit (65535 iterations an invocation):
    the grid-stride loop is split into several dispatches, each starting where the last
    ended, so every element is written (one dispatch dropped those past the limit: 2192 of
    70000 float32 elements wrong, strided). The default limits keep one dispatch."""
    n = 300000 if layout == "packed" else 70000  # packed: 4 or 8 elements a vector
    # lavapipe's limit on any device (on a GPU without one the plan must split all the same)
    tiny = dataclasses.replace(device.limits, max_workgroups=1, local_size=1, max_local_size=1,
                               max_loop_iterations=65535)
    step = 2 if layout == "strided" else 1
    x_desc = TensorDesc(dtype, (n,), (step,))
    desc = pyvkgrad.ActivationReluGradDesc(x_desc, x_desc, TensorDesc(dtype, (n,)))
    plan = desc.plan(tiny)
    assert len(plan.dispatches) > 1
    assert [dict(d.push)["first"] for d in plan.dispatches][0] == 0
    assert len(desc.plan(device.limits).dispatches) == 1
    np_dtype = dtype.numpy_dtype
    x, dy = (random_array(rng, (n,), np_dtype) for _ in range(2))
    tensors = {"input_tensor": x, "input_gradient_tensor": dy}
    for name, values in tensors.items():
        tensors[name] = device.empty(x_desc)
        tensors[name].write(values)
    out = device.empty(desc.output_gradient_tensor)
    device.compile(desc, limits=tiny)(output_gradient_tensor=out, **tensors)
    np.testing.assert_array_equal(out.numpy(), expected(x, dy))


# ---- the descriptor API ----

@pytest.mark.parametrize("dtype", [DataType.FLOAT32, DataType.FLOAT16])
def test_compiled_operator_with_strided_output(device, rng, dtype):
    """Descriptor strides on every tensor, an NHWC-strided output, and a rerun."""
    sizes = (2, 3, 4, 5)
    x_desc = TensorDesc(dtype, sizes)
    dy_desc = TensorDesc(dtype, sizes, (0, 5, 0, 1))  # broadcast over N and H
    dx_desc = TensorDesc(dtype, sizes, (60, 1, 15, 3))  # NHWC
    op = device.compile(pyvkgrad.ActivationReluGradDesc(x_desc, dy_desc, dx_desc))
    np_dtype = dtype.numpy_dtype
    x = random_array(rng, sizes, np_dtype)
    dy_small = random_array(rng, (1, 3, 1, 5), np_dtype)
    dy_full = np.broadcast_to(dy_small, sizes)
    tx = device.upload(x)
    tdy = device.upload(dy_full)  # described with zero strides
    assert tdy.desc.strides == (0, 5, 0, 1)
    tdx = device.empty(dx_desc)
    op(input_tensor=tx, input_gradient_tensor=tdy, output_gradient_tensor=tdx)
    np.testing.assert_array_equal(tdx.numpy(), expected(x, dy_full))
    # Run again on new data without rebuilding anything.
    x2 = random_array(rng, sizes, np_dtype)
    tx2 = device.upload(x2)
    op(input_tensor=tx2, input_gradient_tensor=tdy, output_gradient_tensor=tdx)
    np.testing.assert_array_equal(tdx.numpy(), expected(x2, dy_full))


def test_one_call_reuses_compiled_operator(device, rng):
    x = random_array(rng, (33,), np.float32)
    pyvkgrad.activation_relu_grad(x, x, device=device)
    before = device.cache_info()
    pyvkgrad.activation_relu_grad(x + 1, x, device=device)
    after = device.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(-x, x, device=device),
                                  expected(-x, x))


# ---- errors: raised before any device work, naming the operator and the field ----

F32, F16 = DataType.FLOAT32, DataType.FLOAT16


@pytest.mark.parametrize("make, kind, message", [
    (lambda: (TensorDesc(F32, (2, 3)), TensorDesc(F32, (2, 4)), TensorDesc(F32, (2, 3))),
     ValueError, r"ACTIVATION_RELU_GRAD: InputGradientTensor.Sizes must equal InputTensor.Sizes: "
                 r"expected \(2, 3\), got \(2, 4\)"),
    (lambda: (TensorDesc(F32, (2, 3)), TensorDesc(F32, (2, 3)), TensorDesc(F16, (2, 3))),
     TypeError, r"OutputGradientTensor.DataType must equal InputTensor.DataType: "
                r"expected FLOAT32, got FLOAT16"),
    (lambda: (TensorDesc(F32, (2, 3)), TensorDesc(F32, (2, 3)), TensorDesc(F32, (2, 3), (0, 1))),
     ValueError, r"OutputGradientTensor.Strides must not make output elements overlap"),
    (lambda: (TensorDesc(F32, (2, 3)), TensorDesc(F32, (2, 3)), "not a desc"),
     TypeError, r"OutputGradientTensor must be a TensorDesc"),
])
def test_descriptor_errors(make, kind, message):
    with pytest.raises(kind, match=message):
        pyvkgrad.ActivationReluGradDesc(*make())


@pytest.mark.parametrize("kwargs, kind, message", [
    (dict(data_type=F32, sizes=(1,) * 9), ValueError, r"DimensionCount is out of range: "
                                                        r"expected 1 to 8, got 9"),
    (dict(data_type=F32, sizes=()), ValueError, r"DimensionCount is out of range"),
    (dict(data_type=F32, sizes=(2, 0)), ValueError, r"Sizes must all be at least 1"),
    (dict(data_type=F32, sizes=(2, 3), strides=(1,)), ValueError,
     r"Strides must have one entry per dimension: expected 2, got 1"),
    (dict(data_type=F32, sizes=(2, -3)), ValueError, r"Sizes must not be negative"),
    (dict(data_type=F32, sizes=(2.0, 3)), TypeError, r"Sizes must hold integers"),
    (dict(data_type=9, sizes=(2, 3)), TypeError, r"DataType is not supported"),
    (dict(data_type=F32, sizes=(2**16, 2**16)), ValueError, r"hold too many elements"),
])
def test_tensor_desc_errors(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        TensorDesc(**kwargs)


@pytest.mark.parametrize("args, kind, message", [
    ((np.zeros(3, np.float64), np.zeros(3, np.float64)), TypeError,
     r"ACTIVATION_RELU_GRAD: InputTensor has unsupported dtype: expected float32 or float16, "
     r"got float64"),
    ((np.zeros(3, np.int32), np.zeros(3, np.int32)), TypeError, r"got int32"),
    ((np.zeros(3, np.float32), np.zeros(4, np.float32)), ValueError,
     r"InputGradientTensor.Sizes must equal InputTensor.Sizes: expected \(3,\), got \(4,\)"),
    ((np.zeros(3, np.float32), np.zeros(3, np.float16)), TypeError,
     r"InputGradientTensor.DataType must equal InputTensor.DataType"),
    ((np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)), ValueError,
     r"InputTensor.Sizes must all be at least 1"),
    ((np.zeros((1,) * 9, np.float32), np.zeros((1,) * 9, np.float32)), ValueError,
     r"InputTensor.DimensionCount is out of range: expected 1 to 8, got 9"),
    (([1.0, 2.0], np.zeros(2, np.float32)), TypeError, r"InputTensor must be a numpy array"),
])
def test_one_call_errors(device, args, kind, message, monkeypatch):
    # Any device work would go through the one-call cache's run: make it fail loudly if reached.
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    with pytest.raises(kind, match=message):
        pyvkgrad.activation_relu_grad(*args, device=device)


def test_binding_errors(device):
    desc = pyvkgrad.ActivationReluGradDesc(*(TensorDesc(F32, (4, 4)),) * 3)
    op = device.compile(desc)
    small = device.empty(TensorDesc(F32, (4, 3)))
    good = device.empty(TensorDesc(F32, (4, 4)))
    half = device.empty(TensorDesc(F16, (4, 4)))
    with pytest.raises(ValueError, match=r"InputTensor is bound to a buffer too small"):
        op(input_tensor=small, input_gradient_tensor=good, output_gradient_tensor=good)
    # One element short, within the buffer's rounding to 16 bytes: its buffer is as large as
    # the descriptor's, but the last element would be padding nobody wrote (read) or can read
    # (written); float16 likewise, where 4-byte words would hide it.
    for dt, dtype in ((F32, np.float32), (F16, np.float16)):
        op_dt = device.compile(pyvkgrad.ActivationReluGradDesc(*(TensorDesc(dt, (4, 4)),) * 3))
        short, full = device.empty(TensorDesc(dt, (15,))), device.empty(TensorDesc(dt, (4, 4)))
        assert short.nbytes == full.nbytes
        for fields in ((short, full, full), (full, short, full), (full, full, short)):
            with pytest.raises(ValueError, match=r"is bound to a buffer too small"):
                op_dt(**dict(zip(("input_tensor", "input_gradient_tensor",
                                  "output_gradient_tensor"), fields)))
        # A tensor of other sizes but as many elements is the same buffer: allowed.
        flat = device.upload(np.ones(16, dtype))
        op_dt(input_tensor=flat, input_gradient_tensor=flat, output_gradient_tensor=full)
        assert np.array_equal(full.numpy(), np.ones((4, 4), dtype))
    with pytest.raises(TypeError, match=r"InputGradientTensor has the wrong data type"):
        op(input_tensor=good, input_gradient_tensor=half, output_gradient_tensor=good)
    with pytest.raises(TypeError, match=r"missing \['output_gradient_tensor'\]"):
        op(input_tensor=good, input_gradient_tensor=good)
