"""BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD against the float64 oracle,
the worked examples of docs/semantics.md §4-5, every reduction layout, and their error rules.

Tolerances: the operators' own, from the operator table (pyvkgrad/operators.py, where they are
justified): relative to each output's magnitude (the sum of the absolute terms, which bounds
any summation order's error), plus one float16 rounding of the result for float16.
"""

import collections
import math
import dataclasses

import numpy as np
import pytest

from pyvkgrad._context import DeviceContext

from pyvkgrad.one_call_cache import OneCallCache

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, operators, reference
from pyvkgrad.ops import _batch_normalization as bn
from pyvkgrad.ops import _batch_normalization_plan as bn_plan
from pyvkgrad.plan import Limits
from cases import DTYPES, SHAPES_BY_RANK, random_array

GRAD, TRAINING = "grad", "training"
FUNCTIONS = {GRAD: (pyvkgrad.batch_normalization_grad, reference.batch_normalization_grad),
             TRAINING: (pyvkgrad.batch_normalization_training_grad,
                        reference.batch_normalization_training_grad)}
DESCS = {GRAD: pyvkgrad.BatchNormalizationGradDesc,
         TRAINING: pyvkgrad.BatchNormalizationTrainingGradDesc}
OPS = [GRAD, TRAINING]
RECORDS = {GRAD: operators.BY_NAME["batch_normalization_grad"],
           TRAINING: operators.BY_NAME["batch_normalization_training_grad"]}
NAMES = ("output_gradient", "output_scale_gradient", "output_bias_gradient")
F32, F16 = DataType.FLOAT32, DataType.FLOAT16


# ---- helpers -------------------------------------------------------------------------------------

def make_inputs(rng, shape, stat_shape, dtype, op, offset=0.0):
    """X, dY and statistics; the training grad gets Mean and Variance from the training forward
    on the same X (its intended use), the constant-statistics grad arbitrary ones."""
    x = (random_array(rng, shape, dtype) + offset).astype(dtype)
    dy = random_array(rng, shape, dtype)
    scale = random_array(rng, stat_shape, dtype)
    if op == TRAINING:
        _, mean, var = reference.batch_normalization_training(x, np.ones(stat_shape),
                                                              np.zeros(stat_shape), 1.0)
        mean, var = mean.astype(dtype), var.astype(dtype)
    else:
        mean = (random_array(rng, stat_shape, dtype) + offset).astype(dtype)
        var = random_array(rng, stat_shape, dtype, 0.25, 2.0)
    return x, dy, mean, var, scale


def magnitudes(op, x, dy, mean, var, scale, eps):
    """Per output, the size of the terms it is made of (float64), for error bounds."""
    return RECORDS[op].magnitude((x, dy, mean, var, scale, eps), {})


def assert_outputs(result, expected, mags, dtype, rtol=None):
    """Shape, then dtype, then values of the three outputs within the operator's tolerance
    (`rtol`: a tighter bound relative to the magnitudes), naming the one that failed."""
    assert isinstance(result, bn.BatchNormalizationGradResult)
    record = RECORDS[TRAINING]  # both operators have the same tolerances
    tolerance = record.tolerance_for(dtype)
    if rtol is not None:
        tolerance = dataclasses.replace(tolerance, magnitude=rtol)
    _, problem = operators.compare(record, result, expected, mags, dtype, tolerance)
    assert not problem, problem


Checked = collections.namedtuple("Checked", "arrays result")


def check(device, rng, op, shape, stat_shape, dtype, eps=1e-3, views=None, offset=0.0):
    """Run `op` on random data (optionally through `views`, a function returning the five
    arrays as strided views) and compare with the oracle; returns the arrays and the result."""
    arrays = make_inputs(rng, shape, stat_shape, dtype, op, offset)
    if views is not None:
        arrays = views(*arrays)
    before = [a.copy() for a in arrays]
    fn, oracle = FUNCTIONS[op]
    result = fn(*arrays, eps, device=device)
    assert_outputs(result, oracle(*arrays, eps), magnitudes(op, *arrays, eps), dtype)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)  # inputs untouched
    return Checked(arrays, result)


# ---- spec vectors (section 10.5) -----------------------------------------------------------------

X75 = np.array([1, 3, 2, 6, 5, 7, 4, 0], np.float32).reshape(2, 2, 1, 2)
DY75 = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 1, 2)
SCALE75 = np.array([1, 2], np.float32).reshape(1, 2, 1, 1)


def stats(*values):
    return np.array(values, np.float32).reshape(1, 2, 1, 1)


def assert_vector(result, dx, dscale, dbias, dtype=np.float32):
    rtol = 1e-6 if dtype == np.float32 else 1e-3
    for name, out, exp in zip(NAMES, result, (dx, dscale, dbias)):
        assert out.dtype == dtype, f"{name} dtype"
        np.testing.assert_allclose(out.ravel(), exp, rtol=rtol, atol=rtol, err_msg=name)


def test_bng1_constant_statistics(device):
    r = pyvkgrad.batch_normalization_grad(X75, DY75, stats(4, 3), stats(5, 5), SCALE75, 4.0,
                                          device=device)
    assert_vector(r, [1 / 3, 2 / 3, 2, 8 / 3, 5 / 3, 2, 14 / 3, 16 / 3], [6, -8 / 3], [14, 22])
    assert r.output_gradient.shape == (2, 2, 1, 2) and r.output_scale_gradient.shape == (1, 2, 1, 1)


def test_bng2_other_statistics(device):
    r = pyvkgrad.batch_normalization_grad(X75, DY75, stats(0, 1), stats(3.99, 0.99), SCALE75,
                                          0.01, device=device)
    assert_vector(r, [0.5, 1, 6, 8, 2.5, 3, 14, 16], [37, 36], [14, 22])


def test_bng3_no_reduction(device):
    f = np.float32
    r = pyvkgrad.batch_normalization_grad(
        np.array([[1, 2]], f), np.array([[3, 4]], f), np.array([[0, 1]], f),
        np.array([[0, 3]], f), np.array([[2, 2]], f), 1.0, device=device)
    assert_vector(r, [6, 4], [3, 2], [3, 4])


def test_bntg1_training(device):
    r = pyvkgrad.batch_normalization_training_grad(X75, DY75, stats(4, 3), stats(5, 5), SCALE75,
                                                   4.0, device=device)
    assert_vector(r, [-1 / 3, -1 / 3, -1.814815, -0.555556, 1 / 3, 1 / 3, 1.148148, 1.222222],
                  [6, -8 / 3], [14, 22])


def test_bntg2_training_rank1(device):
    f = np.float32
    r = pyvkgrad.batch_normalization_training_grad(
        np.array([1, 2, 3, 6], f), np.array([1, 0, 0, 0], f), np.array([3], f),
        np.array([3.5], f), np.array([1], f), 0.5, device=device)
    assert_vector(r, [0.25, -0.1875, -0.125, 0.0625], [-1], [1])


@pytest.mark.parametrize("op", OPS)
def test_spec_vectors_float16(device, op):
    h = np.float16
    args = [a.astype(h) for a in (X75, DY75, stats(4, 3), stats(5, 5), SCALE75)]
    r = FUNCTIONS[op][0](*args, 4.0, device=device)
    dx = ([1 / 3, 2 / 3, 2, 8 / 3, 5 / 3, 2, 14 / 3, 16 / 3] if op == GRAD else
          [-1 / 3, -1 / 3, -1.814815, -0.555556, 1 / 3, 1 / 3, 1.148148, 1.222222])
    assert_vector(r, dx, [6, -8 / 3], [14, 22], np.float16)


# ---- every layout, both operators, both data types -----------------------------------------------

def nhwc_views(x, dy, mean, var, scale):
    """X and dY as NCHW-sized views of NHWC memory (descriptor strides {HWC, 1, WC, C})."""
    def nhwc(a):
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return nhwc(x), nhwc(dy), mean, var, scale


