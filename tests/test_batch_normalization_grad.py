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
    """A width that is no power of two is refused (the plans split workgroups into
    power-of-two lane groups; the subgroup sums before the exact sums once left 4 of 100
    lanes' terms out of dScale and dBias, 7-26% off); powers of two narrower than, equal to and
    wider than the device's subgroup give the oracle's results."""
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
            assert desc.plan(limits).dispatches[0].kernel == "batch_normalization_training_sums"
            out = run_compiled(device, desc, arrays, limits)
            assert_outputs(bn.BatchNormalizationGradResult(*out), FUNCTIONS[op][1](*arrays, 1e-3),
                           magnitudes(op, *arrays, 1e-3), np.float32)




@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", OPS)
def test_unrolled_chunk_loops_give_the_same_bits(device, rng, op, dtype):
    """Limits.unroll_loops (a CPU device's plans: the sums kernel's chunk loops [[unroll]])
    on and off: the same bits, for chunks in one long run, chunks that walk across short runs,
    and BATCH_NORMALIZATION_GRAD's dX stored by the sums kernel (float32)."""
    np_dtype = dtype.numpy_dtype
    for shape, stat_shape in (((2, 3, 1100), (1, 3, 1)), ((9, 4, 7, 5), (1, 4, 1, 1)),
                              ((600, 3), (1, 3))):
        arrays = make_inputs(rng, shape, stat_shape, np_dtype, op)
        desc = describe(op, *arrays, 1e-3)
        outs = [run_compiled(device, desc, arrays,
                             dataclasses.replace(device.limits, unroll_loops=unroll))
                for unroll in (False, True)]
        for rolled, unrolled in zip(*outs):
            assert rolled.tobytes() == unrolled.tobytes(), (shape, op, dtype)


@pytest.mark.parametrize("op", OPS)
def test_workgroup_stride_loops(device, rng, op, monkeypatch):
    """With at most 3 workgroups per dispatch every kernel loops over its work items."""
    limits = dataclasses.replace(device.limits, max_workgroups=3)
    monkeypatch.setattr(DeviceContext, "limits", property(lambda self: limits))
    for shape, stat_shape in [((3, 5, 3000), (1, 5, 1)), ((700, 9), (1, 9)), ((40, 30), (40, 1)),
                              ((5, 4000), (5, 4000))]:
        check(device, rng, op, shape, stat_shape, np.float16)
        check(device, rng, op, shape, stat_shape, np.float32)
    # Many channels: a workgroup takes several items in turn, its shared digits cleared
    # between them.
    for dtype in DTYPES:
        check(device, rng, op, (3, 70, 49), (1, 70, 1), dtype)


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
    # The constant-statistics dX needs no reduction: the sums kernel writes it as it reads
    # dY, and finishes each channel as its sums complete: one dispatch.
    assert [d.kernel for d in p.dispatches] == ["batch_normalization_training_sums"]
    sums = p.dispatches[0]
    assert sums.constant("WRITE_DX") and sums.constant("GRAD") and not sums.constant("TRAINING")
    assert dict(sums.bindings)["dx"] == "output_gradient_tensor"
    # Lanes along the reduced run, one channel per workgroup.
    assert (sums.constant("K_FAST"), sums.constant("LK")) == (False, 1)
    # Float16: single float16 stores would need atomics, so the element-wise kernel writes
    # dX, from the factor the sums kernel stores as it finishes a channel (CONSTANT_STATISTICS).
    h = plan_of(GRAD, (8, 64, 14, 14), (1, 64, 1, 1), dtype=F16,
                strides=(14 * 14 * 64, 1, 14 * 64, 64))
    assert [d.kernel for d in h.dispatches] == ["batch_normalization_training_sums",
                                                "batch_normalization_training_grad_output"]
    assert not h.dispatches[0].constant("WRITE_DX")
    assert dict(h.dispatches[0].bindings)["dx"] == "partials"
    assert h.dispatches[1].constant("CONSTANT_STATISTICS")
    assert "coefficients" in h.dispatches[1].reads
    packed = plan_of(TRAINING, (32, 64, 112, 112), (1, 64, 1, 1))
    assert packed.dispatches[1].kernel == "batch_normalization_training_grad_output_packed"
    assert packed.dispatches[1].constant("SAME")  # a vector never straddles two channels
    nhwc = plan_of(TRAINING, (8, 64, 14, 14), (1, 64, 1, 1),
                   strides=(14 * 14 * 64, 1, 14 * 64, 64))
    assert [d.kernel for d in nhwc.dispatches] == ["batch_normalization_training_sums",
                                                   "batch_normalization_training_grad_output"]
    # Consecutive lanes on consecutive channels.
    assert (nhwc.dispatches[0].constant("K_FAST"), nhwc.dispatches[0].constant("LK")) == (True, 16)
    assert "coefficients" in nhwc.dispatches[1].reads


