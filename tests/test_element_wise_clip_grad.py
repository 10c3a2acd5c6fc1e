"""ELEMENT_WISE_CLIP_GRAD and ELEMENT_WISE_CLIP_GRAD1: the worked examples of
docs/semantics.md §10, PyTorch's hardtanh and relu6 backward, every data type at its extremes,
the comparison rules (NaN, bounds, Min > Max), sizes and layouts that break kernels, in place,
the same bits under other workgroup and subgroup widths, and the error rules. The operator
table's tests cover the rest (every rank and layout against the oracle, fuzzing, the compiled
descriptor)."""

import dataclasses

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, operators, reference
from pyvkgrad.ops.element_wise_clip_grad import DATA_TYPES, pass_range
from cases import (BEYOND_WORKGROUP_LIMIT, EDGE_COUNTS, SHAPES_BY_RANK,
                   assert_same_bits_on_other_widths, view_of)

CLIP = pyvkgrad.element_wise_clip_grad
CLIP1 = pyvkgrad.element_wise_clip_grad1
ORACLES = {CLIP: reference.element_wise_clip_grad, CLIP1: reference.element_wise_clip_grad1}
DTYPES = [t.numpy_dtype for t in DATA_TYPES]
INTEGERS = [d for d in DTYPES if d.kind != "f"]


def bits(array):
    return np.asarray(array).view(f"u{array.dtype.itemsize}")


def check(device, fn, x, dy, low, high):
    """fn on the device equals the oracle bit for bit; inputs unchanged."""
    before = x.copy(), dy.copy()
    got = fn(x, dy, low, high, device=device)
    want = ORACLES[fn](x, dy, low, high).astype(x.dtype)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{x.dtype} {low} {high}")
    np.testing.assert_array_equal(bits(x), bits(before[0]))
    np.testing.assert_array_equal(bits(dy), bits(before[1]))
    return got


# ---- worked examples (docs/semantics.md §10) ----------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cg1(device, dtype):
    x = np.array([-2, 0, 0.5, 3, 6, 7, np.nan, -np.inf, np.inf], dtype)
    dy = np.arange(1, 10, dtype=dtype)
    want = np.array([0, 0, 3, 4, 0, 0, 7, 0, 0], dtype)
    np.testing.assert_array_equal(bits(CLIP(x, dy, 0.0, 6.0, device=device)), bits(want))
    np.testing.assert_array_equal(bits(CLIP1(x, dy, 0, 6, device=device)), bits(want))


def test_cg2(device):
    x = np.array([-3, -2, 0, 5, 6], np.int32)
    dy = np.array([10, 20, 30, 40, 50], np.int32)
    np.testing.assert_array_equal(CLIP1(x, dy, -2, 5, device=device), [0, 0, 30, 0, 0])
    desc = TensorDesc(DataType.INT32, (5,))
    pyvkgrad.ElementWiseClipGrad1Desc(desc, desc, desc, DataType.INT32, -2, 5)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cg3_min_above_max_gives_zeros(device, dtype):
    x, dy = np.array([0, 1, 2], dtype), np.array([1, 1, 1], dtype)
    for fn in (CLIP, CLIP1):
        np.testing.assert_array_equal(bits(fn(x, dy, 2, 1, device=device)), [0, 0, 0])
        np.testing.assert_array_equal(bits(fn(x, dy, 1, 1, device=device)), [0, 0, 0])


# ---- PyTorch's own backward ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, 6.0), (-0.5, 2.25), (0.0, 0.0),
                                    (2.0, -2.0), (-np.inf, 0.5)])