LAYOUTS = {
    # name: (input shape, statistics shape, views)
    "nchw": ((3, 4, 5, 6), (1, 4, 1, 1), None),
    "nchw_14x14": ((3, 4, 14, 14), (1, 4, 1, 1), None),
    "nhwc_stats": ((2, 5, 6, 8), (1, 1, 1, 8), None),
    "nhwc_strides": ((3, 8, 5, 6), (1, 8, 1, 1), nhwc_views),
    "batchnorm1d": ((37, 6), (1, 6), None),
    "5d": ((2, 3, 4, 5, 6), (1, 3, 1, 1, 1), None),
    "scattered": ((3, 4, 5, 6), (1, 4, 1, 6), None),
    "scattered_inner": ((6, 5, 7, 3), (6, 1, 7, 1), None),
    "none_reduced": ((3, 4, 5), (3, 4, 5), None),
    "all_reduced": ((4, 5, 6), (1, 1, 1), None),
    "long_channels": ((2, 3, 2000), (1, 3, 1), None),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(device, rng, layout, op, dtype):
    shape, stat_shape, views = LAYOUTS[layout]
    check(device, rng, op, shape, stat_shape, dtype, views=views)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES_BY_RANK, ids=lambda s: f"rank{len(s)}")
def test_every_rank(device, rng, op, shape):
    # Keep the second dimension (the first for rank 1 is reduced: a single channel).
    stat_shape = tuple(s if d == 1 else 1 for d, s in enumerate(shape))
    check(device, rng, op, shape, stat_shape, np.float32)


@pytest.mark.parametrize("op", OPS)
def test_rank8_scattered(device, rng, op):
    check(device, rng, op, (2, 3, 2, 3, 2, 5, 2, 3), (1, 3, 1, 3, 2, 1, 1, 3), np.float32)


@pytest.mark.parametrize("n", [1, 2, 7, 31, 32, 33, 255, 256, 257, 4099])
def test_edge_sizes_per_channel(device, rng, n):
    """Elements per channel around the one-pass limit (32), the workgroup width and a chunk,
    with the channel outermost (NCHW-like) and innermost (NHWC-like)."""
    for op in OPS:
        check(device, rng, op, (3, n), (3, 1), np.float32)
        check(device, rng, op, (n, 5), (1, 5), np.float16)


@pytest.mark.parametrize("op", OPS)
def test_data_far_from_zero(device, rng, op):
    """X around 1000: X - mean_R(X) must keep float32 precision (Mean is subtracted first)."""
    check(device, rng, op, (4, 3, 50), (1, 3, 1), np.float32, offset=1000.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_broadcast_and_strided_views(device, rng, dtype, op):
    """Zero strides on dY (broadcast over N) and on the statistics (one value for every channel),
    and every-other-element views, through both output kernels' strided forms."""
    def views(x, dy, mean, var, scale):
        big = np.zeros((3, 4, 5, 12), dtype)
        big[..., ::2] = x
        return (big[..., ::2], np.broadcast_to(dy[:1], dy.shape), mean,
                np.broadcast_to(var[:, :1], var.shape), scale)
    check(device, rng, op, (3, 4, 5, 6), (1, 4, 1, 1), dtype, views=views)


@pytest.mark.parametrize("op", OPS)
def test_training_with_other_statistics(device, rng, op):
    """Mean and Variance not from the same X: the literal formula of 7.4 (dX recentres with
    mean_R(X), the scale gradient uses the supplied Mean)."""
    x, dy, _, _, scale = make_inputs(rng, (5, 3, 40), (1, 3, 1), np.float32, op)
    mean = random_array(rng, (1, 3, 1), np.float32, -0.3, 0.3)
    var = random_array(rng, (1, 3, 1), np.float32, 0.5, 2.0)
    fn, oracle = FUNCTIONS[op]
    assert_outputs(fn(x, dy, mean, var, scale, 0.01, device=device),
                   oracle(x, dy, mean, var, scale, 0.01),
                   magnitudes(op, x, dy, mean, var, scale, 0.01), np.float32)


def test_epsilon_zero_allowed(device):
    f = np.float32
    r = pyvkgrad.batch_normalization_grad(np.array([1, 3], f), np.array([1, 1], f),
                                          np.array([2], f), np.array([1], f), np.array([2], f),
                                          0, device=device)
    assert_vector(r, [2, 2], [0], [2])


# ---- reductions: size, order, determinism --------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_large_reduction_and_determinism(device, rng, dtype):
    """Two channels of 300 000 elements (many chunks per channel): the oracle's results, and
    bitwise the same ones when run again on the same data."""
    for op in OPS:
        first = check(device, rng, op, (3, 2, 100000), (1, 2, 1), dtype, offset=0.5)
        again = FUNCTIONS[op][0](*first.arrays, 1e-3, device=device)
        for name, u, v in zip(NAMES, first.result, again):
            np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8), err_msg=name)


@pytest.mark.slow
def test_accuracy_ten_million_per_channel(device, rng):
    """One channel of 10^7 float32 elements: sums stay near float32 rounding.

    A sequential float32 sum would be off by about sqrt(n) * 2^-24 of the magnitude (~2e-4);
    the fixed tree keeps the error below 1e-6 of it, and of the result itself (the data have a
    nonzero mean, so the sums do not cancel)."""
    n = 10**7
    x = (rng.standard_normal(n) * 3 + 10).astype(np.float32)
    dy = (rng.standard_normal(n) + 0.5).astype(np.float32)
    _, mean, var = reference.batch_normalization_training(x, np.ones(1), np.zeros(1), 1.0)
    mean, var, scale = mean.astype(np.float32), var.astype(np.float32), np.float32([1.5])
    eps = 1e-5
    for op in OPS:
        fn, oracle = FUNCTIONS[op]
        out = fn(x, dy, mean, var, scale, eps, device=device)
        exp = oracle(x, dy, mean, var, scale, eps)
        mags = magnitudes(op, x, dy, mean, var, scale, eps)
        assert_outputs(out, exp, mags, np.float32, rtol=1e-6)
        for name in NAMES[1:]:
            got, want = getattr(out, name), getattr(exp, name)
            assert abs(got[0] - want[0]) <= 1e-6 * abs(want[0]), name


@pytest.mark.parametrize("op", OPS)
def test_forced_local_size_32(device, rng, op, monkeypatch):
    """A 32-wide workgroup (other lanes per channel, other chunking) gives the same results
    within tolerance, for NCHW and NHWC-like layouts, as the default width."""
    cases = [((4, 3, 700), (1, 3, 1)), ((300, 40), (1, 40)), ((6, 100), (6, 1))]
    for shape, stat_shape in cases:
        arrays = make_inputs(rng, shape, stat_shape, np.float32, op)
        desc = describe(op, *arrays, 1e-3)
        default = run_compiled(device, desc, arrays)
        monkeypatch.setenv("PYVKGRAD_LOCAL_SIZE", "32")
        assert device.limits.local_size == device.limits.max_local_size == 32
        narrow = run_compiled(device, desc, arrays)
        monkeypatch.delenv("PYVKGRAD_LOCAL_SIZE")
        mags = magnitudes(op, *arrays, 1e-3)
        exp = FUNCTIONS[op][1](*arrays, 1e-3)
        assert_outputs(bn.BatchNormalizationGradResult(*default), exp, mags, np.float32)
        assert_outputs(bn.BatchNormalizationGradResult(*narrow), exp, mags, np.float32)


