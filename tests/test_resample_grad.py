"""RESAMPLE_GRAD against the float64 oracle, the worked examples of docs/semantics.md §3
(through the transpose, and directly), its properties (adjoint identity, sum preservation), both
kernels, and its error rules.

Tolerances (docs/semantics.md §6.8: float32 accumulation, one rounding on a float16 store): the
operator's own, from the operator table (pyvkgrad/operators.py, where they are justified),
relative to the magnitude S = W^T |dY| of each element's contributions (the oracle on |dY|):
* float32: |dX - oracle| <= 1e-5 * S (a few float32 roundings per contribution);
* float16: |dX - oracle| <= 2^-10 * S + 2^-24 (one float16 rounding, 2^-11 relative, plus the
  float32 sum; 2^-24 is float16's subnormal spacing).
The spec's exact vectors use rtol 1e-6 (float32) and 1e-3 (float16), as section 10 says.
"""

import contextlib
import itertools
import os
import re

import numpy as np
import pytest

from pyvkgrad.one_call_cache import OneCallCache

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, defaults, operators, reference
from pyvkgrad.ops.resample_grad import AxisDirection, InterpolationMode
from pyvkgrad.plan import OperatorDesc
from cases import BEYOND_WORKGROUP_LIMIT, DTYPES, SHAPES_BY_RANK, random_array, strided_view

# "atomic-cas" is the atomic algorithm with native float atomics turned off: the
# compare-and-swap kernel that devices without float atomics run. Where the device has them
# (lavapipe does), "atomic" runs the native kernel, so both atomic kernels are tested.
ALGORITHMS = ["gather", "atomic", "atomic-cas"]
NN, LIN = "nearest_neighbor", "linear"
RECORD = operators.BY_NAME["resample_grad"]
F32, F16 = DataType.FLOAT32, DataType.FLOAT16


def parameters(mode, scales, ioff=None, ooff=None, rounding=None):
    """The keyword arguments of pyvkgrad.resample_grad and its oracle (None: the default)."""
    return dict(interpolation_mode=mode, scales=scales, input_pixel_offsets=ioff,
                output_pixel_offsets=ooff, rounding_direction=rounding)


def oracle(dy, sizes, mode, scales, ioff=None, ooff=None, rounding=None):
    """(expected dX, magnitude S) in float64."""
    kwargs = parameters(mode, scales, ioff, ooff, rounding)
    dy64 = np.asarray(dy, np.float64)
    return (reference.resample_grad(dy64, sizes, **kwargs),
            reference.resample_grad(np.abs(dy64), sizes, **kwargs))


@contextlib.contextmanager
def kernel_choice(algorithm):
    """The `algorithm` argument for one of ALGORITHMS, with its environment."""
    if algorithm != "atomic-cas":
        yield algorithm
        return
    old = os.environ.get("PYVKGRAD_FLOAT_ATOMICS")
    os.environ["PYVKGRAD_FLOAT_ATOMICS"] = "0"
    try:
        yield "atomic"
    finally:
        if old is None:
            del os.environ["PYVKGRAD_FLOAT_ATOMICS"]
        else:
            os.environ["PYVKGRAD_FLOAT_ATOMICS"] = old


@pytest.fixture(params=ALGORITHMS)
def algorithm(request, monkeypatch):
    """Each of ALGORITHMS in turn, as the `algorithm` argument a test passes on."""
    if request.param == "atomic-cas":
        monkeypatch.setenv("PYVKGRAD_FLOAT_ATOMICS", "0")
        return "atomic"
    return request.param


def device_grad(device, dy, sizes, mode, scales, ioff=None, ooff=None, rounding=None,
                algorithm="gather"):
    before = dy.copy()
    with kernel_choice(algorithm) as algo:
        out = pyvkgrad.resample_grad(dy, sizes, **parameters(mode, scales, ioff, ooff, rounding),
                                     algorithm=algo, device=device)
    np.testing.assert_array_equal(dy, before, err_msg="input_gradient was modified")
    return out


def assert_close(out, expected, magnitude, dtype, what=""):
    """Shape, dtype and values within RESAMPLE_GRAD's tolerance (the operator table's)."""
    _, problem = operators.compare(RECORD, out, expected, (magnitude,), dtype)
    assert not problem, f"{what}: {problem}"


def check(device, dy, sizes, mode, scales, ioff=None, ooff=None, rounding=None,
          algorithm="gather"):
    out = device_grad(device, dy, sizes, mode, scales, ioff, ooff, rounding, algorithm)
    expected, magnitude = oracle(dy, sizes, mode, scales, ioff, ooff, rounding)
    assert_close(out, expected, magnitude, dy.dtype,
                 f"{mode} {algorithm} {dy.dtype} {dy.shape}->{tuple(sizes)} scales={scales} "
                 f"offsets={ioff}/{ooff} rounding={rounding}")
    return out


def spec_close(out, expected, dtype):
    assert out.shape == np.shape(expected), "shape"
    assert out.dtype == np.dtype(dtype), "dtype"
    rtol = 1e-3 if np.dtype(dtype) == np.float16 else 1e-6
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=rtol, atol=1e-7)


# ---- the seed's worked example (docs/semantics.md §6.3) ----

SEED_DY = [[4, 5, 6]]  # sizes {1,1,1,3} viewed as 2-D {1,3}; dX {2,2}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ioff, ooff, rounding, expected", [
    ((0.5, 0.5), (0.0, 0.0), None, [[9, 6], [0, 0]]),  # RESAMPLE1, offsets 0.5 / 0
    (None, None, "decreasing", [[9, 6], [0, 0]]),  # defaults, DML_RESAMPLE_GRAD1 floor
    (None, None, AxisDirection.DECREASING, [[9, 6], [0, 0]]),
    (None, None, None, [[0, 0], [4, 11]]),  # defaults, RESAMPLE1: both ties round up
    ((0.0, 0.0), (0.0, 0.0), None, [[4, 11], [0, 0]]),  # docs/semantics.md §6.3, offsets 0 / 0
], ids=["in0.5-out0", "decreasing", "enum-decreasing", "defaults-half-up", "zero-offsets"])
def test_seed_example(device, dtype, algorithm, ioff, ooff, rounding, expected):
    dy = np.array(SEED_DY, dtype)
    out = device_grad(device, dy, (2, 2), NN, (0.5, 1.5), ioff, ooff, rounding, algorithm)
    assert out.shape == (2, 2) and out.dtype == dtype
    np.testing.assert_array_equal(out, expected)


# ---- spec vectors 10.4 (R-doc column): 4-D NCHW, "1-D views" are {1,1,1,W} ----

def _v(w):
    return (1, 1, 1, w)


