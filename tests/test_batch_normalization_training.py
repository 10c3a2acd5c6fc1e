"""BATCH_NORMALIZATION_TRAINING (docs/semantics.md §18): the spec's worked examples, the float64
oracle and PyTorch's training-mode batch_norm within stated tolerances, and the device's bits
against a numpy model of the canonical order (chunks of 16 fixed by the problem, tree-summed in
float32, chunk sums added exactly, every later step one float32 operation), which any workgroup
width, loop limit or cut must reproduce."""

import math

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import reference
from pyvkgrad.ops.batch_normalization_training import (BatchNormalizationTrainingDesc,
                                                       batch_normalization_training)
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import DataType, TensorDesc
from cases import strided_view

F32, F16 = np.float32, np.float16
RELU = "ACTIVATION_RELU"


# ---- the numpy model of the canonical order ------------------------------------------------------

def _round_exact(total: int) -> np.float32:
    """The float32 nearest to total * 2^-149 (ties to even)."""
    if total == 0:
        return F32(0.0)
    sign, mag = (-1.0 if total < 0 else 1.0), abs(total)
    shift = max(0, mag.bit_length() - 24)
    q, rest = mag >> shift, mag & ((1 << shift) - 1)
    if shift and (rest > 1 << (shift - 1) or (rest == 1 << (shift - 1) and q & 1)):
        q += 1
    value = math.ldexp(q, shift - 149)
    return F32(sign * value) if value < 2.0**128 else F32(sign * np.inf)


def _exact_sum(values: np.ndarray) -> np.float32:
    """The exact sum of float32 values, rounded once (NaN, Inf as the kernels' flags give)."""
    if np.isnan(values).any() or (np.isposinf(values).any() and np.isneginf(values).any()):
        return F32(np.nan)
    if np.isinf(values).any():
        return F32(np.inf if np.isposinf(values).any() else -np.inf)
    return _round_exact(sum(int(v) for v in values.astype(np.float64) * 2.0**149))


def _tree(blocks: np.ndarray) -> np.ndarray:
    """Chunk sums: blocks [..., 16, 32] (element r = 512 b + 32 i + j at [b, i, j]) summed over
    i in the fixed tree (i + 8, then + 4, + 2, + 1), in float32."""
    v = blocks.copy()
    for h in (8, 4, 2, 1):
        v[..., :h, :] = v[..., :h, :] + v[..., h:2 * h, :]
    return v[..., 0, :]