@pytest.mark.parametrize("op", OPS)
def test_workgroups_of_whole_subgroups(device, rng, op):
    """The workgroup sums step through a workgroup subgroup by subgroup, so a width that is no
    power of two is refused (100 lanes in subgroups of 8 left 4 lanes' terms out of dScale and
    dBias, 7-26% off); powers of two narrower than, equal to and wider than the device's
    subgroup give the oracle's results."""
    for name in ("local_size", "max_local_size"):
        for width in (100, 12, 0):
            with pytest.raises(ValueError, match=rf"^Limits: {name} must be a power of two "
                                                 rf"\(workgroups of whole subgroups\): "
                                                 rf"expected 1, 2, 4, \.\.\., got {width}$"):
                dataclasses.replace(device.limits, **{name: width})
    lanes = device.info.subgroup_size
    for width in (max(1, lanes // 2), lanes, 4 * lanes):
        limits = dataclasses.replace(device.limits, local_size=width, max_local_size=width)
        for shape, stat_shape in (((64, 8, 900), (1, 8, 1)), ((300, 40), (1, 40))):
            arrays = make_inputs(rng, shape, stat_shape, np.float32, op)
            desc = describe(op, *arrays, 1e-3)
            assert desc.plan(limits).dispatches[0].kernel == "batch_normalization_grad_partials"
            out = run_compiled(device, desc, arrays, limits)
            assert_outputs(bn.BatchNormalizationGradResult(*out), FUNCTIONS[op][1](*arrays, 1e-3),
                           magnitudes(op, *arrays, 1e-3), np.float32)


ONE_PASS_CASES = [  # (shape, statistics shape, views)
    ((4, 3, 700), (1, 3, 1), None),  # 16-byte vectors, 3 per lane
    ((3, 1, 5, 7), (1, 1, 1, 1), None),  # one channel, single elements
    ((2, 5, 257), (1, 5, 1), None),  # a prime run: single elements
    ((3, 4, 14, 14), (1, 4, 1, 1), None),  # float16: 8-byte vectors
    ((3, 8, 5, 6), (1, 8, 1, 1), nhwc_views),  # channels innermost: LK channels per group
    ((6, 40, 7, 3), (6, 1, 7, 1), None),  # kept dimensions around reduced ones
]


@pytest.mark.parametrize("widest", [512, 256])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_one_pass_finishes_in_stage_one(device, rng, op, dtype, widest, monkeypatch):
    """FINISH (stage 1 takes each channel group whole and stores its results; no finalize),
    forced on small problems by lowering ONE_PASS_MIN_GROUPS, with workgroups widened up to
    `widest` (ONE_PASS_MAX_WG): the oracle's results, inputs untouched, bitwise the same run
    again; and the plan falls back to two stages where a lane would add more than
    ONE_PASS_MAX_ITERS terms."""
    monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1)
    monkeypatch.setattr(bn_plan, "ONE_PASS_MAX_WG", widest)
    eps = 0.0123 + widest  # an epsilon no other test uses: the one-call cache plans afresh
    for shape, stat_shape, views in ONE_PASS_CASES:
        misses = device.cache_info().misses
        first = check(device, rng, op, shape, stat_shape, dtype, eps=eps, views=views)
        assert device.cache_info().misses == misses + 1
        desc = describe(op, *first.arrays, eps)
        x, dy = (TensorDesc(desc.input_tensor.data_type, a.shape,
                            tuple(st // a.itemsize for st in a.strides)) for a in first.arrays[:2])
        desc = dataclasses.replace(desc, input_tensor=x, input_gradient_tensor=dy)
        stage1 = desc.plan(device.limits).dispatches[0]
        assert stage1.kernel == "batch_normalization_grad_partials" and stage1.constant("FINISH")
        assert stage1.constant("WG") == min(widest, device.limits.max_local_size)
        again = FUNCTIONS[op][0](*first.arrays, eps, device=device)
        for name, u, v in zip(NAMES, first.result, again):
            np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8), err_msg=name)
    long = plan_of(op, (2, 3, 40000), (1, 3, 1))  # 80 vectors per lane
    assert not long.dispatches[0].constant("FINISH")
    assert "batch_normalization_grad_finalize" in [d.kernel for d in long.dispatches]


@pytest.mark.parametrize("op", OPS)
def test_one_pass_in_place(device, rng, op, monkeypatch):
    """dX over X or dY through the FINISH plan: each element's X and dY are read before its dX
    is written, and the statistics stores come after the channel's reads."""
    import test_operators
    monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1)
    for dtype in DTYPES:
        # More than DIRECT_MAX_REDUCED elements per channel (else the direct kernel runs),
        # several terms per lane.
        for shape, stat in (((3, 10, 700), (1, 10, 1)), ((20, 3, 64), (1, 3, 1))):
            case = operators.Case(make_inputs(rng, shape, stat, dtype, op) + (1e-3,))
            desc = RECORDS[op].describe(case)
            assert desc.plan(device.limits).dispatches[0].constant("FINISH")
            for layout in ("packed", "transposed"):
                test_operators.check_in_place(device, RECORDS[op], case, layout, dtype)


# (shape, statistics shape, dtype, one pass forced, VEC, MASKED): each stage-1 load size (16, 8
# and 4 bytes, single float32 and float16 elements), aligned and MASKED (runs of 257, 1001, 49, 13
# and 9 elements), in one pass and in two stages with several chunks per channel (CHUNK_MAJOR
# orders them).
AHEAD_CASES = [((3, 10, 700), (1, 10, 1), np.float32, True, 4, False),  # 16 bytes, AHEAD 1
               ((3, 4, 14, 14), (1, 4, 1, 1), np.float16, True, 4, False),  # 8 bytes, AHEAD 2
               ((2, 3, 66), (1, 3, 1), np.float16, False, 2, False),  # 4 bytes (2 float16)
               ((300, 5, 3), (1, 5, 1), np.float32, True, 1, False),  # single float32, AHEAD 4
               ((1500, 5, 3), (1, 5, 1), np.float32, False, 1, False),  # the same, 2 chunks
               ((300, 3, 3), (1, 3, 1), np.float16, True, 1, False),  # single float16, AHEAD 8
               ((4, 3, 2500), (1, 3, 1), np.float16, False, 4, False),  # 8 bytes, 3 chunks
               ((2, 5, 257), (1, 5, 1), np.float32, True, 4, True),  # 16 bytes, masked
               ((8, 5, 1001), (1, 5, 1), np.float32, False, 4, True),  # the same, 2 chunks
               ((7, 3, 7, 7), (1, 3, 1, 1), np.float16, True, 8, True),  # 16 bytes, masked
               ((300, 3, 13), (1, 3, 1), np.float16, False, 4, True),  # 8 bytes, 2 chunks
               ((12, 3, 9), (1, 3, 1), np.float16, True, 2, True),  # 4 bytes, masked
               ((6, 16, 7, 7), (1, 16, 1, 1), np.float16, True, 4, False),  # 8 bytes, SPAN
               ((5, 8, 13, 13), (1, 8, 1, 1), np.float32, True, 4, False)]  # 16 bytes, SPAN


@pytest.mark.parametrize("op", OPS)
def test_loads_ahead_and_l2_order_keep_the_bits(device, rng, op, monkeypatch):
    """Stage 1's loads ahead (AHEAD, here also 3: a part-filled last batch) and the training
    grad's L2 order (CHUNK_MAJOR, REVERSE) change when loads happen and in which order work
    items run, never what is added in which order: every setting gives the bits of AHEAD 1
    without the L2 order, which match the oracle; and dX over X or dY still reads each element
    before writing it."""
    import test_operators
    settings = [(1, False), (None, True), (3, True), (8, False)]  # (AHEAD or the rule, L2_ORDER)
    for shape, stat, dtype, one_pass, vec, masked in AHEAD_CASES:
        monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1 if one_pass else 2**62)
        arrays = make_inputs(rng, shape, stat, dtype, op)
        desc = describe(op, *arrays, 1e-3)
        first = None
        for ahead, l2_order in settings:
            with monkeypatch.context() as m:
                if ahead is not None:
                    m.setattr(bn_plan, "ahead", lambda load_bytes, a=ahead: a)
                m.setattr(bn_plan, "L2_ORDER", l2_order)
                stage1 = desc.plan(device.limits).dispatches[0]
                assert (stage1.constant("FINISH"), stage1.constant("VEC"),
                        stage1.constant("MASKED")) == (one_pass, vec, masked), shape
                assert stage1.constant("CHUNK_MAJOR") == (l2_order and op == TRAINING)
                got = run_compiled(device, desc, arrays)
                if first is None:
                    first = got
                    assert_outputs(bn.BatchNormalizationGradResult(*got),
                                   FUNCTIONS[op][1](*arrays, 1e-3),
                                   magnitudes(op, *arrays, 1e-3), dtype)
                for name, u, v in zip(NAMES, first, got):
                    np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8),
                                                  err_msg=f"{shape} {ahead} {l2_order} {name}")
                if ahead == 3:
                    case = operators.Case(arrays + (1e-3,))
                    for layout in ("packed", "transposed"):
                        test_operators.check_in_place(device, RECORDS[op], case, layout, dtype)