RG_VECTORS = {
    # id: (mode, dY sizes, dX sizes, scales, in offsets, out offsets, dY, expected dX)
    "RG-1": (NN, (1, 1, 1, 3), (1, 1, 2, 2), (1, 1, 0.5, 1.5), (0.5,) * 4, (0,) * 4,
             [4, 5, 6], [[9, 6], [0, 0]]),
    "RG-2": (NN, (1, 1, 4, 4), (1, 1, 2, 2), (1, 1, 2, 2), None, None, np.arange(16),
             [[10, 18], [42, 50]]),
    "RG-3": (NN, _v(2), _v(4), (1, 1, 1, 0.5), None, None, [1, 2], [0, 1, 0, 2]),
    "RG-4": (LIN, _v(4), _v(2), (1, 1, 1, 2), None, None, [1, 2, 3, 4], [3.25, 6.75]),
    "RG-5": (LIN, (1, 1, 4, 4), (1, 1, 2, 2), (1, 1, 2, 2), None, None, np.ones(16),
             [[4, 4], [4, 4]]),
    "RG-6": (LIN, (1, 1, 4, 4), (1, 1, 2, 2), (1, 1, 2, 2), None, None, np.arange(16),
             [[12.5, 19.5], [40.5, 47.5]]),
    "RG-7": (LIN, _v(5), _v(3), (1, 1, 1, 2), (0,) * 4, (0,) * 4, [1, 2, 3, 4, 5], [2, 6, 7]),
    "RG-8": (LIN, _v(2), _v(4), (1, 1, 1, 0.5), None, None, [1, 2], [0.5, 0.5, 1, 1]),
    "RG-9": (LIN, (1, 4, 1, 1), (1, 2, 1, 1), (1, 2, 1, 1), None, None, np.ones(4), [2, 2]),
    "RG-10": (LIN, _v(6), _v(4), (1, 1, 1, 1), None, None, [1, 2, 3, 4, 5, 6], [1, 2, 3, 15]),
    "RG-11": (NN, _v(7), _v(3), (1, 1, 1, 7 / 3), (0.5,) * 4, (0,) * 4, np.arange(1, 8),
              [6, 9, 13]),
    "RG-12": (NN, _v(4), _v(3), (1, 1, 1, 4 / 3), None, None, [1, 2, 3, 4], [1, 5, 4]),
    "RG-13": (LIN, (1, 1, 3, 5), (1, 1, 2, 3), (1, 1, 1.5, 5 / 3), None, None, np.ones(15),
              [[2.4, 2.7, 2.4], [2.4, 2.7, 2.4]]),
    "RG-14": (LIN, (3, 3, 3, 3), (2, 2, 2, 2), (1.5,) * 4, None, None, np.ones(81),
              np.full((2, 2, 2, 2), 5.0625)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vector", list(RG_VECTORS))
def test_spec_vectors_10_4(device, dtype, algorithm, vector):
    mode, dy_sizes, dx_sizes, scales, ioff, ooff, dy, expected = RG_VECTORS[vector]
    dy = np.asarray(dy, dtype).reshape(dy_sizes)
    out = device_grad(device, dy, dx_sizes, mode, scales, ioff, ooff, None, algorithm)
    spec_close(out, np.asarray(expected, np.float64).reshape(dx_sizes), dtype)


# ---- spec vectors 10.3 (forward), through the transpose: y[o] = <e_o, R x> = <grad(e_o), x> ----

R_VECTORS = {
    # id: (mode, x, y sizes, scales, in offsets, out offsets, rounding, expected y or checks)
    "R-1": (NN, [[1, 2], [3, 4]], (4, 4), (2, 2), None, None, None,
            [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]),
    "R-2": (NN, [[1, 2], [3, 4]], (1, 3), (0.5, 1.5), (0.5, 0.5), (0, 0), None, [[1, 1, 2]]),
    "R-2b": (NN, [[1, 2], [3, 4]], (1, 3), (0.5, 1.5), None, None, None, [[3, 4, 4]]),
    "R-3": (NN, [10, 20, 30, 40], (2,), (0.5,), None, None, None, [20, 40]),
    "R-4": (NN, [10, 20, 30], (4,), (4 / 3,), None, None, None, [10, 20, 20, 30]),
    "R-5": (NN, [10, 20, 30], (7,), (7 / 3,), (0,), (0,), None, [10, 10, 20, 20, 30, 30, 30]),
    "R-6": (NN, [10, 20, 30], (7,), (7 / 3,), (0.5,), (0,), None, [10, 10, 10, 20, 20, 30, 30]),
    "R-7": (LIN, [1, 2], (4,), (2,), None, None, None, [1, 1.25, 1.75, 2]),
    "R-8": (LIN, [[1, 2], [3, 4]], (4, 4), (2, 2), None, None, None,
            [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5],
             [3, 3.25, 3.75, 4]]),
    "R-9": (LIN, [1, 2, 3], (5,), (2,), (0,), (0,), None, [1, 1.5, 2, 2.5, 3]),
    "R-10": (LIN, [1, 2, 3, 4], (2,), (0.5,), None, None, None, [1.5, 3.5]),
    "R-11": (LIN, np.reshape([0, 10], (1, 2, 1, 1)), (1, 4, 1, 1), (1, 2, 1, 1), None, None,
             None, np.reshape([0, 2.5, 7.5, 10], (1, 4, 1, 1))),
    "R-12": (NN, [1, 2, 3, 4], (2,), (1,), None, None, None, [1, 2]),
    "R-13": (LIN, [1, 2, 3, 4], (6,), (1,), None, None, None, [1, 2, 3, 4, 4, 4]),
    "R-14": (LIN, np.arange(6).reshape(2, 3), (3, 5), (1.5, 5 / 3), None, None, None,
             [[0, 0.4, 1, 1.6, 2], [1.5, 1.9, 2.5, 3.1, 3.5], [3, 3.4, 4, 4.6, 5]]),
    "R-15": (LIN, np.arange(16).reshape(2, 2, 2, 2), (3, 3, 3, 3), (1.5,) * 4, None, None,
             None, None),  # checked below: out[0,0,0,:], out[1,1,1,1], out[2,2,2,2], sum
    "R-16": (NN, np.reshape([1, 2, 3], (1, 3, 1, 1)), (1, 2, 1, 1), (1, 2 / 3, 1, 1), None,
             None, None, np.reshape([1, 3], (1, 2, 1, 1))),
    "R-17": (LIN, [1, 2], (4,), (2,), None, None, None, [1, 1.25, 1.75, 2]),
    "R2-1": (NN, [10, 20, 30, 40], (2,), (0.5,), (1.0,), (-0.5,), "increasing", [10, 30]),
}


@pytest.mark.parametrize("vector", list(R_VECTORS))
def test_spec_vectors_10_3_through_transpose(device, vector):
    mode, x, y_sizes, scales, ioff, ooff, rounding, expected = R_VECTORS[vector]
    dtype = np.float16 if vector == "R-17" else np.float32
    x = np.asarray(x, np.float64)
    y = np.zeros(y_sizes)
    outputs = list(itertools.product(*map(range, y_sizes)))
    if vector == "R-15":
        outputs = [(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (1, 1, 1, 1), (2, 2, 2, 2)]
    for o in outputs:
        e = np.zeros(y_sizes, dtype)
        e[o] = 1
        row = device_grad(device, e, x.shape, mode, scales, ioff, ooff, rounding)
        y[o] = np.sum(row.astype(np.float64) * x)
    if vector == "R-15":
        np.testing.assert_allclose([y[0, 0, 0, 0], y[0, 0, 0, 1], y[0, 0, 0, 2], y[1, 1, 1, 1],
                                    y[2, 2, 2, 2]], [0, 0.5, 1, 7.5, 15], rtol=1e-6, atol=1e-7)
        total = device_grad(device, np.ones(y_sizes, np.float32), x.shape, mode, scales)
        np.testing.assert_allclose(np.sum(total.astype(np.float64) * x), 607.5, rtol=1e-6)
        return
    rtol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(y, np.asarray(expected, np.float64), rtol=rtol, atol=1e-6)


# ---- properties ----

def random_params(rng, rank, mode=None):
    """Random forward parameters: every dimension scaled (up, down, non-integer, 1), offsets
    from the usual conventions or random, output sizes matching the scale or not (crop and
    clamp)."""
    dx_sizes, dy_sizes, scales, ioff, ooff = [], [], [], [], []
    for _ in range(rank):
        n = int(rng.integers(1, 7))
        scale = float(rng.choice([0.5, 2.0, 1.5, 1 / 3, 2.5, 1.0, 0.75, 4.0,
                                  float(rng.uniform(0.2, 4.0))]))
        m = max(1, int(round(n * scale))) if rng.random() < 0.6 else int(rng.integers(1, 11))
        a, b = [(0.5, -0.5), (0.0, 0.0), (0.5, 0.0), (float(rng.uniform(-1, 1)),
                                                      float(rng.uniform(-1, 1)))][
            int(rng.integers(0, 4))]
        dx_sizes.append(n)
        dy_sizes.append(m)
        scales.append(scale)
        ioff.append(a)
        ooff.append(b)
    mode = mode or [NN, LIN][int(rng.integers(0, 2))]
    rounding = [None, "decreasing", "increasing"][int(rng.integers(0, 3))]
    return tuple(dy_sizes), tuple(dx_sizes), tuple(scales), tuple(ioff), tuple(ooff), mode, \
        rounding


@pytest.mark.parametrize("case", range(16))
def test_random_parameters(device, rng, case):
    """Both algorithms and both data types on random parameters of every rank."""
    rank = case % 4 + 1
    dy_sizes, dx_sizes, scales, ioff, ooff, mode, rounding = random_params(rng, rank)
    for dtype in DTYPES:
        dy = random_array(rng, dy_sizes, dtype)
        for algorithm in ALGORITHMS:
            check(device, dy, dx_sizes, mode, scales, ioff, ooff, rounding, algorithm)


@pytest.mark.parametrize("mode", [NN, LIN])
@pytest.mark.parametrize("case", range(3))
def test_adjoint_identity(device, rng, mode, case):
    """<resample1(x), dY> == <x, resample_grad(dY)> with the oracle's float64 forward (RG-P)."""
    dy_sizes, dx_sizes, scales, ioff, ooff, _, rounding = random_params(rng, 4, mode)
    x = rng.uniform(-1, 1, dx_sizes)
    dy = random_array(rng, dy_sizes, np.float32)
    forward = reference.resample1(x, dy_sizes, **parameters(mode, scales, ioff, ooff, rounding))
    lhs = np.sum(forward * dy)
    for algorithm in ALGORITHMS:
        dx = device_grad(device, dy, dx_sizes, mode, scales, ioff, ooff, rounding, algorithm)
        rhs = np.sum(x * dx.astype(np.float64))
        scale = np.sum(np.abs(x) * oracle(dy, dx_sizes, mode, scales, ioff, ooff, rounding)[1])
        assert abs(lhs - rhs) <= 1e-5 * scale + 1e-12, (algorithm, lhs, rhs)


@pytest.mark.parametrize("mode", [NN, LIN])
def test_sum_preservation(device, rng, mode, algorithm):
    """Every forward output reads weights summing to 1, so sum(dX) == sum(dY), crop and clamp
    included."""
    for dy_sizes, dx_sizes, scales in [((2, 3, 9, 14), (2, 3, 4, 6), (1, 1, 2, 7 / 3)),
                                       ((1, 2, 3, 20), (1, 2, 7, 5), (1, 1, 0.5, 3.0)),
                                       ((5, 17), (5, 9), (1.0, 0.6))]:
        dy = random_array(rng, dy_sizes, np.float32)
        dx = device_grad(device, dy, dx_sizes, mode, scales, algorithm=algorithm)
        total = np.sum(np.abs(dy.astype(np.float64)))
        assert abs(np.sum(dx.astype(np.float64)) - np.sum(dy.astype(np.float64))) <= 1e-5 * total


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES_BY_RANK[:4], ids=lambda s: f"rank{len(s)}")
def test_every_rank(device, rng, dtype, shape):
    """Ranks 1 to 4: up- and down-sampling mixed over the dimensions, both modes."""
    rank = len(shape)
    dx_sizes = shape
    factors = [2.0, 0.5, 1.5, 3.0][:rank]
    dy_sizes = tuple(max(1, int(n * f)) for n, f in zip(dx_sizes, factors))
    dy = random_array(rng, dy_sizes, dtype)
    for mode in (NN, LIN):
        for algorithm in ALGORITHMS:
            check(device, dy, dx_sizes, mode, factors, algorithm=algorithm)


@pytest.mark.parametrize("dtype", DTYPES)
def test_default_parameters(device, rng, dtype, algorithm):
    """scales = dY size / dX size in float32, offsets 0.5 / -0.5 (DirectMLX), the same in the
    one-call function and the oracle (pyvkgrad/defaults.py)."""
    assert defaults.resample_grad((2, 3, 10, 9), (2, 3, 6, 4)) == (
        (1.0, 1.0, float(np.float32(10) / np.float32(6)), 2.25), (0.5,) * 4, (-0.5,) * 4)
    dy = random_array(rng, (2, 3, 10, 9), dtype)
    for mode in (NN, LIN):
        out = pyvkgrad.resample_grad(dy, (2, 3, 6, 4), interpolation_mode=mode,
                                     algorithm=algorithm, device=device)
        expected, magnitude = oracle(dy, (2, 3, 6, 4), mode, None)
        assert_close(out, expected, magnitude, dtype, mode)


def test_rounding_directions_on_ties(device, algorithm):
    """Exact ties x = k + 0.5: RESAMPLE1 rounds up, decreasing floors, increasing ceils;
    integer coordinates are unaffected by floor/ceil (docs/semantics.md §6.3)."""
    dy = np.array([1, 2], np.float32)
    cases = [(None, (0.5,), [0, 1, 0, 2]), ("decreasing", (0.5,), [1, 0, 2, 0]),
             ("increasing", (0.5,), [0, 1, 0, 2]), ("increasing", (1.0,), [1, 0, 2, 0]),
             ("decreasing", (1.0,), [1, 0, 2, 0]), (AxisDirection.INCREASING, (1.0,), [1, 0, 2, 0])]
    for rounding, ioff, expected in cases:
        out = device_grad(device, dy, (4,), NN, (0.5,), ioff, (-0.5,), rounding, algorithm)
        np.testing.assert_array_equal(out, expected, err_msg=f"{rounding} {ioff}")
    # Linear ignores the rounding direction.
    for rounding in (None, "decreasing", "increasing"):
        out = device_grad(device, dy, (4,), LIN, (0.5,), None, None, rounding, algorithm)
        np.testing.assert_array_equal(out, [0.5, 0.5, 1, 1])


@pytest.mark.parametrize("mode", [NN, LIN])
def test_coordinates_beyond_float32(device, mode, algorithm):
    """A tiny Scale sends x past FLT_MAX (inf): the tap clamps to the last element."""
    dy = np.arange(1, 9, dtype=np.float32)
    out = device_grad(device, dy, (3,), mode, (1e-38,), algorithm=algorithm)
    np.testing.assert_array_equal(out, [0, 0, 36])


@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_packed_float16_counts_exact(device, rng, dtype):
    """Packed float16 dX with an odd element count (the last word half used), both kernels
    identical on data whose sums are exact."""
    dy = rng.integers(-8, 8, size=(3, 5, 7)).astype(dtype)
    outs = [device_grad(device, dy, (3, 3, 5), NN, (1, 5 / 3, 1.4), algorithm=a)
            for a in ALGORITHMS]
    expected, _ = oracle(dy, (3, 3, 5), NN, (1, 5 / 3, 1.4))
    for out in outs:
        np.testing.assert_array_equal(out, expected.astype(dtype))


# ---- strided descriptors ----

@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_input_gradient_views(device, rng, dtype, algorithm):
    """A non-contiguous, permuted dY view and a broadcast (zero-stride) dY view."""
    dy = strided_view(rng, (2, 3, 8, 6), dtype)
    assert not dy.flags.c_contiguous
    check(device, dy, (2, 3, 4, 5), LIN, (1, 1, 2, 1.2), algorithm=algorithm)
    check(device, dy, (2, 3, 4, 5), NN, (1, 1, 2, 1.2), algorithm=algorithm)
    dyb = np.broadcast_to(random_array(rng, (1, 3, 1, 6), dtype), (2, 3, 8, 6))
    check(device, dyb, (2, 3, 4, 5), LIN, (1, 1, 2, 1.2), algorithm=algorithm)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("mode", [NN, LIN])
def test_compiled_operator_with_strided_descriptors(device, rng, dtype, mode, algorithm):
    """The descriptor API: strided dY (padded rows), NHWC-strided dX, two calls, same buffers."""
    n, c, h, w, oh, ow = 2, 3, 5, 4, 8, 7
    dy_desc = TensorDesc(dtype, (n, c, oh, ow), (c * oh * 9, oh * 9, 9, 1))  # rows padded to 9
    dx_desc = TensorDesc(dtype, (n, c, h, w), (h * w * c, 1, w * c, c))  # NHWC
    scales = (1, 1, oh / h, ow / w)
    desc = pyvkgrad.ResampleGradDesc(dy_desc, dx_desc, mode, scales, (0.5,) * 4, (-0.5,) * 4,
                                     algorithm=algorithm)
    op = device.compile(desc)
    np_dtype = dtype.numpy_dtype
    for _ in range(2):
        padded = random_array(rng, (n, c, oh, 9), np_dtype)
        dy = padded[..., :ow]
        tdy = device.upload(dy)
        assert tdy.desc.strides == dy_desc.strides
        tdx = device.empty(dx_desc)
        op(input_gradient_tensor=tdy, output_gradient_tensor=tdx)
        out = tdx.numpy()
        expected, magnitude = oracle(dy, (n, c, h, w), mode, desc.scales)
        assert_close(out, expected, magnitude, np_dtype, f"{mode} {algorithm} {dtype.name}")
    op.close()


def test_output_gaps_are_not_required(device, rng, algorithm):
    """A dX with gaps between rows: the logical elements are right (DirectML may write
    anywhere inside an output's range, so the gaps are not compared)."""
    dx_desc = TensorDesc(F32, (3, 4), (7, 1))
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(F32, (6, 8)), dx_desc, LIN, (2, 2),
                                     (0.5, 0.5), (-0.5, -0.5), algorithm=algorithm)
    op = device.compile(desc)
    dy = random_array(rng, (6, 8), np.float32)
    tdx = device.empty(dx_desc)
    op(input_gradient_tensor=device.upload(dy), output_gradient_tensor=tdx)
    expected, magnitude = oracle(dy, (3, 4), LIN, (2, 2))
    assert_close(tdx.numpy(), expected, magnitude, np.float32)