def test_hardtanh_and_relu6_backward(device, rng, dtype, bounds):
    """F.hardtanh(x, min, max) and F.relu6 backward: the same bits (bounds excluded), X = NaN
    aside: PyTorch 2.13's CPU kernel passes dY there in its scalar tail but gives 0 in its
    16-lane vector body (checked below), where DirectML's rule passes dY. A Min > Max
    hardtanh is not defined by PyTorch, so those bounds take relu6's."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    low, high = bounds
    x = (3 * rng.standard_normal(500)).astype(dtype)
    x[:12] = [np.nan, -np.inf, np.inf, 0.0, -0.0, 6, 1, -1, 2.25, -0.5, 0.5, 3]
    x[12:40] = np.float32(low) if np.isfinite(low) else 0  # at the bound
    dy = rng.standard_normal(500).astype(dtype)
    if low > high:
        low, high = 0.0, 6.0
    for fn, torch_fn in ((lambda t: F.hardtanh(t, low, high), None),
                         (F.relu6, (0.0, 6.0))):
        lo, hi = torch_fn or (low, high)
        t = torch.from_numpy(x.copy()).requires_grad_()
        fn(t).backward(torch.from_numpy(dy))
        want = t.grad.numpy()
        number = ~np.isnan(x)
        for got in (CLIP(x, dy, lo, hi, device=device), CLIP1(x, dy, lo, hi, device=device)):
            np.testing.assert_array_equal(bits(got)[number], bits(want)[number])
            np.testing.assert_array_equal(bits(got)[~number], bits(dy)[~number])
    t = torch.full((17,), 0.5, requires_grad=True)
    with torch.no_grad():
        t[0] = t[16] = float("nan")
    F.relu6(t).backward(torch.ones(17))
    assert t.grad[0] == 0 and t.grad[16] == 1  # PyTorch's vector body, then its scalar tail


# ---- the comparison rules -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_nan_and_infinite_bounds(device, dtype):
    """NaN X passes dY; X at a bound gives +0; a NaN bound disables its side; infinite bounds
    exclude only the infinity they equal; dY's NaN where clipped becomes +0 (a select)."""
    x = np.array([np.nan, -np.inf, -2, -1, -0.0, 0, 1, 2, np.inf], dtype)
    dy = np.array([1, 2, 3, 4, 5, 6, 7, np.nan, -0.0], dtype)
    for fn in (CLIP, CLIP1):
        for low, high in [(-1, 1), (np.nan, 1), (-1, np.nan), (np.nan, np.nan),
                          (-np.inf, np.inf), (0, 0), (np.inf, -np.inf), (-0.0, 2)]:
            check(device, fn, x, dy, low, high)
    got = CLIP(x, dy, np.nan, 1, device=device)
    np.testing.assert_array_equal(bits(got), bits(np.array([1, 2, 3, 4, 5, 6, 0, 0, 0], dtype)))
    got = CLIP(x, dy, -1, np.nan, device=device)  # NaN dY where x = 2 passes
    assert np.isnan(got[7]) and bits(got)[8] == bits(np.array(-0.0, dtype))
    np.testing.assert_array_equal(bits(got)[[0, 1, 2, 3]], bits(np.array([1, 0, 0, 0], dtype)))