def test_plan_loads_ahead_and_l2_order():
    """AHEAD: a lane keeps LOAD_BYTES_AHEAD (16) bytes of X and of dY in flight, whatever the
    load's size. The training grad's L2 order: stage 1 chunk-major, the packed dX pass last
    vector first; the constant-statistics grad (dX written in stage 1) has neither."""
    for sizes, stat, dtype, vec, ahead in (
            ((32, 64, 112, 112), (1, 64, 1, 1), F32, 4, 1),  # 16-byte loads
            ((32, 64, 112, 112), (1, 64, 1, 1), F16, 8, 1),
            ((256, 256, 14, 14), (1, 256, 1, 1), F16, 4, 2),  # 8-byte loads
            ((2, 3, 66), (1, 3, 1), F16, 2, 4),  # 4-byte loads
            ((256, 512, 7, 7), (1, 512, 1, 1), F32, 4, 1),  # 16-byte loads, MASKED
            ((256, 511, 7, 7), (1, 511, 1, 1), F16, 8, 1),  # (an odd C: no SPAN)
            ((300, 5, 3), (1, 5, 1), F32, 1, 4),  # single elements
            ((300, 5, 3), (1, 5, 1), F16, 1, 8)):
        for op in OPS:
            stage1 = plan_of(op, sizes, stat, dtype=dtype).dispatches[0]
            assert (stage1.constant("VEC"), stage1.constant("AHEAD")) == (vec, ahead), sizes
    two = plan_of(TRAINING, (32, 64, 112, 112), (1, 64, 1, 1))
    assert two.dispatches[0].constant("CHUNK_MAJOR") and two.dispatches[-1].constant("REVERSE")
    one = plan_of(TRAINING, (256, 256, 14, 14), (1, 256, 1, 1))
    assert one.dispatches[-1].constant("REVERSE")
    assert not plan_of(GRAD, (32, 64, 112, 112), (1, 64, 1, 1)).dispatches[0] \
        .constant("CHUNK_MAJOR")


def test_plan_masked_runs():
    """MASKED: runs (the innermost reduced dimension, contiguous) whose vectors are not aligned
    are read as the aligned vectors holding them, the widest whose slots stay within
    MASKED_MAX_SLOTS times the run, where X and dY agree in every stride modulo that width;
    BATCH_NORMALIZATION_GRAD then stores dX in stage 1, float16 too."""
    def stage1(sizes, stat, dtype, strides=None, op=GRAD):
        return plan_of(op, sizes, stat, strides, dtype).dispatches[0]

    for sizes, dtype, vec, run, padded in (
            ((256, 511, 7, 7), F16, 8, 49, 56), ((256, 512, 7, 7), F32, 4, 49, 52),
            ((12, 3, 9), F16, 2, 9, 10),  # 8 and 4 would pad 9 to 16 and 12
            ((300, 3, 13), F16, 4, 13, 16), ((2, 5, 257), F32, 4, 257, 260)):
        stat = (1, sizes[1]) + (1,) * (len(sizes) - 2)
        for op in OPS:
            p = plan_of(op, sizes, stat, dtype=dtype)
            s = p.dispatches[0]
            assert (s.constant("VEC"), s.constant("MASKED"), s.constant("RUN")) == \
                (vec, True, run), (sizes, dtype)
            assert s.constant("R_SIZES")[-1] == padded
            assert dict(s.push)["reduced"] == math.prod(sizes) // sizes[1] // run * padded
            assert s.constant("WRITE_DX") == (op == GRAD)
            if op == GRAD:  # no element-wise dX pass
                assert [d.kernel for d in p.dispatches][-1] != "batch_normalization_grad_output"
                assert "batch_normalization_grad_output_packed" not in [
                    d.kernel for d in p.dispatches]
    # Runs of 3: any vector would hold more than 1.25 times the run: single elements.
    assert (stage1((300, 5, 3), (1, 5, 1), F16).constant("VEC"),
            stage1((300, 5, 3), (1, 5, 1), F16).constant("MASKED")) == (1, False)
    # Padded rows: X and dY alike (odd row stride 52) are masked; then a dY stride that
    # differs modulo 8 and 4 but not 2 gets 2-element vectors.
    rows = (3 * 52, 52, 1)
    assert stage1((4, 3, 49), (1, 3, 1), F16, rows).constant("VEC") == 8
    x = TensorDesc(F16, (4, 3, 49), rows)
    dy = TensorDesc(F16, (4, 3, 49), (3 * 54, 54, 1))
    m = TensorDesc(F16, (1, 3, 1))
    p = DESCS[GRAD](x, dy, m, m, m, TensorDesc(F16, (4, 3, 49)), m, m, 1e-5).plan(
        Limits(local_size=256))
    assert (p.dispatches[0].constant("VEC"), p.dispatches[0].constant("MASKED")) == (2, True)
    assert not p.dispatches[0].constant("WRITE_DX")  # dX's strides are not dY's
    # Two reduced dimensions besides the run: the earlier one's strides differ modulo 2 (every
    # dimension is checked, not only the last).
    x = TensorDesc(F32, (8, 3, 2, 7), (48, 16, 8, 1))
    dy = TensorDesc(F32, (8, 3, 2, 7), (49, 16, 8, 1))
    m = TensorDesc(F32, (1, 3, 1, 1))
    p = DESCS[GRAD](x, dy, m, m, m, dy, m, m, 1e-5).plan(Limits(local_size=256))
    assert (p.dispatches[0].constant("VEC"), p.dispatches[0].constant("MASKED")) == (1, False)
    # Channels innermost (NHWC) are never masked.
    nhwc = stage1((8, 3, 7, 7), (1, 3, 1, 1), F16, (147, 1, 21, 3))
    assert not nhwc.constant("MASKED")


def _strided(values, strides, size, fill):
    """A flat buffer of `size` elements holding `values` at element `strides`, `fill` between."""
    raw = np.full(size, fill, values.dtype)
    view = np.lib.stride_tricks.as_strided(raw, values.shape,
                                           [st * raw.itemsize for st in strides])
    view[...] = values
    return raw, view


# (X strides, dY and dX strides, MASKED, slack elements after the last) over (N, C, H, W) =
# (6, 5, 3, 49), statistics over C: packed (H and W coalesce to runs of 147); rows padded to 52
# alike (runs of 49; the buffers end at the last element); and dY's N stride odd where X's is
# even, congruent in every later stride (single elements: a mask from X's offsets would shift
# dY's and dX's elements).
MASKED_LAYOUTS = [((735, 147, 49, 1), (735, 147, 49, 1), True, 8),
                  ((780, 156, 52, 1), (780, 156, 52, 1), True, 0),
                  ((780, 156, 52, 1), (781, 156, 52, 1), False, 0)]