@pytest.mark.parametrize("sizes, stat, kernel", [
    ((7, 5), (7, 5), "batch_normalization_grad_direct"),
    ((32, 5), (1, 5), "batch_normalization_grad_direct"),
    ((33, 5), (1, 5), "batch_normalization_training_sums"),
])
def test_plan_short_channels_in_one_pass(sizes, stat, kernel):
    assert plan_of(TRAINING, sizes, stat).dispatches[0].kernel == kernel


def test_plan_spreads_few_large_channels_over_many_workgroups():
    p = plan_of(TRAINING, (1, 2, 10**7), (1, 2, 1))
    assert p.dispatches[0].workgroups > 100
    assert all(d.workgroups <= 65535 for d in p.dispatches)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n, wg", [(5_000_000, 8), (5_600_000, 256), (6_291_456, 256)])
def test_plan_long_channels_on_lavapipe(op, n, wg):
    """Lavapipe's limits (the sums one subgroup wide, 65535 loop iterations an invocation): a
    channel of millions of elements still plans (once refused, or refused with a wrong
    message): more chunks per lane until the completing item's loops fit, else the full
    workgroup width."""
    lavapipe = Limits(subgroup_size=8, local_size=256, max_local_size=256,
                      max_loop_iterations=65535, narrow_reductions=True)
    sums = plan_of(op, (n, 8), (1, 8), dtype=F16, limits=lavapipe).dispatches[0]
    assert sums.kernel == "batch_normalization_training_sums" and sums.constant("WG") == wg
    per_lane, groups = sums.constant("CHUNKS_PER_LANE"), dict(sums.push)["groups"]
    assert per_lane * groups * (wg // sums.constant("LK")) >= -(-n // 16)  # every chunk


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
def test_plan_within_a_loop_limit(op, dtype):
    """Under a loop limit on a device of few workgroups, the sums split into several
    dispatches, each taking as many work items as keep every invocation within the limit."""
    few = Limits(local_size=64, max_local_size=64, max_workgroups=2, max_loop_iterations=65535)
    p = plan_of(op, (32, 64, 112, 112), (1, 64, 1, 1), dtype=dtype, limits=few)
    sums = [d for d in p.dispatches if d.kernel == "batch_normalization_training_sums"]
    assert len(sums) > 1 and all(d.workgroups <= 2 for d in p.dispatches)
    pushes = [dict(d.push) for d in sums]
    assert pushes[0]["first"] == 0 and pushes[-1]["end"] == pushes[0]["channels"] * \
        pushes[0]["groups"]
    assert all(a["end"] == b["first"] for a, b in zip(pushes, pushes[1:]))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_one_lane_under_the_loop_limit(device, rng, op, dtype):
    """One workgroup of one lane under lavapipe's loop limit: the direct kernel and the
    OutputGradient kernels split their grid-stride loops into several dispatches and give the
    oracle's results (one direct dispatch dropped the channels past the limit: dScale 100%
    off); the exact sums fit any limit. The default limits keep one dispatch."""
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
    # The exact sums fit any loop limit: one lane takes a few chunks per work item.
    arrays = make_inputs(rng, (2000, 40), (1, 40), dtype, op)
    out = run_compiled(device, describe(op, *arrays, 1e-3), arrays, tiny)
    assert_outputs(bn.BatchNormalizationGradResult(*out), FUNCTIONS[op][1](*arrays, 1e-3),
                   magnitudes(op, *arrays, 1e-3), dtype)


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
    assert labels == ["batch_normalization_training_sums"]
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
     r"InputTensor.DimensionCount is out of range: expected 1 to 8, got 9"),
    ([(2, 3)] * 2 + [(1, 2)] * 3, [np.float32] * 5, 1e-5, ValueError,
     r"MeanTensor.Sizes\[1\] must be 1 or InputTensor.Sizes\[1\]: expected 1 or 3, got 2"),
    ([(2, 3)] * 2 + [(3,)] * 3, [np.float32] * 5, 1e-5, ValueError,
     r"MeanTensor.DimensionCount must equal InputTensor.DimensionCount: expected 2, got 1"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float32] * 4 + [np.float16], 1e-5, TypeError,
     r"ScaleTensor.DataType must equal InputTensor.DataType"),
    ([(2, 3)] * 2 + [(1, 3)] * 3, [np.float64] * 5, 1e-5, TypeError,
     r"InputTensor has unsupported dtype: expected float32 or float16, got float64"),
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