def test_float16_bounds_against_float32_comparison(device):
    """CLIP_GRAD compares float16 X with float32 bounds between two halves; CLIP_GRAD1 takes
    only halves (a half's bit pattern through numpy.float16)."""
    x = np.array([1.0, 1.0009765625, 1.001953125, 0.999, 6e-8, -6e-8, 0], np.float16)
    dy = np.ones(7, np.float16)
    for low, high in [(1.0004, 1.0015), (1.0009765625, 2), (5.9e-8, 1), (-1e-9, 1e-9)]:
        check(device, CLIP, x, dy, low, high)
    half = np.uint16(0x3C01).view(np.float16)  # 1.0009765625
    check(device, CLIP1, x, dy, half, np.float16(2))
    assert CLIP1(x, dy, half, np.float16(2), device=device)[1] == 0


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_extremes(device, rng, dtype):
    """Every value of an 8-bit type, the extremes and neighbours of wider ones, against bounds
    at and beyond the type's extremes: CLIP_GRAD compares float32(X) with float32 bounds,
    CLIP_GRAD1 compares exactly."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    if np.dtype(dtype).itemsize == 1:
        x = np.arange(lo, hi + 1).astype(dtype)
    else:
        near = [lo, lo + 1, lo + 2, -2, -1, 0, 1, 2, hi - 2, hi - 1, hi, 2**24 - 1, 2**24,
                2**24 + 1, 2**24 + 2, 2**24 + 3, -2**24 - 1, 2**31 - 129, 2**31 - 128]
        x = np.array([v for v in near if lo <= v <= hi] + list(rng.integers(lo, hi, 100)),
                     dtype)
    dy = rng.integers(lo, hi, x.shape, dtype, endpoint=True)
    dy[0] = hi
    for low, high in [(lo, hi), (lo + 1, hi - 1), (-1, 1), (0, 6), (hi, lo), (lo, lo),
                      (2**24, 2**24 + 3), (-2**24 - 1, 2**24 + 1)]:
        low, high = min(max(low, lo), hi), min(max(high, lo), hi)
        check(device, CLIP1, x, dy, low, high)
        check(device, CLIP, x, dy, float(low), float(high))
    for low, high in [(lo - 1.0, hi + 1.0), (-1e30, 1e30), (0.5, 6.5), (-np.inf, np.inf),
                      (np.nan, 3.0), (2.0**24 + 0.5, 2.0**31), (hi + 1.0, np.nan)]:
        check(device, CLIP, x, dy, low, high)


def test_int32_compared_as_float32(device):
    """2^24 + 1 converts to 2^24 in float32 (nearest even): CLIP_GRAD with Min 2^24 clips it,
    CLIP_GRAD1 with the same Min passes it."""
    x = np.array([2**24, 2**24 + 1, 2**24 + 2, 2**24 + 3], np.int32)
    dy = np.array([1, 2, 3, 4], np.int32)
    np.testing.assert_array_equal(CLIP(x, dy, 2.0**24, 2.0**25, device=device), [0, 0, 3, 4])
    np.testing.assert_array_equal(CLIP1(x, dy, 2**24, 2**25, device=device), [0, 2, 3, 4])


def test_pass_range_is_the_oracle_on_every_8_bit_and_16_bit_value():
    """The plan's [LOW, HIGH] (order keys of the X that pass) agrees with the oracle on every
    value of the 8- and 16-bit types and float16 (no device)."""
    for data_type in (DataType.INT8, DataType.UINT8, DataType.INT16, DataType.UINT16,
                      DataType.FLOAT16):
        dtype = data_type.numpy_dtype
        every = np.arange(2 ** (8 * dtype.itemsize), dtype=np.int64)
        values = every.astype(f"u{dtype.itemsize}").view(dtype)
        sign = 0 if dtype.kind == "u" else 1 << (8 * dtype.itemsize - 1)
        if dtype.kind == "f":
            magnitude = every & (sign - 1)
            keys = np.where(every & sign, sign - magnitude, sign + magnitude)
            nan = np.isnan(values)
        else:
            keys, nan = every ^ sign, np.zeros(every.size, bool)
        for low, high in [(-3.5, 7.25), (0, 6), (np.nan, 100), (-100, np.nan), (5, 4),
                          (-np.inf, np.inf), (1e-7, 1e4), (-65504, 65504)]:
            lo, hi = pass_range(data_type, float(np.float32(low)), float(np.float32(high)),
                                lambda v: float(np.float32(v)))
            got = nan | ((lo <= keys) & (keys <= hi))
            want = reference.element_wise_clip_grad(values, np.ones(every.size), low, high) != 0
            np.testing.assert_array_equal(got, want, err_msg=f"{data_type.name} {low} {high}")


# ---- sizes, layouts, in place -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16], ids=str)
def test_edge_counts_packed_and_strided(device, rng, dtype):
    """Tail vectors of 4, 8 and 16 elements, and strided outputs whose elements share words
    with other invocations' (8- and 16-bit stores through word atomics)."""
    make = operator_case(rng, dtype)
    for n in EDGE_COUNTS:
        x, dy, low, high = make((n,))
        check(device, CLIP, x, dy, low, high)
        check(device, CLIP1, view_of(x, "transposed"), dy, low, high)
        wide_x, wide_dy, *_ = make((2, n))
        check(device, CLIP1, wide_x[:, ::1].T, wide_dy.T[::-1], low, high)


def operator_case(rng, dtype):
    record = operators.BY_NAME["element_wise_clip_grad1"]

    def make(shape):
        case = record.make_case(rng, shape, dtype)
        return (*case.args, case.kwargs["min"], case.kwargs["max"])
    return make


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_rank_and_view(device, rng, dtype):
    make = operator_case(rng, dtype)
    for shape in SHAPES_BY_RANK:
        x, dy, low, high = make(shape)
        for kind in ("packed", "transposed", "sliced", "broadcast"):
            check(device, CLIP1, view_of(x, kind, len(shape) - 1), view_of(dy, kind), low, high)
            check(device, CLIP, x, view_of(dy, kind), float(np.float32(low)),
                  float(np.float32(high)))