# ---- the two kernels ----

@pytest.mark.parametrize("atomic", ["atomic", "atomic-cas"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_algorithms_agree(device, rng, dtype, atomic):
    """gather and atomic differ only by float32 reassociation (before float16 rounding)."""
    dy = random_array(rng, (2, 4, 23, 17), dtype)
    for mode in (NN, LIN):
        g = device_grad(device, dy, (2, 4, 9, 13), mode, (1, 1, 23 / 9, 17 / 13),
                        algorithm="gather").astype(np.float64)
        a = device_grad(device, dy, (2, 4, 9, 13), mode, (1, 1, 23 / 9, 17 / 13),
                        algorithm=atomic).astype(np.float64)
        _, magnitude = oracle(dy, (2, 4, 9, 13), mode, (1, 1, 23 / 9, 17 / 13))
        tol = (2.0**-9 * magnitude + 2.0**-23) if dtype == np.float16 else 2e-6 * magnitude
        assert np.all(np.abs(g - a) <= tol), mode


def test_gather_is_bitwise_reproducible(device, rng, monkeypatch):
    """The gather kernel sums in a fixed order: identical bits from run to run and for any
    workgroup width (each invocation owns its elements)."""
    dy = random_array(rng, (2, 3, 40, 33), np.float32)
    sizes, scales = (2, 3, 17, 15), (1, 1, 40 / 17, 2.2)
    first = device_grad(device, dy, sizes, LIN, scales).view(np.uint32)
    second = device_grad(device, dy, sizes, LIN, scales).view(np.uint32)
    np.testing.assert_array_equal(first, second)
    monkeypatch.setenv("PYVKGRAD_LOCAL_SIZE", "32")
    assert device.limits.local_size == 32
    narrow = device_grad(device, dy, sizes, LIN, scales).view(np.uint32)
    np.testing.assert_array_equal(first, narrow)


def test_plan_shapes():
    """Pure plans: gather is one dispatch; atomic fills, scatters (and converts float16);
    tables are per axis (summed, not multiplied) and identity axes have none."""
    from pyvkgrad.plan import Limits
    dy, dx = TensorDesc(F32, (8, 16, 64, 96)), TensorDesc(F32, (8, 16, 32, 48))
    desc = pyvkgrad.ResampleGradDesc(dy, dx, "linear", [1, 1, 2, 2], (0.5,) * 4, (-0.5,) * 4)
    assert desc.algorithm == "gather" and desc.interpolation_mode == InterpolationMode.LINEAR
    plan = desc.plan(Limits())
    assert [d.kernel for d in plan.dispatches] == ["resample_grad_walk"]
    (table,) = plan.scratch
    assert table.words.size <= 3 * (32 + 48) + 2 * 2 * (64 + 96) + 8  # N and C: identity
    plan = desc.plan(Limits(), gather={"kernel": "gather"})
    assert [d.kernel for d in plan.dispatches] == ["resample_grad_gather"]
    (table,) = plan.scratch
    assert table.words.size <= 3 * (32 + 48) + 2 * 2 * (64 + 96) + 8
    atomic = pyvkgrad.ResampleGradDesc(dy, dx, "linear", [1, 1, 2, 2], (0.5,) * 4, (-0.5,) * 4,
                                       algorithm="atomic").plan(Limits())
    assert [d.kernel for d in atomic.dispatches] == ["resample_grad_fill", "resample_grad_atomic"]
    half = pyvkgrad.ResampleGradDesc(TensorDesc(F16, dy.sizes), TensorDesc(F16, dx.sizes),
                                     "nearest_neighbor", [1, 1, 2, 2], (0.5,) * 4, (-0.5,) * 4,
                                     algorithm="atomic").plan(Limits())
    assert [d.kernel for d in half.dispatches] == ["resample_grad_fill", "resample_grad_atomic",
                                                   "resample_grad_convert"]
    assert [s.name for s in half.scratch] == ["tables", "accumulator"]
    native = pyvkgrad.ResampleGradDesc(dy, dx, "linear", [1, 1, 2, 2], (0.5,) * 4, (-0.5,) * 4,
                                       algorithm="atomic").plan(Limits(float_atomic_add=True))
    assert [d.kernel for d in native.dispatches] == ["resample_grad_fill",
                                                     "resample_grad_atomic_native"]


def test_native_float_atomics_where_the_device_has_them(device, monkeypatch):
    """With pyvkgrad's kp patch, a device reporting shaderBufferFloat32AtomicAdd gets it enabled
    and the atomic algorithm uses it (lavapipe does, so CI runs the native kernel);
    PYVKGRAD_FLOAT_ATOMICS=0 falls back to compare-and-swap."""
    from conftest import IN_CI
    monkeypatch.delenv("PYVKGRAD_FLOAT_ATOMICS", raising=False)
    assert device.float_atomic_add == device.info.shader_buffer_float32_atomic_add
    if IN_CI:
        assert device.float_atomic_add, "CI's lavapipe should run the native atomic kernel"
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(F32, (4, 6)), TensorDesc(F32, (2, 3)),
                                     "linear", [2, 2], (0.5, 0.5), (-0.5, -0.5),
                                     algorithm="atomic")
    kernels = [d.kernel for d in device.compile(desc).plan.dispatches]
    assert kernels[-1] == ("resample_grad_atomic_native" if device.float_atomic_add
                           else "resample_grad_atomic")
    monkeypatch.setenv("PYVKGRAD_FLOAT_ATOMICS", "0")
    assert not device.float_atomic_add
    assert [d.kernel for d in device.compile(desc).plan.dispatches][-1] == "resample_grad_atomic"


def test_descriptor_is_normalised_and_hashable():
    dy, dx = TensorDesc(F32, (1, 4)), TensorDesc(F32, (1, 2))
    a = pyvkgrad.ResampleGradDesc(dy, dx, "linear", [1, 2], [0.5, 0.5], np.array([-0.5, -0.5]),
                                  algorithm="auto")
    b = pyvkgrad.ResampleGradDesc(dy, dx, InterpolationMode.LINEAR, (1.0, 2.0), (0.5, 0.5),
                                  (-0.5, -0.5), None, "gather")
    assert a == b and hash(a) == hash(b)
    assert a.scales == (1.0, 2.0) and all(type(s) is float for s in a.scales)
    c = pyvkgrad.ResampleGradDesc(dy, dx, 0, (1, 0.1), (0, 0), (0, 0), "increasing")
    assert c.interpolation_mode == InterpolationMode.NEAREST_NEIGHBOR
    assert c.rounding_direction == AxisDirection.INCREASING
    assert c.scales[1] == float(np.float32(0.1))  # stored as DirectML's FLOAT


def test_one_call_reuses_compiled_operator(device, rng):
    dy = random_array(rng, (5, 9), np.float32)
    device_grad(device, dy, (3, 4), LIN, (5 / 3, 9 / 4))
    before = device.cache_info()
    check(device, dy * 2, (3, 4), LIN, (5 / 3, 9 / 4))
    after = device.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


@pytest.mark.slow
@pytest.mark.parametrize("atomic", ["atomic", "atomic-cas"])
def test_workgroup_count_beyond_limit(device, rng, atomic):
    """More than 65535 * 256 items: the atomic kernels over a large dY (small dX), the gather
    kernel over a large dX (small dY)."""
    from pyvkgrad.plan import Limits
    big = (4097, 4096)
    assert big[0] * big[1] >= BEYOND_WORKGROUP_LIMIT - 257
    # Sparse (zero dY elements add nothing, and lavapipe's CAS loops are slow), with nonzeros
    # throughout and in the last rows, which only the grid-stride loop's second pass reaches.
    dy = np.where(rng.random(big) < 0.02, random_array(rng, big, np.float32), np.float32(0))
    dy[-2:] = random_array(rng, (2, big[1]), np.float32)
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(F32, big), TensorDesc(F32, (3, 5)), LIN,
                                     (4097 / 3, 4096 / 5), (0.5, 0.5), (-0.5, -0.5),
                                     algorithm="atomic")
    assert desc.plan(Limits()).dispatches[1].workgroups == 65535
    out = device_grad(device, dy, (3, 5), LIN, desc.scales, algorithm=atomic)
    expected, magnitude = oracle(dy, (3, 5), LIN, desc.scales)
    # ~2^14 float32 atomic adds per element: a looser, sum-length-aware bound.
    assert np.all(np.abs(out - expected) <= 1e-4 * magnitude)
    small = random_array(rng, (3, 5), np.float32)
    out = device_grad(device, small, big, NN, (3 / 4097, 5 / 4096))
    expected, _ = oracle(small, big, NN, (3 / 4097, 5 / 4096))
    np.testing.assert_array_equal(out, expected)  # nearest: each element one copy or 0