@pytest.mark.parametrize("one_pass", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_masked_runs_see_only_their_elements(device, rng, op, dtype, one_pass, monkeypatch):
    """A masked vector holds elements of the neighbouring runs (other channels, or the
    padding between rows): they must not reach the sums, and dX must not be stored over
    them. Non-finite values in two channels' X and dY and NaN in the row padding leave every
    other channel as the oracle has it; the padding of a strided dX keeps its contents; X and
    dY that disagree in a stride modulo the vector width are not masked. In two stages and,
    with `one_pass` (forced), with stage 1 finishing each channel."""
    monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1 if one_pass else 2**62)
    np_dtype, dtype = dtype, DataType.from_numpy(dtype, "", "")
    shape, stat = (6, 5, 3, 49), (1, 5, 1, 1)
    for x_strides, dy_strides, masked, slack in MASKED_LAYOUTS:
        size = [sum((n - 1) * st for n, st in zip(shape, strides)) + 1 + slack
                for strides in (x_strides, dy_strides)]
        x, dy, mean, var, scale = make_inputs(rng, shape, stat, np_dtype, op)
        x[2, 1, 0, 10], dy[3, 1, 2, 48], x[0, 3, 0, 0] = np.inf, np.nan, -np.inf
        raw_x, x = _strided(x, x_strides, size[0], np.nan)
        raw_dy, dy = _strided(dy, dy_strides, size[1], np.nan)
        xd, dyd = TensorDesc(dtype, shape, x_strides), TensorDesc(dtype, shape, dy_strides)
        md = TensorDesc(dtype, stat)
        desc = DESCS[op](xd, dyd, md, md, md, dyd, md, md, 1e-3)
        stage1 = desc.plan(device.limits).dispatches[0]
        assert stage1.constant("MASKED") == masked, (x_strides, dy_strides)
        assert stage1.constant("FINISH") == one_pass
        assert stage1.constant("WRITE_DX") == (masked and op == GRAD and dtype == F16
                                               or op == GRAD and dtype == F32)
        compiled = device.compile(desc)
        dx = device.upload(np.full(size[1], 99, np_dtype))
        ds, db = device.empty(md), device.empty(md)
        compiled(input_tensor=device.upload(raw_x), input_gradient_tensor=device.upload(raw_dy),
                 mean_tensor=device.upload(mean), variance_tensor=device.upload(var),
                 scale_tensor=device.upload(scale), output_gradient_tensor=dx,
                 output_scale_gradient_tensor=ds, output_bias_gradient_tensor=db)
        raw_dx = dx.numpy()
        got_dx = np.lib.stride_tricks.as_strided(raw_dx, shape,
                                                 [st * raw_dx.itemsize for st in dy_strides])
        gaps = _strided(np.zeros(shape, bool), dy_strides, size[1], True)[0]
        np.testing.assert_array_equal(raw_dx[gaps], 99, err_msg=f"{dy_strides}: dX padding")
        got = (got_dx, ds.numpy(), db.numpy())
        with np.errstate(invalid="ignore"):  # the poisoned channels
            want = FUNCTIONS[op][1](x, dy, mean, var, scale, 1e-3)
        for name, g, w in zip(NAMES, got, want):
            np.testing.assert_array_equal(np.isfinite(g), np.isfinite(w), err_msg=name)
        clean = [c for c in range(5) if c not in (1, 3)]
        sub = [a[:, clean] for a in (x, dy, mean, var, scale)]
        assert_outputs(bn.BatchNormalizationGradResult(got_dx[:, clean], got[1][:, clean],
                                                       got[2][:, clean]),
                       FUNCTIONS[op][1](*sub, 1e-3), magnitudes(op, *sub, 1e-3), np_dtype)


def test_plan_span():
    """SPAN: where the channels' runs lie end to end (NCHW) and no vector width divides the run,
    stage 1 reads SPAN = VEC / gcd(run, VEC) adjacent channels as one row of whole aligned
    vectors, at the first width of SPAN_WIDTHS (4, then 8 elements; 2 only where stage 1 stores
    float16 dX) that fits and keeps the one-pass plan; else MASKED."""
    def stage1(op, sizes, dtype, strides=None, limits=Limits(local_size=256)):
        stat = (1, sizes[1]) + (1,) * (len(sizes) - 2)
        return plan_of(op, sizes, stat, strides, dtype, limits).dispatches[0]

    def plain(s):
        return (s.constant("VEC"), s.constant("SPAN"), s.constant("MASKED"), s.constant("FINISH"))

    for sizes, dtype, op, want in (
            # 2 float16 elements, where stage 1 stores dX (MASKED would need atomics)
            ((256, 512, 7, 7), F16, GRAD, (2, 2, False, True)),
            # without dX in stage 1, or in float32, 2 elements are not taken: MASKED
            ((256, 512, 7, 7), F16, TRAINING, (8, 0, True, True)),
            ((256, 512, 7, 7), F32, GRAD, (4, 0, True, True)),  # SPAN 4: 128 groups
            ((128, 2048, 7, 7), F16, GRAD, (4, 4, False, True)),  # 4 before 8
            ((128, 2048, 7, 7), F16, TRAINING, (4, 4, False, True)),
            ((128, 2048, 7, 7), F32, TRAINING, (4, 4, False, True)),
            ((128, 256, 13, 13), F16, GRAD, (8, 0, True, True)),  # SPAN: too few groups
            ((256, 511, 7, 7), F16, GRAD, (8, 0, True, True)),  # SPAN must divide C
            ((128, 256, 27, 27), F16, GRAD, (8, 0, True, True)),  # a row of 729 vectors
            ((100000, 512, 7, 7), F16, GRAD, (8, 0, True, False))):  # no one pass: MASKED
        s = stage1(op, sizes, dtype)
        assert plain(s) == want, (sizes, dtype, op)
        if want[1]:
            assert s.constant("RUN") == 49 and s.constant("R_SIZES")[-1] == 49
            assert dict(s.push)["reduced"] == math.prod(sizes) // sizes[1]
            assert s.constant("LK") == want[1] and s.workgroups == sizes[1] // want[1]
            assert s.constant("WRITE_DX") == (op == GRAD)
    # [256,512,7,7] float16: 256 span groups widened to 512 lanes, 10 rows of 49 vectors each.
    s = stage1(GRAD, (256, 512, 7, 7), F16, limits=Limits(local_size=256, max_local_size=1024))
    assert (s.constant("WG"), s.constant("AHEAD"), s.constant("ITERS")) == (512, 4, 26)
    # [512,512,7,7] float16: 103 rows per lane at 256 wide, 52 at 512: SPAN where the device
    # allows 512, else MASKED.
    s = stage1(GRAD, (512, 512, 7, 7), F16, limits=Limits(local_size=256, max_local_size=1024))
    assert plain(s) == (2, 2, False, True) and s.constant("WG") == 512
    assert plain(stage1(GRAD, (512, 512, 7, 7), F16)) == (8, 0, True, True)
    # Padded rows (the next channel's run does not follow), and NHWC, are not spanned.
    assert not stage1(GRAD, (256, 512, 7, 7), F16, (512 * 56, 56, 7, 1)).constant("SPAN")
    assert not stage1(GRAD, (256, 512, 7, 7), F16, (512 * 49, 1, 7 * 512, 512)).constant("SPAN")
    # A batch stride that is no multiple of 4 (dX with dY's strides): 2 elements still fit;
    # with a packed dX, stage 1 stores no dX, so 2 elements are not taken.
    x = TensorDesc(F16, (256, 512, 7, 7), (512 * 49 + 2, 49, 7, 1))
    m = TensorDesc(F16, (1, 512, 1, 1))
    s = DESCS[GRAD](x, x, m, m, m, x, m, m, 1e-5).plan(Limits(local_size=256)).dispatches[0]
    assert plain(s) == (2, 2, False, True)
    assert plain(stage1(GRAD, (256, 512, 7, 7), F16, x.strides)) == (8, 0, True, True)


# (shape, statistics shape, strides or None): SPAN's rows of 7x7, 13x13, 5x5 and 3x3 (a run
# of 9 holding one vector of 8 with a part of another), a batch stride with a gap after each
# batch, and a channel count that leaves one span group.
SPAN_CASES = [((7, 16, 7, 7), (1, 16, 1, 1), None), ((3, 8, 13, 13), (1, 8, 1, 1), None),
              ((5, 24, 5, 5), (1, 24, 1, 1), None), ((11, 16, 3, 3), (1, 16, 1, 1), None),
              ((6, 8, 7, 7), (1, 8, 1, 1), (8 * 49 + 8, 49, 7, 1))]