@pytest.mark.slow
def test_workgroup_count_beyond_limit(device, rng):
    n = BEYOND_WORKGROUP_LIMIT
    x = rng.integers(-128, 128, n, np.int8)
    dy = rng.integers(-128, 128, n, np.int8)
    check(device, CLIP1, x, dy, -3, 50)
    check(device, CLIP1, x.reshape(-1, 1)[::2].T.copy().T[:, 0], dy[::2], -3, 50)


@pytest.mark.parametrize("layout", ["packed", "strided"])
@pytest.mark.parametrize("data_type", [DataType.UINT8, DataType.FLOAT16])
def test_one_lane_under_the_loop_limit(device, rng, data_type, layout):
    """One lane of one workgroup under lavapipe's loop limit: several dispatches, every
    element written (16 8-bit elements a vector, each run through the lane loop)."""
    n = 600000 if layout == "packed" else 70000
    # lavapipe's limit on any device (on a GPU without one the plan must split all the same)
    tiny = dataclasses.replace(device.limits, max_workgroups=1, local_size=1, max_local_size=1,
                               max_loop_iterations=65535)
    step = 2 if layout == "strided" else 1
    x_desc = TensorDesc(data_type, (n,), (step,))
    desc = pyvkgrad.ElementWiseClipGrad1Desc(x_desc, x_desc, TensorDesc(data_type, (n,)),
                                             data_type, 3, 100)
    assert len(desc.plan(tiny).dispatches) > 1
    dtype = data_type.numpy_dtype
    x = (np.arange(n) % 128).astype(dtype)
    dy = (np.arange(n) % 7 + 1).astype(dtype)
    tensors = {}
    for name, values in (("input_tensor", x), ("input_gradient_tensor", dy)):
        tensors[name] = device.empty(x_desc)
        tensors[name].write(values)
    out = device.empty(desc.output_gradient_tensor)
    device.compile(desc, limits=tiny)(output_gradient_tensor=out, **tensors)
    want = reference.element_wise_clip_grad1(x, dy, 3, 100).astype(dtype)
    np.testing.assert_array_equal(bits(out.numpy()), bits(want))


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.uint32], ids=str)
@pytest.mark.parametrize("layout", ["packed", "transposed"])
def test_in_place_over_x_only(device, rng, dtype, layout):
    """dX over X (DirectML allows only InputTensor): right, sub-word stores included; dX over
    dY is refused."""
    x, dy, low, high = operator_case(rng, dtype)((3, 5, 7))
    sizes = x.shape
    strides = None if layout == "packed" else (1, 3, 15)
    d = TensorDesc(DataType.from_numpy(dtype, "", "", DataType), sizes, strides)
    desc = pyvkgrad.ElementWiseClipGrad1Desc(d, d, d, d.data_type, low, high)
    op = device.compile(desc)
    xt, dyt = device.empty(d), device.empty(d)
    xt.write(x)
    dyt.write(dy)
    op(input_tensor=xt, input_gradient_tensor=dyt, output_gradient_tensor=xt)
    want = reference.element_wise_clip_grad1(x, dy, low, high).astype(dtype)
    np.testing.assert_array_equal(bits(xt.numpy()), bits(want))
    with pytest.raises(ValueError, match="ELEMENT_WISE_CLIP_GRAD1"):
        op(input_tensor=xt, input_gradient_tensor=dyt, output_gradient_tensor=dyt)


# ---- same bits under other workgroup and subgroup widths ----------------------------------------

_SCRIPT = """
import json, sys, numpy as np, pyvkgrad
from pyvkgrad import operators
dev = pyvkgrad.default_device()
out = {"subgroup": dev.limits.subgroup_size, "local": dev.limits.local_size}
for name in ("element_wise_clip_grad", "element_wise_clip_grad1"):
    record = operators.BY_NAME[name]
    for dtype in record.dtypes:
        rng = np.random.default_rng(7)
        case = record.make_case(rng, (3, 257), dtype)
        x, dy = case.args
        for i, got in enumerate((record.run(case, dev)[0],
                                 record.function(x.T.copy().T, dy, **case.kwargs, device=dev))):
            out[f"{name} {np.dtype(dtype).name} {i}"] = got.view(f"u{got.itemsize}").tolist()
json.dump(out, sys.stdout)
"""