# ---- errors: raised before any device work, naming the operator and the field ----

def _desc(**over):
    args = dict(input_gradient_tensor=TensorDesc(F32, (1, 1, 4, 4)),
                output_gradient_tensor=TensorDesc(F32, (1, 1, 2, 2)),
                interpolation_mode="nearest_neighbor", scales=(1, 1, 2, 2),
                input_pixel_offsets=(0.5,) * 4, output_pixel_offsets=(-0.5,) * 4)
    args.update(over)
    return pyvkgrad.ResampleGradDesc(**args)


@pytest.mark.parametrize("over, kind, message", [
    (dict(scales=(1, 0, 2, 2)), ValueError,
     r"^RESAMPLE_GRAD: Scales\[1\] must be positive and finite: expected > 0, got 0.0$"),
    (dict(scales=(1, 1, -2, 2)), ValueError, r"Scales\[2\] must be positive and finite: "
                                             r"expected > 0, got -2.0"),
    (dict(scales=(1, 1, 2, float("nan"))), ValueError, r"Scales\[3\] .* got nan"),
    (dict(scales=(float("inf"), 1, 2, 2)), ValueError, r"Scales\[0\] .* got inf"),
    (dict(scales=(1e-50, 1, 2, 2)), ValueError, r"Scales\[0\] must be positive and finite in "
                                                r"float32"),
    (dict(scales=(1, 1e39, 2, 2)), ValueError, r"Scales\[1\] must be positive and finite in "
                                               r"float32"),
    (dict(scales=(1, 2, 2)), ValueError, r"Scales must have one entry per dimension: "
                                         r"expected 4, got 3"),
    (dict(scales=(1, 1, "2", 2)), TypeError, r"Scales\[2\] must be a real number"),
    (dict(scales=2.0), TypeError, r"Scales must be a sequence of numbers"),
    (dict(input_pixel_offsets=(0.5,) * 5), ValueError,
     r"InputPixelOffsets must have one entry per dimension: expected 4, got 5"),
    (dict(output_pixel_offsets=(0, 0, float("nan"), 0)), ValueError,
     r"OutputPixelOffsets\[2\] must be finite: expected a finite float32, got nan"),
    (dict(input_pixel_offsets=(0, float("-inf"), 0, 0)), ValueError,
     r"InputPixelOffsets\[1\] must be finite"),
    (dict(interpolation_mode="cubic"), ValueError, r"InterpolationMode is not supported: "
                                                   r"expected 'nearest_neighbor' or 'linear'"),
    (dict(interpolation_mode=2), ValueError, r"InterpolationMode is not supported"),
    (dict(interpolation_mode=1.0), TypeError, r"InterpolationMode must be a string or an enum"),
    (dict(rounding_direction="up"), ValueError, r"RoundingDirection is not supported: "
                                                r"expected None, 'decreasing' or 'increasing'"),
    (dict(algorithm="fast"), ValueError, r"algorithm is not supported: expected 'auto', "
                                         r"'gather' or 'atomic', got 'fast'"),
    (dict(output_gradient_tensor=TensorDesc(F16, (1, 1, 2, 2))), TypeError,
     r"OutputGradientTensor.DataType must equal InputGradientTensor.DataType: "
     r"expected FLOAT32, got FLOAT16"),
    (dict(output_gradient_tensor=TensorDesc(F32, (2, 2))), ValueError,
     r"OutputGradientTensor.DimensionCount must equal InputGradientTensor.DimensionCount: "
     r"expected 4, got 2"),
    (dict(input_gradient_tensor=TensorDesc(F32, (1,) * 5),
          output_gradient_tensor=TensorDesc(F32, (1,) * 5), scales=(1,) * 5), ValueError,
     r"InputGradientTensor.DimensionCount is out of range: expected 1 to 4, got 5"),
    (dict(output_gradient_tensor=TensorDesc(F32, (1, 1, 2, 2), (4, 4, 1, 1))), ValueError,
     r"OutputGradientTensor.Strides must not make output elements overlap"),
    (dict(input_gradient_tensor="dy"), TypeError, r"InputGradientTensor must be a TensorDesc"),
])
def test_descriptor_errors(over, kind, message):
    with pytest.raises(kind, match=message):
        _desc(**over)