@pytest.mark.parametrize("width", [2, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_span_rows(device, rng, op, dtype, width, monkeypatch):
    """SPAN at each vector width (forced, one pass forced), through compiled operators (whose
    plans are the ones asserted; the one-call cache would keep an earlier width's): the
    oracle's results, bitwise the same run to run; Inf and NaN in one channel's X and dY leave
    the channels sharing its vectors as the oracle has them; dX over X or dY reads every
    element before writing it."""
    import test_operators
    monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1)
    monkeypatch.setattr(bn_plan, "SPAN_WIDTHS", (width,))
    if width == 8 and dtype == np.float32:
        pytest.skip("float32 vectors hold at most 4 elements")
    dt = DataType.from_numpy(dtype, "", "")

    def run(shape, stat, arrays, strides=None):
        """The compiled operator's outputs for `arrays` (X and dY as buffers with `strides`),
        after asserting that its stage 1 is SPAN at `width` in one pass."""
        xd, m = TensorDesc(dt, shape, strides), TensorDesc(dt, stat)
        desc = DESCS[op](xd, xd, m, m, m, TensorDesc(dt, shape), m, m, 1e-3)
        s = device.compile(desc).plan.dispatches[0]
        assert (s.constant("VEC"), s.constant("SPAN"), s.constant("FINISH")) == \
            (width, width // math.gcd(width, shape[2] * shape[3]), True), shape
        return run_compiled(device, desc, arrays)

    for shape, stat, strides in SPAN_CASES:
        arrays = make_inputs(rng, shape, stat, dtype, op)
        views, buffers = arrays, arrays
        if strides is not None:  # X and dY in buffers with a gap (NaN) after each batch
            raw = [_strided(a, strides, strides[0] * shape[0], np.nan) for a in arrays[:2]]
            buffers = tuple(r for r, _ in raw) + arrays[2:]
            views = tuple(v for _, v in raw) + arrays[2:]
        got = run(shape, stat, buffers, strides)
        assert_outputs(bn.BatchNormalizationGradResult(*got), FUNCTIONS[op][1](*views, 1e-3),
                       magnitudes(op, *views, 1e-3), dtype)
        for name, u, v in zip(NAMES, got, run(shape, stat, buffers, strides)):
            np.testing.assert_array_equal(u.view(np.uint8), v.view(np.uint8), err_msg=name)
    # Non-finite values in channels 1 and 6, each sharing vectors with a neighbour at every
    # width (runs of 49: channel 1 with 0 or 2, channel 6 with 5 or 7).
    shape, stat = (7, 8, 7, 7), (1, 8, 1, 1)
    x, dy, mean, var, scale = make_inputs(rng, shape, stat, dtype, op)
    x[2, 1, 0, 0], dy[3, 1, 6, 6], x[0, 6, 6, 6], dy[6, 6, 0, 0] = np.inf, np.nan, -np.inf, np.nan
    got = run(shape, stat, (x, dy, mean, var, scale))
    with np.errstate(invalid="ignore"):
        want = FUNCTIONS[op][1](x, dy, mean, var, scale, 1e-3)
    for name, g, w in zip(NAMES, got, want):
        np.testing.assert_array_equal(np.isfinite(g), np.isfinite(w), err_msg=name)
    clean = [c for c in range(8) if c not in (1, 6)]
    sub = [a[:, clean] for a in (x, dy, mean, var, scale)]
    assert_outputs(bn.BatchNormalizationGradResult(*(g[:, clean] for g in got)),
                   FUNCTIONS[op][1](*sub, 1e-3), magnitudes(op, *sub, 1e-3), dtype)
    case = operators.Case(make_inputs(rng, (7, 16, 7, 7), (1, 16, 1, 1), dtype, op) + (1e-3,))
    for layout in ("packed", "transposed"):
        test_operators.check_in_place(device, RECORDS[op], case, layout, dtype)


@pytest.mark.parametrize("op", OPS)
def test_workgroup_stride_loops(device, rng, op, monkeypatch):
    """With at most 3 workgroups per dispatch every kernel loops over its work items."""
    limits = dataclasses.replace(device.limits, max_workgroups=3)
    monkeypatch.setattr(DeviceContext, "limits", property(lambda self: limits))
    for shape, stat_shape in [((3, 5, 3000), (1, 5, 1)), ((700, 9), (1, 9)), ((40, 30), (40, 1)),
                              ((5, 4000), (5, 4000))]:
        check(device, rng, op, shape, stat_shape, np.float16)
        check(device, rng, op, shape, stat_shape, np.float32)
    # The one-pass plan: a workgroup finishes several channels in turn, its shared memory
    # reused between them.
    monkeypatch.setattr(bn_plan, "ONE_PASS_MIN_GROUPS", 1)
    for dtype in DTYPES:
        assert plan_of(op, (3, 7, 3000), (1, 7, 1)).dispatches[0].constant("FINISH")
        check(device, rng, op, (3, 7, 3000), (1, 7, 1), dtype)
        check(device, rng, op, (3, 7, 49), (1, 7, 1), dtype)  # MASKED
        check(device, rng, op, (3, 16, 7, 7), (1, 16, 1, 1), dtype)  # SPAN: 4 span groups


# ---- the descriptor API --------------------------------------------------------------------------

def describe(op, x, dy, mean, var, scale, eps, out_strides=None):
    xd = TensorDesc(DataType.from_numpy(x.dtype, "", ""), x.shape)
    md = TensorDesc(xd.data_type, mean.shape)
    dx = TensorDesc(xd.data_type, x.shape, out_strides)
    return DESCS[op](xd, xd, md, md, md, dx, md, md, eps)


def run_compiled(device, desc, arrays, limits=None):
    op = device.compile(desc, limits)
    names = [n for n, _ in desc.tensor_fields()]
    tensors = {n: device.upload(a) for n, a in zip(names, arrays)}
    for n, (d, _) in list(desc.tensor_fields())[5:]:
        tensors[n] = device.empty(d)
    op(**tensors)
    return [tensors[n].numpy() for n in names[5:]]


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", OPS)
def test_compiled_operator_with_strided_outputs(device, rng, op, dtype):
    """device.compile, upload, empty, call, numpy on all three outputs; dX NHWC-strided and
    the parameter gradients padded; a second call on new data reuses everything."""
    np_dtype = dtype.numpy_dtype
    sizes, stat = (2, 3, 4, 5), (1, 3, 1, 1)
    x_desc = TensorDesc(dtype, sizes)
    stat_desc = TensorDesc(dtype, stat)
    dx_desc = TensorDesc(dtype, sizes, (60, 1, 15, 3))  # NHWC
    grad_desc = TensorDesc(dtype, stat, (0, 2, 0, 0))  # every other element
    desc = DESCS[op](x_desc, x_desc, stat_desc, stat_desc, stat_desc, dx_desc, grad_desc,
                     grad_desc, 1e-3)
    compiled = device.compile(desc)
    outputs = {"output_gradient_tensor": device.empty(dx_desc),
               "output_scale_gradient_tensor": device.empty(grad_desc),
               "output_bias_gradient_tensor": device.empty(grad_desc)}
    for _ in range(2):
        arrays = make_inputs(rng, sizes, stat, np_dtype, op)
        inputs = {n: device.upload(a) for n, a in zip(
            ["input_tensor", "input_gradient_tensor", "mean_tensor", "variance_tensor",
             "scale_tensor"], arrays)}
        compiled(**inputs, **outputs)
        result = bn.BatchNormalizationGradResult(*(t.numpy() for t in outputs.values()))
        assert_outputs(result, FUNCTIONS[op][1](*arrays, 1e-3), magnitudes(op, *arrays, 1e-3),
                       np_dtype)


def test_descriptor_fields_and_result_type():
    fields = [f.name for f in dataclasses.fields(pyvkgrad.BatchNormalizationGradDesc)]
    assert fields == ["input_tensor", "input_gradient_tensor", "mean_tensor", "variance_tensor",
                      "scale_tensor", "output_gradient_tensor", "output_scale_gradient_tensor",
                      "output_bias_gradient_tensor", "epsilon"]
    assert fields == [f.name for f in dataclasses.fields(DESCS[TRAINING])]
    assert pyvkgrad.BatchNormalizationGradDesc.OPERATOR == "BATCH_NORMALIZATION_GRAD"
    assert DESCS[TRAINING].OPERATOR == "BATCH_NORMALIZATION_TRAINING_GRAD"
    assert bn.BatchNormalizationGradResult._fields == NAMES
    d = describe(GRAD, *(np.zeros(s, np.float32) for s in [(2, 3)] * 2 + [(1, 3)] * 3), 1)
    assert isinstance(d.epsilon, float) and hash(d) == hash(dataclasses.replace(d))


# ---- plans (pure: no device) ---------------------------------------------------------------------

def plan_of(op, sizes, stat, strides=None, dtype=F32, limits=Limits(local_size=256)):
    x = TensorDesc(dtype, sizes, strides)
    m = TensorDesc(dtype, stat)
    return DESCS[op](x, x, m, m, m, TensorDesc(dtype, sizes), m, m, 1e-5).plan(limits)


def test_plan_nchw_and_nhwc():
    p = plan_of(GRAD, (32, 64, 112, 112), (1, 64, 1, 1))
    # The constant-statistics dX needs no reduction: stage 1 writes it as it reads dY.
    assert [d.kernel for d in p.dispatches] == ["batch_normalization_grad_partials",
                                                "batch_normalization_grad_finalize"]
    part = p.dispatches[0]
    assert part.constant("WRITE_DX")
    # Lanes along the reduced run, one channel per workgroup.
    assert (part.constant("K_FAST"), part.constant("LK")) == (False, 1)
    assert part.constant("VEC") == 4  # 16-byte loads
    assert plan_of(GRAD, (256, 256, 14, 14), (1, 256, 1, 1), dtype=F16).dispatches[0] \
        .constant("VEC") == 4  # 8-byte loads of float16 (196 is no multiple of 8)
    # Float16 NHWC: single float16 stores would need atomics, so the element-wise kernel
    # writes dX, beside the reduction (it reads nothing the reduction writes: no barrier).
    h = plan_of(GRAD, (8, 64, 14, 14), (1, 64, 1, 1), dtype=F16,
                strides=(14 * 14 * 64, 1, 14 * 64, 64))
    assert [d.kernel for d in h.dispatches] == ["batch_normalization_grad_partials",
                                                "batch_normalization_grad_output",
                                                "batch_normalization_grad_finalize"]
    assert not h.dispatches[0].constant("WRITE_DX")
    assert not set(h.dispatches[1].reads) & set(h.dispatches[0].writes) - {"output_gradient_tensor"}
    packed = plan_of(TRAINING, (32, 64, 112, 112), (1, 64, 1, 1))
    assert packed.dispatches[2].kernel == "batch_normalization_training_grad_output_packed"
    assert packed.dispatches[2].constant("SAME")  # a vector never straddles two channels
    nhwc = plan_of(TRAINING, (8, 64, 14, 14), (1, 64, 1, 1),
                   strides=(14 * 14 * 64, 1, 14 * 64, 64))
    assert [d.kernel for d in nhwc.dispatches] == ["batch_normalization_grad_partials",
                                                   "batch_normalization_grad_finalize",
                                                   "batch_normalization_training_grad_output"]
    # Consecutive lanes on consecutive channels.
    assert (nhwc.dispatches[0].constant("K_FAST"), nhwc.dispatches[0].constant("LK")) == (True, 64)
    assert "coefficients" in nhwc.dispatches[2].reads


@pytest.mark.parametrize("sizes, stat, kernel", [
    ((7, 5), (7, 5), "batch_normalization_grad_direct"),
    ((32, 5), (1, 5), "batch_normalization_grad_direct"),
    ((33, 5), (1, 5), "batch_normalization_grad_partials"),
])
def test_plan_short_channels_in_one_pass(sizes, stat, kernel):
    assert plan_of(TRAINING, sizes, stat).dispatches[0].kernel == kernel


def test_plan_one_pass_where_channel_groups_fill_the_device():
    """[256,256,14,14]: 256 channel groups, so stage 1 finishes every channel (FINISH); the
    constant-statistics grad is then one dispatch, the training grad two (sums, then dX).
    [32,64,112,112] (64 groups) and NHWC (4 groups of 64 channels) keep the finalize."""
    for dtype in (F32, F16):
        p = plan_of(GRAD, (256, 256, 14, 14), (1, 256, 1, 1), dtype=dtype)
        assert [d.kernel for d in p.dispatches] == ["batch_normalization_grad_partials"]
        assert p.dispatches[0].constant("FINISH") and p.dispatches[0].workgroups == 256
        t = plan_of(TRAINING, (256, 256, 14, 14), (1, 256, 1, 1), dtype=dtype)
        assert [d.kernel for d in t.dispatches] == [
            "batch_normalization_grad_partials",
            "batch_normalization_training_grad_output_packed"]
        assert "coefficients" in t.dispatches[0].writes and "coefficients" in t.dispatches[1].reads
    # Where the device allows, workgroups widen until they hold ONE_PASS_INVOCATIONS in all.
    # A width below local_size is never chosen, whatever the limits say.
    narrow = plan_of(GRAD, (256, 256, 14, 14), (1, 256, 1, 1), limits=Limits(local_size=512))
    assert narrow.dispatches[0].constant("WG") == 512
    wide = Limits(local_size=256, max_local_size=1024)
    for sizes, wg in (((256, 256, 14, 14), 512), ((256, 512, 7, 7), 256)):
        for op in OPS:
            stage1 = plan_of(op, sizes, (1, sizes[1], 1, 1), limits=wide).dispatches[0]
            assert stage1.constant("FINISH") and stage1.constant("WG") == wg
            assert stage1.workgroups == sizes[1]
    # [512,256,14,14]: 98 vectors per lane at 256 wide (more than ONE_PASS_MAX_ITERS), 49 at
    # the one-pass width, 512: one pass where the device allows that width.
    for limits, finish in ((wide, True), (Limits(local_size=256), False)):
        s = plan_of(GRAD, (512, 256, 14, 14), (1, 256, 1, 1), limits=limits).dispatches[0]
        assert (s.constant("FINISH"), s.constant("WG")) == (finish, 512 if finish else 256)
    assert not plan_of(GRAD, (32, 64, 112, 112), (1, 64, 1, 1)).dispatches[0].constant("FINISH")
    nhwc = plan_of(GRAD, (256, 256, 14, 14), (1, 256, 1, 1),
                   strides=(14 * 14 * 256, 1, 14 * 256, 256))
    assert not nhwc.dispatches[0].constant("FINISH")


def test_plan_spreads_few_large_channels_over_many_workgroups():
    p = plan_of(TRAINING, (1, 2, 10**7), (1, 2, 1))
    assert p.dispatches[0].workgroups > 1000
    assert all(d.workgroups <= 65535 for d in p.dispatches)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_plan_within_a_loop_limit_or_a_clear_error(op, dtype):
    """Under a loop limit, stage 1 takes longer chunks until every invocation fits, up to one
    chunk per channel group; where even that cannot fit (a device of very few workgroups),
    planning stops with an error naming the operator instead of doubling the chunk forever."""
    # 2 workgroups of 64: chunks 4 vectors long are far over the limit; 32 times longer fit.
    # One chunk per channel only just fits, and a doubled chunk length past it would not.
    few = Limits(local_size=64, max_local_size=64, max_workgroups=2, max_loop_iterations=65535)
    sizes, stat = (32, 64, 112, 112), (1, 64, 1, 1)
    stage1 = plan_of(op, sizes, stat, dtype=dtype, limits=few).dispatches[0]
    push = dict(stage1.push)
    assert stage1.constant("ITERS") > bn_plan.ITERS_MAX_VECTORS
    assert bn_plan.within_loop_limit(few, push["channels"], push["groups"], push["chunks"],
                                     stage1.constant("ITERS"), stage1.constant("FINISH"),
                                     stage1.constant("WG"))
    one = Limits(local_size=256, max_workgroups=1, max_loop_iterations=65535)
    with pytest.raises(RuntimeError, match=rf"^{DESCS[op].OPERATOR}: InputTensor.Sizes needs "
                                           rf"fewer loop iterations .*\(1000, 400, 7, 7\)$"):
        plan_of(op, (1000, 400, 7, 7), (1, 400, 1, 1), dtype=dtype, limits=one)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_one_lane_under_the_loop_limit(device, rng, op, dtype):
    """One workgroup of one lane under lavapipe's loop limit: the direct kernel and the
    OutputGradient kernels split their grid-stride loops into several dispatches and give the
    oracle's results (one direct dispatch dropped the channels past the limit: dScale 100%
    off); what the reduction cannot fit is refused. The default limits keep one dispatch."""
    # lavapipe's limit on any device (on a GPU without one the plan must split all the same)
    tiny = dataclasses.replace(device.limits, max_workgroups=1, local_size=1, max_local_size=1,
                               max_loop_iterations=65535)
    cases = [((2, 70000), (1, 70000), None, "batch_normalization_grad_direct"),
             ((70000, 1), (1, 1), None, None),  # packed dX: the training grad's own pass
             ((70000, 1), (1, 1), (2, 1), None)]  # strided dX: both grads' own pass
    for shape, stat_shape, out_strides, kernel in cases:
        arrays = make_inputs(rng, shape, stat_shape, dtype, op)
        desc = describe(op, *arrays, 1e-3, out_strides)
        kernels = [d.kernel for d in desc.plan(tiny).dispatches]
        split = [k for k in kernels if k == kernel or k.endswith(("_output", "_output_packed"))]
        if kernel or op == TRAINING or out_strides:
            assert len(split) > 1, kernels
        default = [d.kernel for d in desc.plan(device.limits).dispatches]
        assert len(default) == len(set(default)), default
        out = run_compiled(device, desc, arrays, tiny)
        assert_outputs(bn.BatchNormalizationGradResult(*out), FUNCTIONS[op][1](*arrays, 1e-3),
                       magnitudes(op, *arrays, 1e-3), dtype)
    arrays = make_inputs(rng, (2000, 40), (1, 40), dtype, op)
    with pytest.raises(RuntimeError, match=rf"^{DESCS[op].OPERATOR}: InputTensor.Sizes needs "
                                           rf"fewer loop iterations .*\(2000, 40\)$"):
        device.compile(describe(op, *arrays, 1e-3), tiny)


def test_constant_grad_writes_dx_in_its_reduction(device, rng):
    arrays = make_inputs(rng, (2, 3, 100), (1, 3, 1), np.float32, GRAD)
    desc = describe(GRAD, *arrays, 1e-3)
    op = device.compile(desc)
    tensors = {n: device.upload(a) for n, a in zip([n for n, _ in desc.tensor_fields()], arrays)}
    for n, (d, _) in list(desc.tensor_fields())[5:]:
        tensors[n] = device.empty(d)
    rec = device.record()
    rec.execute(op, **tensors)
    labels = [lab.split(":")[-1] for lab in rec.labels]
    assert labels == ["batch_normalization_grad_partials", "barrier",
                      "batch_normalization_grad_finalize"]
    rec.submit()


# ---- errors: raised before any device work, naming the operator and the field --------------------

def descs(x=(2, 3, 4), stat=(1, 3, 1), types=(F32,) * 8, overrides=None):
    shapes = [x, x, stat, stat, stat, x, stat, stat]
    out = [TensorDesc(t, s) for t, s in zip(types, shapes)]
    for i, d in (overrides or {}).items():
        out[i] = d
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("args, eps, kind, message", [
    (descs(stat=(1, 2, 1)), 1e-5, ValueError,
     r"{OP}: MeanTensor.Sizes\[1\] must be 1 or InputTensor.Sizes\[1\]: expected 1 or 3, got 2"),
    (descs(stat=(2, 3, 5)), 1e-5, ValueError,
     r"MeanTensor.Sizes\[2\] must be 1 or InputTensor.Sizes\[2\]: expected 1 or 4, got 5"),
    (descs(types=(F32,) * 4 + (F16,) + (F32,) * 3), 1e-5, TypeError,
     r"{OP}: ScaleTensor.DataType must equal InputTensor.DataType: expected FLOAT32, got FLOAT16"),
    (descs(types=(F16,) * 7 + (F32,)), 1e-5, TypeError,
     r"OutputBiasGradientTensor.DataType must equal InputTensor.DataType: expected FLOAT16"),
    (descs(overrides={3: TensorDesc(F32, (3,))}), 1e-5, ValueError,
     r"VarianceTensor.DimensionCount must equal InputTensor.DimensionCount: expected 3, got 1"),
    (descs(overrides={1: TensorDesc(F32, (2, 3, 5))}), 1e-5, ValueError,
     r"InputGradientTensor.Sizes must equal InputTensor.Sizes: expected \(2, 3, 4\), "
     r"got \(2, 3, 5\)"),
    (descs(overrides={6: TensorDesc(F32, (1, 1, 1))}), 1e-5, ValueError,
     r"OutputScaleGradientTensor.Sizes must equal MeanTensor.Sizes: expected \(1, 3, 1\)"),
    (descs(overrides={5: TensorDesc(F32, (2, 3, 4), (0, 4, 1))}), 1e-5, ValueError,
     r"OutputGradientTensor.Strides must not make output elements overlap"),
    (descs(overrides={7: TensorDesc(F32, (1, 3, 1), (3, 0, 1))}), 1e-5, ValueError,
     r"OutputBiasGradientTensor.Strides must not make output elements overlap"),
    (descs(overrides={2: "mean"}), 1e-5, TypeError, r"MeanTensor must be a TensorDesc"),
    (descs(), -1e-5, ValueError, r"{OP}: Epsilon must be finite and non-negative"),
    (descs(), float("nan"), ValueError, r"Epsilon must be finite and non-negative.*got nan"),
    (descs(), float("inf"), ValueError, r"Epsilon must be finite"),
    (descs(), 1e39, ValueError, r"Epsilon must be finite and non-negative \(in float32\)"),
    (descs(), "0.1", TypeError, r"Epsilon must be a number: expected float, got str"),
    (descs(), True, TypeError, r"Epsilon must be a number"),
])
def test_descriptor_errors(op, args, eps, kind, message):
    cls = DESCS[op]
    with pytest.raises(kind, match=message.replace("{OP}", cls.OPERATOR)):
        cls(*args, eps)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shapes, dtypes, eps, kind, message", [
    ([(1,) * 9] * 2 + [(1,) * 9] * 3, [np.float32] * 5, 1e-5, ValueError,
     r"input.DimensionCount is out of range: expected 1 to 8, got 9"),
    ([(2, 3)] * 2 + [(1, 2)] * 3, [np.float32] * 5, 1e-5, ValueError,
     r"MeanTensor.Sizes\[1\] must be 1 or InputTensor.Sizes\[1\]: expected 1 or 3, got 2"),
    ([(2, 3)] * 2 + [(3,)] * 3, [np.float32] * 5, 1e-5, ValueError,
     r"MeanTensor.DimensionCount must equal InputTensor.DimensionCount: expected 2, got 1"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float32] * 4 + [np.float16], 1e-5, TypeError,
     r"ScaleTensor.DataType must equal InputTensor.DataType"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float64] * 5, 1e-5, TypeError,
     r"input has unsupported dtype: expected float32 or float16, got float64"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float32] * 5, -1.0, ValueError,
     r"Epsilon must be finite and non-negative"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float32] * 5, float("nan"), ValueError,
     r"Epsilon must be finite and non-negative"),
])
def test_one_call_errors(device, monkeypatch, op, shapes, dtypes, eps, kind, message):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    arrays = [np.zeros(s, t) for s, t in zip(shapes, dtypes)]
    with pytest.raises(kind, match=f"{DESCS[op].OPERATOR}: {message}"):
        FUNCTIONS[op][0](*arrays, eps, device=device)