@pytest.mark.slow
def test_same_bits_under_other_workgroup_and_subgroup_widths(device):
    """PYVKGRAD_LOCAL_SIZE=32 and lavapipe's subgroups of 4 and 16 lanes
    (LP_NATIVE_VECTOR_WIDTH=128/512, read when the device is created: a new process) give the
    default run's bits."""
    assert_same_bits_on_other_widths(device, _SCRIPT)


# ---- errors -------------------------------------------------------------------------------------

F32 = TensorDesc(DataType.FLOAT32, (2, 3))
I8 = TensorDesc(DataType.INT8, (2, 3))


@pytest.mark.parametrize("make, kind, message", [
    (lambda: pyvkgrad.ElementWiseClipGradDesc(F32, F32, F32, 0.0, 1e39), ValueError,
     r"ELEMENT_WISE_CLIP_GRAD: Max must be within float32's range"),
    (lambda: pyvkgrad.ElementWiseClipGradDesc(F32, F32, F32, "0", 1.0), TypeError,
     r"ELEMENT_WISE_CLIP_GRAD: Min must be a number"),
    (lambda: pyvkgrad.ElementWiseClipGradDesc(F32, F32, F32, True, 1.0), TypeError,
     r"Min must be a number"),
    (lambda: pyvkgrad.ElementWiseClipGradDesc(F32, I8, F32, 0.0, 1.0), TypeError,
     r"InputGradientTensor.DataType must equal InputTensor.DataType: expected FLOAT32, got INT8"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(I8, I8, I8, DataType.INT8, 0, 128), ValueError,
     r"ELEMENT_WISE_CLIP_GRAD1: Max must fit INT8: expected -128 to 127, got 128"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(I8, I8, I8, DataType.INT8, 0.0, 5), TypeError,
     r"Min must be an integer for INT8"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(I8, I8, I8, DataType.INT16, 0, 5), TypeError,
     r"MinMaxDataType must equal InputTensor.DataType: expected INT8, got INT16"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(I8, I8, I8, 1.0, 0, 5), TypeError,
     r"MinMaxDataType must be a DataType"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(F32, F32, F32, DataType.FLOAT32, 0.1, 5),
     ValueError, r"Min must be exactly representable in FLOAT32"),
    (lambda: pyvkgrad.ElementWiseClipGrad1Desc(*[TensorDesc(DataType.FLOAT16, (2,))] * 3,
                                               DataType.FLOAT16, 0, 70000.0),
     ValueError, r"Max must be exactly representable in FLOAT16"),
    (lambda: pyvkgrad.ElementWiseClipGradDesc(F32, F32, TensorDesc(DataType.FLOAT32, (2, 3),
                                                                  (0, 1)), 0.0, 1.0),
     ValueError, r"OutputGradientTensor.Strides must not make output elements overlap"),
])
def test_descriptor_errors(make, kind, message):
    with pytest.raises(kind, match=message):
        make()


def test_bounds_round_to_float32_and_accept_nan_and_infinity():
    desc = pyvkgrad.ElementWiseClipGradDesc(F32, F32, F32, 0.1, np.inf)
    assert desc.min == float(np.float32(0.1)) and desc.max == np.inf
    assert np.isnan(pyvkgrad.ElementWiseClipGradDesc(F32, F32, F32, np.nan, 1).min)
    desc = pyvkgrad.ElementWiseClipGrad1Desc(I8, I8, I8, 8, np.int8(-128), 127)
    assert desc.min_max_data_type is DataType.INT8 and (desc.min, desc.max) == (-128, 127)


def test_one_call_errors_before_device_work(device, monkeypatch):
    from pyvkgrad.one_call_cache import OneCallCache
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    x = np.zeros(3, np.int64)
    with pytest.raises(TypeError, match="ELEMENT_WISE_CLIP_GRAD1: InputTensor has unsupported dtype"):
        CLIP1(x, x, 0, 1, device=device)
    x = np.zeros(3, np.int16)
    with pytest.raises(ValueError, match=r"ELEMENT_WISE_CLIP_GRAD1: Max must fit INT16"):
        CLIP1(x, x, 0, 2**15, device=device)
    with pytest.raises(ValueError, match=r"ELEMENT_WISE_CLIP_GRAD: Min must be within"):
        CLIP(x, x, -1e40, 0, device=device)