@pytest.mark.parametrize("args, kwargs, kind, message", [
    ((np.ones((2, 2), np.float32), (2, 2)), dict(scales=(1, 0)), ValueError,
     r"RESAMPLE_GRAD: Scales\[1\] must be positive and finite: expected > 0, got 0.0"),
    ((np.ones((2, 2), np.float32), (2, 2, 1)), {}, ValueError,
     r"OutputGradientTensor.DimensionCount must equal InputGradientTensor.DimensionCount: "
     r"expected 2, got 3"),
    ((np.ones((2, 2), np.float32), (2, 0)), {}, ValueError,
     r"OutputGradientTensor.Sizes must all be at least 1"),
    ((np.ones((2, 2), np.float32), (2, 2.5)), {}, TypeError,
     r"output_gradient_sizes must hold integers"),
    ((np.ones((1,) * 5, np.float32), (1,) * 5), {}, ValueError,
     r"InputGradientTensor.DimensionCount is out of range: expected 1 to 4, got 5"),
    ((np.ones(3, np.float64), (3,)), {}, TypeError,
     r"RESAMPLE_GRAD: InputGradientTensor has unsupported dtype: expected float32 or float16"),
    (([1.0, 2.0], (2,)), {}, TypeError, r"InputGradientTensor must be a numpy array"),
    ((np.ones(3, np.float32), (3,)), dict(input_pixel_offsets=(0.5, 0.5)), ValueError,
     r"InputPixelOffsets must have one entry per dimension: expected 1, got 2"),
    ((np.ones(3, np.float32), (3,)), dict(algorithm="gpu"), ValueError,
     r"algorithm is not supported"),
    ((np.ones(3, np.float32), (3,)), dict(interpolation_mode="bilinear"), ValueError,
     r"InterpolationMode is not supported"),
])
def test_one_call_errors(device, args, kwargs, kind, message, monkeypatch):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    with pytest.raises(kind, match=message):
        pyvkgrad.resample_grad(*args, device=device, **kwargs)


def test_binding_errors(device):
    op = device.compile(_desc(input_gradient_tensor=TensorDesc(F32, (1, 1, 4, 16)),
                              output_gradient_tensor=TensorDesc(F32, (1, 1, 2, 8))))
    good_dy = device.empty(TensorDesc(F32, (1, 1, 4, 16)))
    small_dx = device.empty(TensorDesc(F32, (1, 1, 2, 2)))
    half_dx = device.empty(TensorDesc(F16, (1, 1, 2, 8)))
    with pytest.raises(ValueError, match=r"OutputGradientTensor is bound to a buffer too small"):
        op(input_gradient_tensor=good_dy, output_gradient_tensor=small_dx)
    with pytest.raises(TypeError, match=r"OutputGradientTensor has the wrong data type"):
        op(input_gradient_tensor=good_dy, output_gradient_tensor=half_dx)
    with pytest.raises(TypeError, match=r"missing \['output_gradient_tensor'\]"):
        op(input_gradient_tensor=good_dy)
    op.close()


# ---- the walk kernels (resample_grad_walk, resample_grad_walk_pair) --------------------------

WALK_OPTIONS = [dict(rows=1), dict(rows=3), dict(rows=16), dict(cols=1), dict(cols=2),
                dict(switch=False), dict(pad=True), dict(pair=False), dict(lanes="q"),
                dict(lanes="b"), dict(rows=5, cols=2, switch=False), dict(select=False),
                dict(select=False, cols=2, rows=2), dict(zero_weights=True),
                dict(zero_weights=True, cols=2, rows=3, switch=False), dict(align=True),
                dict(align=True, zero_weights=True, rows=2)]


class _Choice(OperatorDesc):
    """A ResampleGradDesc compiled with one `gather` plan option."""

    def __init__(self, desc, gather):
        self.desc, self.gather, self.OPERATOR = desc, gather, desc.OPERATOR

    def plan(self, limits):
        return self.desc.plan(limits, gather=self.gather)

    def tensor_fields(self):
        return self.desc.tensor_fields()


def run_choice(device, desc, dy, gather):
    """(dX, kernels) of `desc` on the array dy (uploaded in its own layout), dX poisoned with
    NaN first so an element left unwritten shows."""
    op = device.compile(_Choice(desc, gather))
    tdx = device.empty(desc.output_gradient_tensor)
    tdx.write(np.full(desc.output_gradient_tensor.sizes, np.nan, dy.dtype))
    tdy = device.upload(dy)
    assert tdy.desc == desc.input_gradient_tensor
    op(input_gradient_tensor=tdy, output_gradient_tensor=tdx)
    out = tdx.numpy()
    kernels = [d.kernel for d in op.plan.dispatches]
    op.close()
    return out, kernels


def assert_same_bits(a, b, what):
    """Bitwise equal, NaN where the other is NaN (whatever its payload)."""
    assert a.dtype == b.dtype and a.shape == b.shape, what
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"{what}: NaNs")
    bits = np.uint16 if a.dtype == np.float16 else np.uint32
    a, b = np.where(np.isnan(a), 0, a).astype(a.dtype), np.where(np.isnan(b), 0, b).astype(a.dtype)
    diff = a.view(bits) != b.view(bits)
    if diff.any():
        i = tuple(np.argwhere(diff)[0])
        raise AssertionError(f"{what}: {diff.sum()} of {diff.size} elements differ, first at "
                             f"{i}: {a[i]!r} vs {b[i]!r}")