def test_binding_errors(device):
    desc = pyvkgrad.BatchNormalizationGradDesc(*descs(), 1e-5)
    op = device.compile(desc)
    t = {n: device.empty(d) for n, (d, _) in desc.tensor_fields()}
    with pytest.raises(TypeError, match=r"missing \['output_bias_gradient_tensor'\]"):
        op(**{n: v for n, v in t.items() if n != "output_bias_gradient_tensor"})
    t["scale_tensor"] = device.empty(TensorDesc(F16, (1, 3, 1)))
    with pytest.raises(TypeError, match=r"ScaleTensor has the wrong data type"):
        op(**t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_in_place_every_reduction_kernel(device, rng, op, dtype):
    """dX bound over X or over dY (IN_PLACE) through each reduction kernel and vector width:
    every kernel reads an element's X and dY before it writes that element's dX. (The
    reduction's float16 pair path once stored dX before it read X.)"""
    import test_operators
    record = RECORDS[op]
    for shape, stat in (((3, 10, 7), (1, 1, 1)), ((3, 10, 7), (1, 10, 1)),
                        ((2, 3, 64), (1, 3, 1)), ((4, 66), (1, 66))):
        case = operators.Case(make_inputs(rng, shape, stat, dtype, op) + (1e-3,))
        for layout in ("packed", "transposed"):
            test_operators.check_in_place(device, record, case, layout, dtype)