def model(x, scale, bias, epsilon, fused_add=None, fused_activation=None):
    """(Output, Mean, Variance) as the kernels compute them, bit for bit."""
    dtype = x.dtype
    x32 = x.astype(F32)
    reduced = tuple(d for d in range(x.ndim) if scale.shape[d] == 1)
    kept = tuple(d for d in range(x.ndim) if d not in reduced)
    rows = np.moveaxis(x32, kept, range(len(kept))).reshape(-1, math.prod(
        x.shape[d] for d in reduced))
    n = rows.shape[1]
    padded = -(-n // 512) * 512
    mean, var = np.empty(rows.shape[0], F32), np.empty(rows.shape[0], F32)
    count = F32(min(16, -(-n // 32)))
    for k, row in enumerate(rows):
        first = np.zeros((16, 1), F32)
        first[:min(16, -(-n // 32)), 0] = row[::32][:16]
        shift = _tree(first)[0] / count
        shift = shift if np.isfinite(shift) else F32(0)
        a = np.zeros(padded, F32)
        a[:n] = row - shift
        blocks = a.reshape(-1, 16, 32)
        s1 = _exact_sum(_tree(blocks).reshape(-1))
        s2 = _exact_sum(_tree(blocks * blocks).reshape(-1))
        d = s1 / F32(n)
        mean[k] = shift + d
        v = s2 / F32(n) - d * d
        var[k] = F32(0) if v < 0 else v
    stat_shape = scale.shape
    order = [scale.shape[d] for d in kept]
    mean_k = np.moveaxis(mean.reshape(order + [1] * len(reduced)), range(len(kept)), kept) \
        .reshape(stat_shape)
    var_k = np.moveaxis(var.reshape(order + [1] * len(reduced)), range(len(kept)), kept) \
        .reshape(stat_shape)
    c = scale.astype(F32) / np.sqrt(var_k + F32(epsilon))
    y = (x32 - mean_k) * c + bias.astype(F32)
    if fused_add is not None:
        y = y + fused_add.astype(F32)
    if fused_activation == RELU:
        y = np.where(y <= 0, F32(0), y)
    return y.astype(dtype), mean_k.astype(dtype), var_k.astype(dtype)


def same_bits(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        gb, wb = g.view(np.uint16 if g.dtype == F16 else np.uint32), \
            w.view(np.uint16 if w.dtype == F16 else np.uint32)
        bad = np.flatnonzero(gb != wb)
        assert bad.size == 0, (f"{bad.size} of {g.size} differ, first at {bad[0]}: "
                               f"{g.reshape(-1)[bad[0]]} vs {w.reshape(-1)[bad[0]]}")


def problem(rng, shape, stats_shape, dtype, loc=0.0, spread=1.0):
    x = (rng.standard_normal(shape) * spread + loc).astype(dtype)
    scale = rng.standard_normal(stats_shape).astype(dtype)
    bias = rng.standard_normal(stats_shape).astype(dtype)
    return x, scale, bias


# ---- the spec's worked examples ----------------------------------------------------------------

def test_worked_examples(device):
    """BNT-1, BNT-2 and BNT-3: statistics exact, outputs within 1 float32 ulp of the fractions."""
    x = np.array([1, 3, 2, 6, 5, 7, 4, 0], F32).reshape(2, 2, 1, 2)
    scale, bias = np.array([1, 2], F32).reshape(1, 2, 1, 1), np.array([0, 1], F32).reshape(1, 2, 1, 1)
    y, m, v = batch_normalization_training(x, scale, bias, 4.0, device=device)
    assert m.reshape(-1).tolist() == [4, 3] and v.reshape(-1).tolist() == [5, 5]
    np.testing.assert_allclose(y.reshape(-1), [-1, -1 / 3, 1 / 3, 3, 1 / 3, 1, 5 / 3, -1],
                               rtol=2**-22)
    y, m, v = batch_normalization_training(np.array([1, 2, 3, 6], F32), np.ones(1, F32),
                                           np.zeros(1, F32), 0.5, device=device)
    assert (m.tolist(), v.tolist()) == ([3.0], [3.5])
    np.testing.assert_allclose(y, [-1, -0.5, 0, 1.5], rtol=2**-22)
    fused = np.array([0, 1, -1, 0, 0, 0, -2, 3], F32).reshape(x.shape)
    y, _, _ = batch_normalization_training(x, scale, bias, 4.0, fused_add=fused,
                                           fused_activation=RELU, device=device)
    np.testing.assert_allclose(y.reshape(-1), [0, 2 / 3, 0, 3, 1 / 3, 1, 0, 2], rtol=2**-22,
                               atol=2**-22)


# ---- against the oracle and the model ----------------------------------------------------------

SHAPES = [
    ((1,), (1,)), ((7,), (1,)), ((257,), (1,)), ((3, 5), (1, 5)), ((5, 3), (5, 1)),
    ((2, 3, 5, 7), (1, 3, 1, 1)), ((4, 16, 33, 33), (1, 16, 1, 1)),
    ((2, 8, 16, 16), (1, 8, 1, 1)), ((3, 4, 5, 6, 7), (1, 4, 1, 6, 1)),
    ((2, 2, 2, 2, 2, 2, 2, 3), (1, 2, 1, 1, 2, 1, 1, 1)), ((511,), (1,)), ((512,), (1,)),
    ((513,), (1,)), ((2, 1031), (2, 1)), ((6, 1, 3), (6, 1, 3)), ((4, 600), (1, 600)),
    ((3, 4, 172), (1, 4, 1)), ((2, 6, 8, 64), (1, 6, 1, 1)),
]


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape,stats", SHAPES)
def test_matches_model_and_oracle(device, rng, shape, stats, dtype):
    """The model's bits, and the float64 oracle within: Mean 1e-6 of mean |X| (float16: one
    rounding on store), Variance 1e-5 of mean X^2, Output 1e-5 of its terms."""
    x, scale, bias = problem(rng, shape, stats, dtype, loc=float(rng.uniform(-3, 3)))
    eps = float(rng.choice([0.0, 1e-5, 0.5])) if math.prod(stats) < math.prod(shape) else 1e-3
    fused = rng.standard_normal(shape).astype(dtype) if rng.random() < 0.5 else None
    act = RELU if rng.random() < 0.5 else None
    got = batch_normalization_training(x, scale, bias, eps, fused_add=fused,
                                       fused_activation=act, device=device)
    same_bits(got, model(x, scale, bias, eps, fused, act))
    y, m, v = reference.batch_normalization_training(x, scale, bias, eps, fused_add=fused,
                                                     fused_activation=act)
    axes = tuple(d for d in range(x.ndim) if stats[d] == 1)
    x64 = x.astype(np.float64)
    rounding = 2.0**-10 if dtype == F16 else 0.0
    mag_m = np.abs(x64).mean(axis=axes, keepdims=True) if axes else np.abs(x64)
    assert np.all(np.abs(got[1] - m) <= 1e-6 * mag_m + rounding * np.abs(m))
    mag_v = (x64**2).mean(axis=axes, keepdims=True) if axes else x64**2
    assert np.all(np.abs(got[2] - v) <= 1e-5 * mag_v + rounding * np.abs(v) + 1e-30)
    c = np.abs(scale.astype(np.float64)) / np.sqrt(v + eps) if eps or axes else 0
    mag_y = (c * (np.abs(x64) + np.sqrt(mag_v)) + np.abs(bias.astype(np.float64))
             + (0 if fused is None else np.abs(fused.astype(np.float64))))
    if eps or axes:
        assert np.all(np.abs(got[0] - y) <= 1e-5 * mag_y + rounding * np.abs(y) + 1e-7)


def test_no_reduction_and_zero_epsilon(device):
    """Scale as large as X (R empty): Mean = X, Variance = 0, Output = Bias (Epsilon > 0) or
    NaN (0 / 0, Epsilon = 0), as the formula gives."""
    x = np.array([[1.5, -2.0], [3.0, 0.25]], F32)
    s, b = np.full((2, 2), 2.0, F32), np.array([[1, 2], [3, 4]], F32)
    y, m, v = batch_normalization_training(x, s, b, 1e-3, device=device)
    assert np.array_equal(m, x) and not v.any() and np.array_equal(y, b)
    y, _, _ = batch_normalization_training(x, s, b, 0.0, device=device)
    assert np.isnan(y).all()


def test_non_finite_inputs_poison_their_channel(device):
    """A NaN or Inf in X makes its channel's Variance and Output NaN (Mean NaN or +-Inf), and
    leaves the other channels alone."""
    x = np.random.default_rng(3).standard_normal((4, 3, 40)).astype(F32)
    x[2, 0, 7], x[1, 2, 9] = np.nan, np.inf
    s, b = np.ones((1, 3, 1), F32), np.zeros((1, 3, 1), F32)
    y, m, v = batch_normalization_training(x, s, b, 1e-5, device=device)
    assert np.isnan(m[0, 0, 0]) and m[0, 2, 0] == np.inf
    assert np.isnan(v[0, [0, 2], 0]).all() and np.isnan(y[:, [0, 2]]).all()
    assert np.isfinite(y[:, 1]).all() and np.isfinite(m[0, 1, 0]) and np.isfinite(v[0, 1, 0])


def test_data_far_from_zero(device, rng):
    """Data at 1e4 with spread 1e-2: the shift (chunk (0, 0)'s mean) keeps Variance accurate
    where E[X^2] - E[X]^2 in float32 would lose every digit."""
    x = (1e4 + 1e-2 * rng.standard_normal((64, 4, 300))).astype(F32)
    s, b = np.ones((1, 4, 1), F32), np.zeros((1, 4, 1), F32)
    _, m, v = batch_normalization_training(x, s, b, 0.0, device=device)
    want = x.astype(np.float64).var(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(v, want, rtol=1e-3)


def test_strided_and_broadcast_inputs(device, rng):
    """Strided X, a broadcast (stride 0) Scale and Bias, NHWC: the model's bits."""
    x = strided_view(rng, (3, 5, 6, 7), F32)
    scale = np.broadcast_to(np.float32(1.5), (1, 5, 1, 1))
    bias = rng.standard_normal((1, 5, 1, 1)).astype(F32)
    same_bits(batch_normalization_training(x, scale, bias, 1e-5, device=device),
              model(np.ascontiguousarray(x), np.ascontiguousarray(scale), bias, 1e-5))
    nhwc = rng.standard_normal((4, 9, 10, 6)).astype(F16).transpose(0, 3, 1, 2)
    s, b = (rng.standard_normal((1, 6, 1, 1)).astype(F16) for _ in range(2))
    same_bits(batch_normalization_training(nhwc, s, b, 1e-3, device=device),
              model(np.ascontiguousarray(nhwc), s, b, 1e-3))


def test_inputs_unchanged(device, rng):
    x, s, b = problem(rng, (4, 3, 50), (1, 3, 1), F32)
    f = rng.standard_normal(x.shape).astype(F32)
    before = [a.copy() for a in (x, s, b, f)]
    batch_normalization_training(x, s, b, 1e-5, fused_add=f, device=device)
    for a, c in zip((x, s, b, f), before):
        assert np.array_equal(a, c)


# ---- the same bits whatever the plan -------------------------------------------------------------

def run_desc(device, x, scale, bias, eps, limits, act=None):
    """run_layout's outputs over packed copies of the arrays, planned under `limits`."""
    x, scale, bias = (np.ascontiguousarray(a) for a in (x, scale, bias))
    return run_layout(device, x, scale, bias, eps, act=act, limits=limits)[0]


@pytest.mark.parametrize("dtype", [F32, F16])
def test_same_bits_whatever_the_plan(device, rng, dtype):
    """Workgroup widths 1 to 256, loop limits that cut the sums into many dispatches, and a
    channel count beyond one workgroup's slots: the default plan's bits, the model's."""
    for shape, stats in [((3, 5, 700), (1, 5, 1)), ((70, 40), (1, 40)), ((2, 3000), (1, 1))]:
        x, scale, bias = problem(rng, shape, stats, dtype, loc=2.0)
        want = model(x, scale, bias, 1e-5)
        same_bits(batch_normalization_training(x, scale, bias, 1e-5, device=device), want)
        for limits in (Limits(local_size=1, max_local_size=1), Limits(local_size=32),
                       Limits(local_size=64, max_loop_iterations=2000),
                       Limits(local_size=256, max_workgroups=3)):
            same_bits(run_desc(device, x, scale, bias, 1e-5, limits), want)


def run_layout(device, x, scale, bias, eps, fused=None, act=None, y_strides=None,
               limits=Limits(local_size=64)):
    """The operator over X as given (its strides kept), Output laid out by `y_strides`
    (None: packed) and FusedAdd `fused` (uploaded with its own strides), planned under
    `limits` (by default 64 lanes wide on every device), every output NaN before: the outputs
    and the road Output took (output_road)."""
    tx, ts, tb = (device.upload(a) for a in (x, scale, bias))
    tf = device.upload(fused) if fused is not None else None
    ty = device.empty(TensorDesc(tx.desc.data_type, x.shape, y_strides))
    desc = BatchNormalizationTrainingDesc(tx.desc, ts.desc, tb.desc, tf and tf.desc, ty.desc,
                                          ts.desc, ts.desc, eps, act)
    op = device.compile(desc, limits=limits)
    outs = [ty] + [device.empty(ts.desc) for _ in range(2)]
    for t, shape in zip(outs, (x.shape, scale.shape, scale.shape)):
        t.write(np.full(shape, np.nan, x.dtype))
    op(input_tensor=tx, scale_tensor=ts, bias_tensor=tb, output_tensor=ty,
       output_mean_tensor=outs[1], output_variance_tensor=outs[2],
       **({} if tf is None else {"fused_add_tensor": tf}))
    got = [t.numpy() for t in outs]
    op.close()
    return got, output_road(op.plan)


# The two roads of Output: OUTPUT_HERE (the sums kernel's items) and the element-wise pass.
ROADS = ("here", "element-wise")


def output_road(plan):
    """Which road a plan's Output takes (each sums dispatch checked alike)."""
    sums = [dict(d.constants)["OUTPUT_HERE"] for d in plan.dispatches
            if d.kernel == "batch_normalization_training_sums"]
    others = {d.kernel for d in plan.dispatches} - {"batch_normalization_training_sums"}
    assert others in (set(), {"batch_normalization_training_output"})
    assert set(sums) == {not others}
    return "element-wise" if others else "here"


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape,stats,layout,here", [
    ((4, 6, 8, 10), (1, 6, 1, 1), "packed", (F32, F16)),  # float16 in pairs
    ((3, 5, 7, 11), (1, 5, 1, 1), "packed", (F32,)),  # runs of 77: float16 halves alone
    ((4, 9, 10, 6), (1, 1, 1, 6), "packed", ()),  # channels innermost: 8 lanes, 4 groups
    ((2, 2, 2, 6), (1, 1, 1, 6), "packed", (F32,)),  # channels innermost, one group
    ((2, 3000), (1, 1), "packed", ()),  # one channel of 6000: several groups
    ((1, 1, 1), (1, 1, 1), "packed", (F32,)),
    ((3, 5, 257), (1, 5, 1), "strided", (F32,)),  # X, Output and FusedAdd strided alike
    ((3, 5, 257), (1, 5, 1), "output packed", ()),  # Output laid out unlike X
])
def test_output_roads(device, rng, monkeypatch, dtype, shape, stats, layout, here):
    """The sums kernel writes Output itself (OUTPUT_HERE) where its items take their channels
    whole, a chunk (or pair) a lane, Output and FusedAdd are laid out as X, and float16 comes
    in pairs (`here` lists the types); else the element-wise pass does. The model's bits on
    each road that the case allows, with and without FusedAdd and ReLU."""
    from pyvkgrad.ops import _batch_normalization_sums as sums
    x, scale, bias = problem(rng, shape, stats, dtype, loc=1.0)
    fused = rng.standard_normal(shape).astype(dtype)
    if layout != "packed":
        x, fused = strided_view(rng, shape, dtype), strided_view(rng, shape, dtype)
    y_strides = device.upload(x).desc.element_strides if layout == "strided" else None
    for output_here in (True, False):
        monkeypatch.setattr(sums, "OUTPUT_HERE", output_here)
        device.cache_clear()
        for f, act in ((None, None), (fused, RELU)):
            want = model(np.ascontiguousarray(x), scale, bias, 1e-5,
                         None if f is None else np.ascontiguousarray(f), act)
            got, taken = run_layout(device, x, scale, bias, 1e-5, f, act, y_strides)
            same_bits(got, want)
            assert taken == ("here" if output_here and dtype in here else "element-wise")
    monkeypatch.undo()
    device.cache_clear()


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape,stats,vector", [
    ((4, 6, 7, 7), None, {F32: (False, 49), F16: (False, 49)}),  # two channels a vector
    ((8, 6, 5), None, {F32: (False, 5), F16: (False, 0)}),  # float16: a channel an element
    ((4, 6, 9), None, {F32: (False, 9), F16: (False, 9)}),
    ((4, 6, 12), None, {F32: (True, 12), F16: (False, 12)}),
    ((2, 6, 16), None, {F32: (True, 16), F16: (True, 16)}),  # a vector in one channel
    # channels over axes 0 and 2: the channel index steps back after every 4 runs
    ((2, 5, 4, 9), (2, 1, 4, 1), {F32: (False, 9), F16: (False, 9)}),
    ((4, 2, 2, 5, 7), (1, 2, 2, 1, 1), {F32: (False, 35), F16: (False, 35)}),  # rank 5
])
def test_vectors_across_channels(device, rng, monkeypatch, dtype, shape, stats, vector):
    """The element-wise pass's 16-byte vectors: in one channel (SAME), in two at most (RUN:
    the first element's and the last's coefficients, read once each), or a channel per
    element; the model's bits on each, with and without FusedAdd and ReLU, and the road the
    plan takes."""
    from pyvkgrad.ops import _batch_normalization_sums as sums
    monkeypatch.setattr(sums, "OUTPUT_HERE", False)
    device.cache_clear()
    stats = stats or (1, shape[1]) + (1,) * (len(shape) - 2)
    x, scale, bias = problem(rng, shape, stats, dtype, loc=1.0)
    fused = rng.standard_normal(shape).astype(dtype)
    for f, act in ((None, None), (fused, RELU)):
        got, _ = run_layout(device, x, scale, bias, 1e-5, f, act)
        same_bits(got, model(x, scale, bias, 1e-5, f, act))
        xd, sd = (TensorDesc(DataType.from_numpy(dtype, "test", "dtype"), s)
                  for s in (shape, stats))
        fd = xd if f is not None else None
        plan = BatchNormalizationTrainingDesc(xd, sd, sd, fd, xd, sd, sd, 1e-5, act).plan(
            Limits(local_size=64))
        (c,) = [dict(d.constants) for d in plan.dispatches
                if d.kernel == "batch_normalization_training_output"]
        assert (c["VEC"], c["SAME"], c["RUN"]) == (8 if dtype == F16 else 4,) + vector[dtype]
    monkeypatch.undo()
    device.cache_clear()


def same_values(got, want, zero_signs=True):
    """same_bits, but any NaN for a NaN and (`zero_signs`) either zero for a zero: NaN payloads
    and the signs of zero results lie outside the contract (docs/semantics.md §17)."""
    def canonical(a):
        a = np.where(np.isnan(a), a.dtype.type(np.nan), a)
        return np.where(a == 0, a.dtype.type(0), a).astype(a.dtype) if zero_signs else a
    same_bits([canonical(g) for g in got], [canonical(w) for w in want])


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_non_finite_on_every_road(device, rng, monkeypatch, road, dtype):
    """NaN, +-Inf and -0 in X on each road of Output, with and without ReLU: the model's
    values (a poisoned channel's Variance and Output NaN, ReLU keeping NaN)."""
    from pyvkgrad.ops import _batch_normalization_sums as sums
    x, scale, bias = problem(rng, (4, 3, 40), (1, 3, 1), dtype)
    x[2, 0, 7], x[1, 1, 9], x[0, 1, 3], x[3, 2, 0] = np.nan, np.inf, -np.inf, -0.0
    monkeypatch.setattr(sums, "OUTPUT_HERE", road == "here")
    device.cache_clear()
    for act in (None, RELU):
        got, taken = run_layout(device, x, scale, bias, 1e-5, None, act)
        assert taken == road
        same_values(got, model(x, scale, bias, 1e-5, None, act))
        assert np.isnan(got[2][0, :2, 0]).all() and np.isnan(got[0][:, :2]).all()
    monkeypatch.undo()
    device.cache_clear()


def test_exact_total_extremes(device, rng):
    """The exact totals' rounding at its ends: chunk sums finite but their total beyond
    float32 (Mean +Inf and -Inf), large terms of both signs that cancel far below their size,
    and a total of exactly 0 (the model's values; NaN payloads aside)."""
    n = 2048
    x = np.zeros((4, n), F32)
    x[0] = 2e37
    x[0, 0:512:32] = 0  # chunk (0, 0): shift 0, so a = X and every other chunk sums to 3.2e38
    x[1] = -x[0]
    x[2] = rng.choice([-1.0, 1.0], n).astype(F32) * F32(3e37) + rng.standard_normal(n)
    x[3, : n // 2], x[3, n // 2:] = 1.5, -1.5  # a sum of exactly 0 (shift 0: chunk (0, 0) is 0)
    x[3, 0:512:32] = x[3, n // 2:n // 2 + 512:32] = 0
    scale, bias = np.ones((4, 1), F32), np.zeros((4, 1), F32)
    got = batch_normalization_training(x, scale, bias, 1e-5, device=device)
    same_values(got, model(x, scale, bias, 1e-5))
    assert got[1][0, 0] == np.inf and got[1][1, 0] == -np.inf and got[1][3, 0] == 0


def test_exact_total_far_ends(device, rng):
    """The exact totals' rounding beyond test_exact_total_extremes: a total of 2^139 or more
    (its top digit 18 or above: +-Inf at once), and totals below 2^-117 (top digit 1 or 0:
    the rounding's digits below digit 0 are zeros), some cancelling to far below their
    terms. Every intermediate stays normal or exactly 0, so any device gives the model's
    bits (docs/semantics.md §17: subnormal intermediates are the device's)."""
    n = 40960  # 2560 chunks of 16
    x = np.full((2, n), 2e37, F32)
    x[:, 0:512:32] = 0  # chunk (0, 0): shift 0; every other chunk sums to 3.2e38
    x[1] = -x[1]
    ones, zeros = np.ones((2, 1), F32), np.zeros((2, 1), F32)
    got = batch_normalization_training(x, ones, zeros, 1e-5, device=device)
    with np.errstate(over="ignore", invalid="ignore"):  # the model's a^2 and Variance
        want = model(x, ones, zeros, 1e-5)
    same_values(got, want)
    assert got[1][0, 0] == np.inf and got[1][1, 0] == -np.inf
    # n = 64: chunk j holds elements j and j + 32 (j < 32), one sign a chunk, so the chunk sums
    # are normal and only the exact total cancels; Scale 0 keeps Output clear of X - Mean.
    n = 64
    signs = np.where(rng.random((4, 32)) < 0.5, F32(-1), F32(1))
    x = (np.tile(signs, 2) * rng.uniform(2e-38, 4e-38, (4, n))).astype(F32)
    x[:, 0] = x[:, 32] = 0  # chunk (0, 0): shift 0
    x[3, 1:32], x[3, 33:] = x[2, 1:32], x[2, 33:]
    x[3, 1] = -x[3, 1]  # rows 2 and 3: totals that differ by two terms
    scale, bias = np.zeros((4, 1), F32), rng.standard_normal((4, 1)).astype(F32)
    got = batch_normalization_training(x, scale, bias, 1e-5, device=device)
    same_bits(got, model(x, scale, bias, 1e-5))
    totals = np.abs(x.astype(np.float64).sum(axis=1))
    assert np.all(totals < 2.0**-117) and np.all(got[1] != 0)


def _paired(desc, limits):
    return [dict(d.constants)["PAIRED"] for d in desc.plan(limits).dispatches
            if d.kernel == "batch_normalization_training_sums"]


@pytest.mark.parametrize("shape,stats,strides,paired", [
    ((4, 6, 8, 10), (1, 6, 1, 1), None, True),  # NCHW, a run of 80
    ((3, 5, 7, 11), (1, 5, 1, 1), None, False),  # a run of 77: odd
    ((2, 3000), (1, 1), None, True),  # one run of 6000
    ((3, 2, 522), (1, 2, 1), None, True),  # n = 1566: a last block of 30 elements
    ((5, 3, 2), (1, 3, 1), None, True),  # runs of 2
    ((1, 1, 2), (1, 1, 1), None, True),  # one pair
    ((3, 7, 34), (1, 7, 1), None, True),  # chunks that cross runs
    ((4, 7, 10), (1, 7, 1), (80, 11, 1), False),  # the channel's stride odd
    ((4, 7, 10), (1, 7, 1), (71, 10, 1), False),  # the outer reduced stride odd
    ((4, 7, 10), (1, 7, 1), (84, 12, 1), True),  # gaps, every stride even
    ((6, 4, 10), (1, 4, 1), (10, 0, 1), True),  # a broadcast channel (stride 0)
])
def test_float16_pairs(device, rng, monkeypatch, shape, stats, strides, paired):
    """Float16 chunks in pairs (the sums kernel's PAIRED: one word loaded gives an element of
    two chunks) where the innermost reduced dimension is contiguous and even and every other
    stride even: the model's bits, with pairs and without, for several plans and views."""
    from pyvkgrad.ops import _batch_normalization_sums as sums
    if strides is None:
        x = (rng.standard_normal(shape) + 2.0).astype(F16)
    else:
        span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
        base = (rng.standard_normal(span) + 2.0).astype(F16)
        x = np.lib.stride_tricks.as_strided(base, shape, tuple(2 * s for s in strides))
    scale, bias = (rng.standard_normal(stats).astype(F16) for _ in range(2))
    want = model(np.ascontiguousarray(x), scale, bias, 1e-5)
    xd = TensorDesc(DataType.FLOAT16, shape, strides)
    sd = TensorDesc(DataType.FLOAT16, stats)
    desc = BatchNormalizationTrainingDesc(xd, sd, sd, None, TensorDesc(DataType.FLOAT16, shape),
                                          sd, sd, 1e-5)
    assert set(_paired(desc, Limits())) == {paired}
    device.cache_clear()  # no plan made before, with or without pairs
    same_bits(batch_normalization_training(x, scale, bias, 1e-5, device=device), want)
    if strides is None:
        for limits in (Limits(local_size=1, max_local_size=1),
                       Limits(local_size=64, max_loop_iterations=2000),
                       Limits(local_size=256, max_workgroups=3)):
            same_bits(run_desc(device, x, scale, bias, 1e-5, limits), want)
    monkeypatch.setattr(sums, "PAIR_HALVES", False)
    assert set(_paired(desc, Limits())) == {False}
    device.cache_clear()
    same_bits(batch_normalization_training(x, scale, bias, 1e-5, device=device), want)
    monkeypatch.undo()
    device.cache_clear()  # no plan without pairs left for later tests


def test_float16_pairs_within_a_loop_limit():
    """Pairs take a lane twice a chunk's loop iterations: under a tight loop limit the plan
    takes the per-lane count that fits with pairs, or chunks one at a time where pairs do
    not fit (never refusing what chunks one at a time would plan)."""
    from pyvkgrad.ops import _batch_normalization_sums as sums
    for shape, limits in ((((1, 8_000_000), (1, 1)),
                           Limits(local_size=1, max_local_size=1, max_loop_iterations=65535)),
                          (((1, 2), (1, 1)), Limits(local_size=8, max_loop_iterations=800))):
        xd, sd = (TensorDesc(DataType.FLOAT16, s) for s in shape)
        desc = BatchNormalizationTrainingDesc(xd, sd, sd, None, xd, sd, sd, 1e-5)
        assert desc.plan(limits).dispatches  # plans, with pairs or without
    xd, sd = TensorDesc(DataType.FLOAT16, (1, 8_000_000)), TensorDesc(DataType.FLOAT16, (1, 1))
    desc = BatchNormalizationTrainingDesc(xd, sd, sd, None, xd, sd, sd, 1e-5)
    assert set(_paired(desc, Limits(local_size=1, max_local_size=1,
                                     max_loop_iterations=65535))) == {True}
    assert sums.PAIR_HALVES


def test_float16_halves_within_a_loop_limit():
    """Float16 halves one at a time never take Output here, so their items are not charged
    its loops: under a limit just above the sums' own they plan (and only Output here with
    float32 needs more)."""
    for dt, plans in ((DataType.FLOAT16, True), (DataType.FLOAT32, False)):
        xd, sd = TensorDesc(dt, (3, 5, 7, 11)), TensorDesc(dt, (1, 5, 1, 1))
        desc = BatchNormalizationTrainingDesc(xd, sd, sd, None, xd, sd, sd, 1e-5)
        limits = Limits(local_size=64, max_loop_iterations=575)
        if plans:
            assert output_road(desc.plan(limits)) == "element-wise"
        else:
            with pytest.raises(RuntimeError, match="loop iterations"):
                desc.plan(limits)


@pytest.mark.parametrize("shape,road", [((64, 8, 1000), "element-wise"),
                                        ((64, 32, 50), "here")])
def test_plan_bounds_its_loops(shape, road):
    """Under a small loop limit the sums and the statistics split into several dispatches, each
    within the limit's share, on each road of Output."""
    x = TensorDesc(DataType.FLOAT32, shape)
    s = TensorDesc(DataType.FLOAT32, (1, shape[1], 1))
    desc = BatchNormalizationTrainingDesc(x, s, s, None, x, s, s, 1e-5)
    plan = desc.plan(Limits(max_loop_iterations=3000, max_workgroups=4))
    kernels = [d.kernel for d in plan.dispatches]
    assert kernels.count("batch_normalization_training_sums") > 1
    assert output_road(plan) == road


# ---- bad input -----------------------------------------------------------------------------------

def test_bad_input_names_operator_and_field(device):
    x = np.zeros((2, 3, 4), F32)
    s = np.ones((1, 3, 1), F32)
    with pytest.raises(ValueError, match="BATCH_NORMALIZATION_TRAINING: ScaleTensor.Sizes"):
        batch_normalization_training(x, np.ones((1, 2, 1), F32), np.ones((1, 2, 1), F32), 0.1,
                                     device=device)
    with pytest.raises(ValueError, match="BiasTensor.Sizes"):
        batch_normalization_training(x, s, np.ones((1, 1, 1), F32), 0.1, device=device)
    with pytest.raises(ValueError, match="FusedAddTensor.Sizes"):
        batch_normalization_training(x, s, s, 0.1, fused_add=np.zeros((2, 3, 5), F32),
                                     device=device)
    with pytest.raises(ValueError, match="Epsilon"):
        batch_normalization_training(x, s, s, -1.0, device=device)
    with pytest.raises(ValueError, match="Epsilon"):
        batch_normalization_training(x, s, s, float("nan"), device=device)
    with pytest.raises(ValueError, match="FusedActivation"):
        batch_normalization_training(x, s, s, 0.1, fused_activation="ACTIVATION_SIGMOID",
                                     device=device)
    with pytest.raises(ValueError, match="FusedActivation"):
        batch_normalization_training(x, s, s, 0.1, fused_activation="relu", device=device)
    with pytest.raises((TypeError, ValueError), match="BiasTensor"):
        batch_normalization_training(x, s, s.astype(F16), 0.1, device=device)
    with pytest.raises(TypeError, match="BATCH_NORMALIZATION_TRAINING: InputTensor"):
        batch_normalization_training(x.astype(np.int32), s, s, 0.1, device=device)