def walk_problem(rng, rank):
    """Random forward parameters with one or two resampled axes (the rest identities), and
    random layouts: dY packed, a permuted copy or a strided slice; dX packed, permuted
    (channels-last style) or with gaps."""
    resampled = set(rng.choice(rank, size=min(rank, int(rng.integers(1, 3))), replace=False))
    dx_sizes, dy_sizes, scales, ioff, ooff = [], [], [], [], []
    for d in range(rank):
        if d in resampled:
            n = int(rng.integers(1, 12))
            scale = float(rng.choice([2.0, 0.5, 1.5, 3.0, 80 / 48, 1 / 3, 0.75, 5.0,
                                      float(rng.uniform(0.25, 5.0))]))
            m = max(1, int(round(n * scale))) if rng.random() < 0.7 else int(rng.integers(1, 20))
            a, b = [(0.5, -0.5), (0.0, 0.0), (0.5, 0.0), (float(rng.uniform(-1, 1)),
                                                          float(rng.uniform(-1, 1)))][
                int(rng.integers(0, 4))]
        else:
            n = m = int(rng.choice([1, 2, 3, 4, 6]))
            scale, a, b = 1.0, 0.5, -0.5
        dx_sizes.append(n)
        dy_sizes.append(m)
        scales.append(scale)
        ioff.append(a)
        ooff.append(b)
    order = list(rng.permutation(rank))
    layout = int(rng.integers(0, 3))
    if layout == 1:  # dX with axis order `order` in memory (e.g. NHWC)
        strides = [0] * rank
        step = 1
        for d in reversed(order):
            strides[d] = step
            step *= dx_sizes[d]
        dx_strides = tuple(strides)
    elif layout == 2:  # gaps: every element's offset doubled, plus one
        dx_strides = tuple(2 * s for s in pyvkgrad.tensor.packed_strides(dx_sizes))
    else:
        dx_strides = None
    return (tuple(dy_sizes), tuple(dx_sizes), dx_strides, tuple(scales), tuple(ioff),
            tuple(ooff), order)


def walk_dy(rng, dy_sizes, dtype, order, kind):
    if kind == 1:  # a permuted copy: axis order `order` in memory
        base = random_array(rng, tuple(dy_sizes[d] for d in order), dtype)
        return np.transpose(base, np.argsort(order))
    if kind == 2:  # every other element along the last axis
        return random_array(rng, tuple(dy_sizes[:-1]) + (2 * dy_sizes[-1],), dtype)[..., ::2]
    dy = random_array(rng, dy_sizes, dtype)
    if dy.size > 8:  # non-finite values stay with the elements that read them
        dy.flat[rng.choice(dy.size, 2, replace=False)] = [np.inf, np.nan]
    return dy


@pytest.mark.parametrize("case", range(12))
def test_walk_kernels_match_the_gather_bitwise(device, rng, case):
    """The walk kernels sum the same terms in the same order as resample_grad_gather: the same
    bits for every option, on random parameters with one or two resampled axes, strided and
    permuted layouts of both tensors, both modes and data types, and every rounding."""
    rank = case % 4 + 1
    dy_sizes, dx_sizes, dx_strides, scales, ioff, ooff, order = walk_problem(rng, rank)
    rounding = [None, "decreasing", "increasing"][case % 3]
    for dtype, mode in ((np.float32, NN), (np.float32, LIN), (np.float16, NN),
                        (np.float16, LIN)):
        dt = F32 if dtype == np.float32 else F16
        dy = walk_dy(rng, dy_sizes, dtype, order, int(rng.integers(0, 3)))
        desc = pyvkgrad.ResampleGradDesc(
            TensorDesc(dt, dy_sizes, array_strides(dy)), TensorDesc(dt, dx_sizes, dx_strides),
            mode, scales, ioff, ooff, rounding)
        want, kernels = run_choice(device, desc, dy, {"kernel": "gather"})
        assert kernels == ["resample_grad_gather"]
        if np.isfinite(dy).all():
            expected, magnitude = oracle(dy, dx_sizes, mode, scales, ioff, ooff, rounding)
            assert_close(want, expected, magnitude, dtype, "gather")
        what = f"{mode} {dtype.__name__} {dy_sizes}->{dx_sizes} {dx_strides}"
        got, kernels = run_choice(device, desc, dy, {})
        assert_same_bits(got, want, what)
        if kernels == ["resample_grad_gather"]:
            continue  # the walk does not apply (e.g. more than 12 contributors per column)
        picks = [WALK_OPTIONS[i] for i in rng.choice(len(WALK_OPTIONS), 3, replace=False)]
        for options in picks:
            try:
                got, kernels = run_choice(device, desc, dy, dict(options, kernel="walk"))
            except ValueError:  # cols=2 with paired lanes, or a union of > 12 with cols=2
                assert options.get("cols") == 2 or options.get("lanes") == "b", what
                continue
            assert kernels[0].startswith("resample_grad_walk"), what
            assert_same_bits(got, want, f"{what} {options}")


def array_strides(a):
    """The strides device.upload gives a numpy view (None: packed)."""
    from pyvkgrad.tensor import array_desc
    return array_desc(a, "test", "array", 2**40)[0].strides


@pytest.mark.parametrize("dtype", DTYPES)
def test_walk_kernels_on_the_benchmark_layouts(device, rng, dtype):
    """NCHW and NHWC at 2x, 80 -> 48, 1.5x and 3x (small batches): the default plan picks the
    walk kernels (float16: whole-word stores) and matches the gather bitwise, with non-finite
    dY values next to finite ones kept to their own contributors."""
    dt = F32 if dtype == np.float32 else F16
    for (h, w, ratio), nhwc in itertools.product(
            [(8, 8, 2.0), (6, 6, 80 / 48), (8, 8, 1.5), (4, 4, 3.0)], (False, True)):
        n, c, oh, ow = 2, 4, round(h * ratio), round(w * ratio)
        dy = random_array(rng, (n, oh, ow, c) if nhwc else (n, c, oh, ow), dtype)
        dy.flat[rng.choice(dy.size, 3, replace=False)] = [np.inf, -np.inf, np.nan]
        if nhwc:
            dy = dy.transpose(0, 3, 1, 2)
        dx_strides = (h * w * c, 1, w * c, c) if nhwc else None
        for mode in (NN, LIN):
            desc = pyvkgrad.ResampleGradDesc(
                TensorDesc(dt, dy.shape, array_strides(dy)), TensorDesc(dt, (n, c, h, w),
                                                                        dx_strides),
                mode, (1, 1, oh / h, ow / w), (0.5,) * 4, (-0.5,) * 4)
            want, _ = run_choice(device, desc, dy, {"kernel": "gather"})
            got, kernels = run_choice(device, desc, dy, {})
            what = f"{mode} {dtype.__name__} {h}x{w} x{ratio:.3f} nhwc={nhwc}"
            assert kernels == ["resample_grad_walk_pair" if nhwc and dtype == np.float16
                               else "resample_grad_walk"], what
            assert_same_bits(got, want, what)


def mul_add32(a, b, c):
    """c + a * b as the kernels compute it: a float32 multiply, then a float32 add, each
    rounded (never an fma, which Vulkan lets a device round once or twice)."""
    return np.float32(np.float32(np.float32(a) * np.float32(b)) + np.float32(c))


def documented_linear_sum(dy, desc):
    """dX of a linear ResampleGrad with the arithmetic docs/semantics.md §6.15 gives: per dX
    element, for each combination of contributors along the outer axes (ascending),
    h = h + dY * w_inner from 0 along the innermost resampled axis, then
    acc = acc + h * w_outer, w_outer the product of the outer weights in axis order, each
    multiply and add rounded to float32; a float16 dX rounds acc once."""
    maps = desc.axis_maps()
    resampled = [d for d, m in enumerate(maps) if not m.identity]
    inner = resampled[-1] if resampled else dy.ndim - 1

    def contributors(d, i):  # [(o, weight)] of dX index i along axis d
        m = maps[d]
        if m.identity:
            return [(i, np.float32(1))]
        lo, hi = int(m.counts[i]), int(m.counts[i + 1])
        first = int(m.begin[i]) if m.begin is not None else lo
        return [(first + k, m.weights[lo + k]) for k in range(hi - lo)]

    dx = np.zeros(desc.output_gradient_tensor.sizes, np.float32)
    dy32 = dy.astype(np.float32)
    for index in np.ndindex(*dx.shape):
        acc = np.float32(0)
        outer = [contributors(d, index[d]) for d in range(dy.ndim) if d != inner]
        for combo in itertools.product(*outer):
            w_outer, pos = np.float32(1), []
            for (o, w) in combo:
                w_outer = np.float32(w_outer * w)
                pos.append(o)
            h = np.float32(0)
            for o, w in contributors(inner, index[inner]):
                at = list(pos)
                at.insert(inner, o)
                h = mul_add32(dy32[tuple(at)], w, h)
            acc = mul_add32(h, w_outer, acc)
        dx[index] = acc
    return dx.astype(dy.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dy_sizes, dx_sizes, scales", [
    ((11, 13), (5, 6), (11 / 5, 13 / 6)),  # two resampled axes: the walk kernels
    ((3, 9, 10), (3, 4, 7), (1.0, 9 / 4, 10 / 7)),  # an identity axis outside them
    ((7, 6, 5), (3, 4, 9), (7 / 3, 1.5, 5 / 9)),  # three: resample_grad_gather, w_outer a product
    ((17,), (6,), (17 / 6,)),  # one: w_outer 1
], ids=["2d", "identity-outer", "3d", "1d"])
def test_linear_sums_are_the_documented_arithmetic(device, rng, dtype, dy_sizes, dx_sizes,
                                                   scales):
    """The linear gather's bits are the documented arithmetic (row sums along the innermost
    resampled axis, then one multiply-add per row, each multiply and add rounded), emulated
    here, for every gather kernel and window the plan may pick: the same bits on every
    device. Uneven weights (offsets drawn at random), so that another order, a weight per term
    or a fused multiply-add would change bits."""
    rank = len(dy_sizes)
    # Random offsets on the resampled axes; the identity's on the others (scale 1).
    ioff = tuple(0.5 if s == 1 else float(rng.uniform(-0.7, 0.7)) for s in scales)
    ooff = tuple(-0.5 if s == 1 else float(rng.uniform(-0.7, 0.7)) for s in scales)
    dt = F32 if dtype == np.float32 else F16
    dy = random_array(rng, dy_sizes, dtype)
    desc = pyvkgrad.ResampleGradDesc(TensorDesc(dt, dy_sizes), TensorDesc(dt, dx_sizes), LIN,
                                     scales, ioff, ooff)
    assert [m.identity for m in desc.axis_maps()] == [s == 1 for s in scales]
    want = documented_linear_sum(dy, desc)
    for choice in ({"kernel": "gather"}, {}, {"kernel": "gather", "window": 1},
                   {"kernel": "gather", "window": 4}, {"kernel": "walk", "select": False},
                   {"kernel": "walk", "rows": 1, "switch": False},
                   {"kernel": "walk", "cols": 2, "zero_weights": True},
                   {"kernel": "walk", "zero_weights": True, "align": True}):
        try:
            got, kernels = run_choice(device, desc, dy, choice)
        except ValueError:  # the walk kernels take one or two resampled axes
            assert choice.get("kernel") == "walk" and len(dy_sizes) == 3
            continue
        assert_same_bits(got, want, f"{choice} {kernels}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NN, LIN])
def test_negative_zero_sums_to_plus_zero_in_every_kernel(device, dtype, mode):
    """A sum starts from +0, so dY of -0 gives +0 (docs/semantics.md §6.15), in every gather
    kernel and whatever the batch: lavapipe's compiler once folded the first `+0 + v` of the
    walk kernels where loop counts were constants (rank 1, or every identity axis of size 1),
    and returned -0."""
    dt = F32 if dtype == np.float32 else F16
    for batch in ((), (1,), (3,), (1, 1, 1)):
        dy = np.zeros(batch + (6,), dtype)
        dy[..., 0:3] = -0.0
        dy[..., 3] = 1
        dx_sizes = batch + (12,)
        scales = (1,) * len(batch) + (0.5,)
        desc = pyvkgrad.ResampleGradDesc(
            TensorDesc(dt, dy.shape), TensorDesc(dt, dx_sizes), mode, scales,
            (0.5,) * len(batch) + (0.0,), (-0.5,) * len(batch) + (0.0,))
        for choice in ({"kernel": "gather"}, {}, {"kernel": "walk", "select": False},
                       {"kernel": "walk", "rows": 1, "switch": False},
                       {"kernel": "walk", "cols": 2, "zero_weights": True},
                       {"kernel": "walk", "zero_weights": True, "align": True}):
            got, kernels = run_choice(device, desc, dy, choice)
            zero = got == 0
            assert zero.any() and not np.signbit(got[zero]).any(), \
                f"{batch} {choice} {kernels}: {got}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NN, LIN])
def test_zero_weights_fall_back_where_values_are_not_finite(device, rng, dtype, mode):
    """zero_weights multiplies the dY values a column does not read by 0, which is exact only
    for finite values: a column sum that comes out NaN or infinite is redone the tested way.
    Dense Inf, -Inf and NaN in dY, just outside, inside and across the columns' ranges, give
    the gather's bits, and so do overflows of finite values, subnormals and -0."""
    dt = F32 if dtype == np.float32 else F16
    for dy_sizes, dx_sizes in (((3, 8, 40), (3, 8, 24)), ((2, 9, 14), (2, 6, 4)),
                               ((4, 16), (4, 12)), ((5, 7, 30), (5, 7, 10))):
        dy = random_array(rng, dy_sizes, dtype)
        hit = rng.random(dy.shape) < 0.08
        dy[hit] = rng.choice(np.array([np.inf, -np.inf, np.nan], dtype), hit.sum())
        big = rng.random(dy.shape) < 0.05
        dy[big] = np.finfo(dtype).max * np.sign(rng.standard_normal(big.sum())).astype(dtype)
        # Subnormals and -0: products that round to zeros of either sign.
        tiny = rng.random(dy.shape) < 0.05
        dy[tiny] = (np.finfo(dtype).smallest_subnormal * rng.choice([-3, -1, 1, 2], tiny.sum())
                    ).astype(dtype)
        dy[rng.random(dy.shape) < 0.03] = -0.0
        desc = pyvkgrad.ResampleGradDesc(
            TensorDesc(dt, dy_sizes), TensorDesc(dt, dx_sizes), mode,
            [a / b for a, b in zip(dy_sizes, dx_sizes)], (0.5,) * len(dy_sizes),
            (-0.5,) * len(dy_sizes))
        want, _ = run_choice(device, desc, dy, {"kernel": "gather"})
        for extra in ({}, {"rows": 1}, {"switch": False}, {"align": True}):
            choice = {"kernel": "walk", "cols": 2, "zero_weights": True, **extra}
            got, kernels = run_choice(device, desc, dy, choice)
            assert kernels[0].startswith("resample_grad_walk")
            assert_same_bits(got, want, f"{dy_sizes}->{dx_sizes} {choice}")


def test_walk_plan_choices():
    """Pure plans: which gather kernel, which lanes and pairing the layouts get."""
    from pyvkgrad.plan import Limits

    def plan(dy_sizes, dx_sizes, dtype=F32, mode=LIN, dy_strides=None, dx_strides=None,
             limits=Limits(), **gather):
        desc = pyvkgrad.ResampleGradDesc(TensorDesc(dtype, dy_sizes, dy_strides),
                                         TensorDesc(dtype, dx_sizes, dx_strides), mode,
                                         [a / b for a, b in zip(dy_sizes, dx_sizes)],
                                         (0.5,) * len(dy_sizes), (-0.5,) * len(dy_sizes))
        d = desc.plan(limits, gather=gather or None).dispatches[0]
        return d.kernel, dict(d.constants)

    kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64))
    assert kernel == "resample_grad_walk"
    # Rows per invocation as tuned on the H100 for float32 linear (_WALK_TUNED).
    assert (c["ROWS"], c["COLS"], c["MAXU"], c["LANES_ON_B"]) == (4, 1, 4, False)
    kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64), F16)
    assert (c["COLS"], c["PAIR_Q"], c["DY_WORDS"], c["MAXU"]) == (2, True, True, 7)
    kernel, c = plan((2, 4, 8, 9), (2, 4, 4, 5), F16)  # an odd width: no pairs
    assert (c["COLS"], c["PAIR_Q"]) == (1, False)
    # zero_weights and align (both default for float16 linear, as tuned on the H100): the 2x
    # pairs' unions rounded to even starts (6 -> 7 values); where rounding would pass
    # _WALK_MAX_U (a union of 12 from an odd start), align gives way, and the pair and its zero
    # weights stay.
    for options, want in ((dict(zero_weights=False, align=False), (6, False, False)),
                          (dict(zero_weights=True, align=False), (6, True, False)),
                          (dict(zero_weights=True, align=True), (7, True, True)),
                          ({}, (7, True, True))):
        kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64), F16, **options)
        assert (c["COLS"], c["MAXU"], c["ZERO_WEIGHTS"], c["DY_ALIGNED"]) == (2,) + want
    kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64), F16, NN)  # nearest: align alone
    assert (c["COLS"], c["MAXU"], c["ZERO_WEIGHTS"], c["DY_ALIGNED"]) == (2, 4, False, True)
    kernel, c = plan((1, 4, 8, 34), (1, 4, 8, 6), F16, NN, zero_weights=True, align=True)
    assert (c["COLS"], c["PAIR_Q"], c["MAXU"], c["ZERO_WEIGHTS"], c["DY_ALIGNED"]) == \
        (2, True, 12, True, False)
    nhwc = dict(dy_strides=(128 * 128 * 64, 1, 128 * 64, 64),
                dx_strides=(64 * 64 * 64, 1, 64 * 64, 64))
    kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64), **nhwc)
    assert kernel == "resample_grad_walk" and c["LANES_ON_B"]
    kernel, c = plan((32, 64, 128, 128), (32, 64, 64, 64), F16, **nhwc)
    assert kernel == "resample_grad_walk_pair" and c["LANES_ON_B"] and c["DY_WORDS"]
    # The permutation: resampled N and W (axes 0 and 3) become P and Q, in that order.
    kernel, c = plan((8, 3, 5, 12), (4, 3, 5, 6))
    assert c["SIZES"] == (3, 5, 4, 6) and c["IDENTITY"] == (True, True, False, False)
    # One resampled axis that is not innermost: it is P, the innermost identity axis Q.
    kernel, c = plan((3, 10, 6), (3, 5, 6))
    assert c["SIZES"] == (1, 3, 5, 6) and c["IDENTITY"] == (True, True, False, True)
    # Three resampled axes, or more than 12 contributors per column: the generic gather.
    assert plan((4, 6, 8), (2, 3, 4))[0] == "resample_grad_gather"
    assert plan((2, 64), (2, 4))[0] == "resample_grad_gather"
    with pytest.raises(ValueError, match="do not apply"):
        plan((4, 6, 8), (2, 3, 4), kernel="walk")
    # Every choice of the gather option is valid for its kernel.
    for options in WALK_OPTIONS:
        try:
            plan((2, 4, 12, 10), (2, 4, 6, 5), F16, kernel="walk", **options)
        except ValueError:
            assert options.get("cols") == 2 or options.get("lanes") == "b"
    # Within the loop limit where the driver has one: else the windowed gather.
    limited = Limits(max_loop_iterations=65535)
    assert plan((1, 1, 256, 256), (1, 1, 1, 1), limits=limited)[0] == \
        "resample_grad_gather_windowed"
    assert plan((1, 1, 8192, 24), (1, 1, 1, 4), limits=limited)[0] == \
        "resample_grad_gather_windowed"
    assert plan((1, 1, 8192, 24), (1, 1, 1, 4))[0] == "resample_grad_walk"
    assert plan((1, 1, 256, 24), (1, 1, 1, 4), limits=limited)[0] == "resample_grad_walk"


# ---- limits: the buffer range, the driver's loop limit, problems no plan can run (issue 28) ----

def compiled_grad(device, dy, desc, limits=None, gather=None):
    """dX of `desc` on dy through a compiled operator, planned with `limits`."""
    op = device.compile(desc if gather is None else _Choice(desc, gather), limits=limits)
    tdx = device.empty(desc.output_gradient_tensor)
    op(input_gradient_tensor=device.upload(dy), output_gradient_tensor=tdx)
    out = tdx.numpy()
    op.close()
    return out


def default_desc(dtype, dy_sizes, dx_sizes, mode, algorithm="gather"):
    dt = F32 if np.dtype(dtype) == np.float32 else F16
    return pyvkgrad.ResampleGradDesc(TensorDesc(dt, dy_sizes), TensorDesc(dt, dx_sizes), mode,
                                     *defaults.resample_grad(dy_sizes, dx_sizes, None, None,
                                                             None), algorithm=algorithm)


@pytest.mark.parametrize("n", [2**27, 2**31])
def test_what_cannot_fit_is_refused_from_sizes_alone(device, monkeypatch, n):
    """A dX of n float32 elements from one dY element fits in no buffer of 128 MiB, and no cut
    helps (its axis is resampled): refused at once, before any table along the axis is built
    (2**31 took over 16 GiB of host tables and the interpreter with it; 2**27, 2 GB and 2 s)."""
    import time
    import tracemalloc
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", str(2**27))
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(ValueError, match=r"^RESAMPLE_GRAD: tensor sizes exceed the device's "
                                             r"maximum storage buffer range.*not resampled"):
            pyvkgrad.resample_grad(np.ones(1, np.float32), (n,), device=device)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 1, f"{elapsed:.2f} s"
    assert peak < 2**24, f"{peak} bytes allocated"


def test_scratch_buffers_count_against_the_buffer_limit(device, rng, monkeypatch):
    """Every buffer a plan binds, scratch included, stays within the buffer limit: a float16
    dX whose float32 accumulator (atomic) would not fit is cut by the one-call function, a
    compiled one is refused, and so are index tables no cut can shrink (they belong to the
    resampled axes); refused while compiling, before any device work."""
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "4096")
    dy = random_array(rng, (3, 300), np.float16)  # its atomic tables: 3600 bytes
    sizes = (3, 400)  # dX 2400 bytes, its float32 accumulator 4800
    for algorithm in ("atomic", "atomic-cas"):
        check(device, dy, sizes, LIN, None, algorithm=algorithm)
    with pytest.raises(ValueError, match=r"^RESAMPLE_GRAD: scratch buffer 'accumulator' exceeds "
                                         r"the maximum storage buffer range"):
        device.compile(default_desc(np.float16, dy.shape, sizes, LIN, "atomic"))
    # dX 3000 bytes; the gather's tables: 1501 prefix counts and 1500 begins, 3000 weights.
    with pytest.raises(ValueError, match=r"^RESAMPLE_GRAD: scratch buffer 'tables' exceeds"):
        pyvkgrad.resample_grad(random_array(rng, (1, 1), np.float16), (1, 1500),
                               interpolation_mode=LIN, device=device)


LOOP_CASES = [  # (what, dy sizes, dX sizes, mode, algorithm, gather option)
    ("walk", (16, 16), (8, 8), LIN, "gather", None),
    ("gather", (6, 5, 4), (3, 4, 7), LIN, "gather", {"kernel": "gather"}),
    ("windowed", (256, 256), (4, 4), NN, "gather", {"kernel": "gather"}),
    ("many elements", (120, 120), (110, 110), NN, "gather", None),
    ("atomic", (20, 20), (10, 10), LIN, "atomic", None),
    ("atomic, many", (130, 130), (100, 100), LIN, "atomic", None),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", LOOP_CASES, ids=[c[0] for c in LOOP_CASES])
def test_plans_within_the_loop_limit_or_a_clear_error(device, rng, dtype, case):
    """Planned for a device of very few, narrow workgroups with the driver's loop limit
    (lavapipe's), every plan family counts each invocation's loop iterations: it splits the
    work (windows) and gives the oracle's results, or refuses with an error naming the operator
    and the field. Never numbers missing the iterations the driver dropped, nor an assertion."""
    import dataclasses
    _, dy_sizes, dx_sizes, mode, algorithm, gather = case
    dy = random_array(rng, dy_sizes, dtype)
    expected, magnitude = oracle(dy, dx_sizes, mode, None)
    desc = default_desc(dtype, dy_sizes, dx_sizes, mode, algorithm)
    base = dataclasses.replace(device.limits, max_loop_iterations=65535)
    ran = 0
    for atomics in (True, False) if algorithm == "atomic" else (base.float_atomic_add,):
        for wgs, wg in ((65535, 256), (1, 1), (2, 4), (1, 64), (3, 2)):
            limits = dataclasses.replace(base, max_workgroups=wgs, local_size=wg,
                                         max_local_size=wg, float_atomic_add=atomics
                                         and device.float_atomic_add)
            what = f"{case[0]} {dtype.__name__} {wgs} x {wg} atomics={atomics}"
            try:
                out = compiled_grad(device, dy, desc, limits, gather)
            except RuntimeError as e:
                assert wgs * wg < 256, what  # the device's own limits run every case
                assert re.match(r"RESAMPLE_GRAD: (In|Out)putGradientTensor.Sizes need fewer "
                                r"loop iterations per invocation than the device allows", str(e))
                continue
            assert_close(out, expected, magnitude, dtype, what)
            ran += 1
    assert ran >= 2


@pytest.mark.parametrize("mode", ["nearest_neighbor", "linear"])
@pytest.mark.parametrize("offset", [-1e30, 1e30])
def test_a_coordinate_that_overflows_clamps_to_the_edge(device, mode, offset):
    """docs/semantics.md §6, choice 12: a coordinate beyond float32's range (a tiny Scale
    and a large offset) gives its edge element weight 1, on the device and in the oracle
    (whose linear weights took Inf - Inf: NaN)."""
    dy = np.array([1.0, 2.0], np.float32)
    kw = dict(interpolation_mode=mode, scales=[1e-38], input_pixel_offsets=[0.0],
              output_pixel_offsets=[offset])
    want = np.array([0, 0, 3] if offset < 0 else [3, 0, 0], np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(reference.resample_grad(dy, [3], **kw), want)
    np.testing.assert_array_equal(pyvkgrad.resample_grad(dy, [3], **kw, device=device), want)
