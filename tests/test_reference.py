"""Tests of the float64 reference oracle (pyvkgrad/reference.py) against the worked examples of
dml-semantics.md section 10 and against properties (adjoint identity, finite differences)."""

import itertools

import numpy as np
import pytest

from pyvkgrad import reference as ref

NAN, INF = np.nan, np.inf
D = (0.5, -0.5)  # default (InputPixelOffset, OutputPixelOffset)


# ------------------------------------------------------------------------------------------
# ReluGrad (10.2)
# ------------------------------------------------------------------------------------------


def test_rl1():
    x = [-2, -0.0, 0, 1e-7, 3, NAN, INF, -INF]
    dx = ref.activation_relu_grad(x, np.arange(1, 9))
    np.testing.assert_array_equal(dx, [0, 0, 0, 4, 5, 0, 7, 0])
    assert dx.dtype == np.float64
    # Dropped elements are +0.0, including for X = -0.0 and X = NaN.
    assert not np.signbit(dx[[0, 1, 2, 5, 7]]).any()


def test_rl2_nan_gradient_is_selected_not_multiplied():
    dx = ref.activation_relu_grad([1, -1, 2, 0], [NAN, NAN, 5, -5])
    np.testing.assert_array_equal(dx, [NAN, 0, 5, 0])
    assert not np.signbit(dx[[1, 3]]).any()


def test_relu_grad_passes_negative_zero_and_inf_where_x_positive():
    dx = ref.activation_relu_grad([1, 1, -1], [-0.0, -INF, -INF])
    np.testing.assert_array_equal(dx, [0, -INF, 0])
    assert np.signbit(dx[0]) and not np.signbit(dx[2])


def test_rl3_float16():
    dx = ref.activation_relu_grad(np.array([0.5, -0.5], np.float16),
                                  np.array([65504, 1], np.float16))
    np.testing.assert_array_equal(dx, [65504, 0])
    assert dx.dtype == np.float64


def test_rl4_broadcast_strides():
    data = np.array([-1.0, 2.0, 0.0])
    x = np.lib.stride_tricks.as_strided(data, shape=(2, 3), strides=(0, data.itemsize))
    dy = np.array([[1, 2, 3], [4, 5, 6]], np.float64)
    dx = ref.activation_relu_grad(x, dy)
    np.testing.assert_array_equal(dx, [[0, 2, 0], [0, 5, 0]])
    np.testing.assert_array_equal(data, [-1, 2, 0])  # input untouched


# ------------------------------------------------------------------------------------------
# Resample forward (10.3) and grad (10.4, R-doc column)
# ------------------------------------------------------------------------------------------

NN, LIN = "nearest_neighbor", "linear"
SEED = [[1.0, 2.0], [3.0, 4.0]]


def params(mode, scales, in_offs, out_offs, rd):
    """The resample functions' keyword arguments."""
    return dict(interpolation_mode=mode, scales=scales, input_pixel_offsets=in_offs,
                output_pixel_offsets=out_offs, rounding_direction=rd)


def fwd(x, out, mode, scales, offs=D, rd=None):
    x = np.asarray(x, np.float64) if not isinstance(x, np.ndarray) else x
    n = x.ndim
    return ref.resample1(x, out, **params(mode, scales, [offs[0]] * n, [offs[1]] * n, rd))


def grad(dy, in_sizes, mode, scales, offs=D, rd=None):
    dy = np.asarray(dy, np.float64)
    n = dy.ndim
    return ref.resample_grad(dy, in_sizes, **params(mode, scales, [offs[0]] * n, [offs[1]] * n,
                                                      rd))


# (id, mode, input, out sizes, scales, offsets, rounding, expected forward, dY, expected dX)
RESAMPLE_CASES = [
    ("R-1/RG-2", NN, SEED, (4, 4), (2, 2), D, None,
     [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]],
     np.arange(16.0).reshape(4, 4), [[10, 18], [42, 50]]),
    ("R-2/RG-1 seed", NN, SEED, (1, 3), (0.5, 1.5), (0.5, 0), None,
     [[1, 1, 2]], [[4, 5, 6]], [[9, 6], [0, 0]]),
    ("R-2b", NN, SEED, (1, 3), (0.5, 1.5), D, None,
     [[3, 4, 4]], [[4, 5, 6]], [[0, 0], [4, 11]]),
    ("seed decreasing", NN, SEED, (1, 3), (0.5, 1.5), D, "decreasing",
     [[1, 1, 2]], [[4, 5, 6]], [[9, 6], [0, 0]]),
    ("R-3/RG-3", NN, [10, 20, 30, 40], (2,), (0.5,), D, None,
     [20, 40], [1, 2], [0, 1, 0, 2]),
    ("R-4/RG-12", NN, [10, 20, 30], (4,), (4 / 3,), D, None,
     [10, 20, 20, 30], [1, 2, 3, 4], [1, 5, 4]),
    ("R-5", NN, [10, 20, 30], (7,), (7 / 3,), (0, 0), None,
     [10, 10, 20, 20, 30, 30, 30], None, None),
    ("R-6/RG-11", NN, [10, 20, 30], (7,), (7 / 3,), (0.5, 0), None,
     [10, 10, 10, 20, 20, 30, 30], np.arange(1.0, 8), [6, 9, 13]),
    ("R-7/RG-4", LIN, [1, 2], (4,), (2,), D, None,
     [1, 1.25, 1.75, 2], [1, 2, 3, 4], [3.25, 6.75]),
    ("R-8/RG-6", LIN, SEED, (4, 4), (2, 2), D, None,
     [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5], [3, 3.25, 3.75, 4]],
     np.arange(16.0).reshape(4, 4), [[12.5, 19.5], [40.5, 47.5]]),
    ("R-8/RG-5", LIN, SEED, (4, 4), (2, 2), D, None,
     None, np.ones((4, 4)), [[4, 4], [4, 4]]),
    ("R-9/RG-7", LIN, [1, 2, 3], (5,), (2,), (0, 0), None,
     [1, 1.5, 2, 2.5, 3], [1, 2, 3, 4, 5], [2, 6, 7]),
    ("R-10/RG-8", LIN, [1, 2, 3, 4], (2,), (0.5,), D, None,
     [1.5, 3.5], [1, 2], [0.5, 0.5, 1, 1]),
    ("R-12", NN, [1, 2, 3, 4], (2,), (1,), D, None, [1, 2], None, None),
    ("R-13/RG-10", LIN, [1, 2, 3, 4], (6,), (1,), D, None,
     [1, 2, 3, 4, 4, 4], [1, 2, 3, 4, 5, 6], [1, 2, 3, 15]),
    ("R-14/RG-13", LIN, np.arange(6.0).reshape(2, 3), (3, 5), (1.5, 5 / 3), D, None,
     [[0, 0.4, 1, 1.6, 2], [1.5, 1.9, 2.5, 3.1, 3.5], [3, 3.4, 4, 4.6, 5]],
     np.ones((3, 5)), [[2.4, 2.7, 2.4], [2.4, 2.7, 2.4]]),
    ("R-11/RG-9", LIN, np.array([0.0, 10.0]).reshape(1, 2, 1, 1), (1, 4, 1, 1), (1, 2, 1, 1),
     D, None, np.array([0, 2.5, 7.5, 10]).reshape(1, 4, 1, 1),
     np.ones((1, 4, 1, 1)), np.array([2.0, 2.0]).reshape(1, 2, 1, 1)),
    ("R-16", NN, np.array([1.0, 2, 3]).reshape(1, 3, 1, 1), (1, 2, 1, 1), (1, 2 / 3, 1, 1),
     D, None, np.array([1.0, 3]).reshape(1, 2, 1, 1), None, None),
    ("R2-1", NN, [10, 20, 30, 40], (2,), (0.5,), (1.0, -0.5), "increasing",
     [10, 30], [1, 2], [1, 0, 2, 0]),
]


@pytest.mark.parametrize("case", RESAMPLE_CASES, ids=[c[0] for c in RESAMPLE_CASES])
def test_resample_vectors(case):
    _, mode, x, out, scales, offs, rd, y_exp, dy, dx_exp = case
    x = np.asarray(x, np.float64)
    if y_exp is not None:
        y = fwd(x, out, mode, scales, offs, rd)
        assert y.shape == tuple(out) and y.dtype == np.float64
        np.testing.assert_allclose(y, y_exp, rtol=1e-6, atol=1e-12)
    if dy is not None:
        dx = grad(dy, x.shape, mode, scales, offs, rd)
        assert dx.shape == x.shape and dx.dtype == np.float64
        np.testing.assert_allclose(dx, dx_exp, rtol=1e-6, atol=1e-12)


def view4(a):
    """The spec's 1-D view {1,1,1,W}."""
    return np.asarray(a, np.float64).reshape(1, 1, 1, -1)


@pytest.mark.parametrize("mode,x,out,s,offs,y_exp,dy,dx_exp", [
    (NN, [10, 20, 30, 40], 2, 0.5, D, [20, 40], [1, 2], [0, 1, 0, 2]),          # R-3 / RG-3
    (LIN, [1, 2], 4, 2.0, D, [1, 1.25, 1.75, 2], [1, 2, 3, 4], [3.25, 6.75]),  # R-7 / RG-4
    (LIN, [1, 2, 3], 5, 2.0, (0, 0), [1, 1.5, 2, 2.5, 3], [1, 2, 3, 4, 5], [2, 6, 7]),
])
def test_resample_1d_vectors_through_4d_view(mode, x, out, s, offs, y_exp, dy, dx_exp):
    x4 = view4(x)
    y = fwd(x4, (1, 1, 1, out), mode, (1, 1, 1, s), offs)
    np.testing.assert_allclose(y, view4(y_exp), rtol=1e-6)
    dx = grad(view4(dy), x4.shape, mode, (1, 1, 1, s), offs)
    np.testing.assert_allclose(dx, view4(dx_exp), rtol=1e-6)


def test_seed_example_4d_view_both_ways():
    x = np.array(SEED).reshape(1, 1, 2, 2)
    dy = np.array([4.0, 5, 6]).reshape(1, 1, 1, 3)
    for offs, rd in (((0.5, 0.0), None), (D, "decreasing")):
        y = fwd(x, (1, 1, 1, 3), NN, (1, 1, 0.5, 1.5), offs, rd)
        np.testing.assert_array_equal(y.ravel(), [1, 1, 2])
        dx = grad(dy, (1, 1, 2, 2), NN, (1, 1, 0.5, 1.5), offs, rd)
        np.testing.assert_array_equal(dx.reshape(2, 2), [[9, 6], [0, 0]])


def test_r15_rg14_linear_4d():
    x = np.arange(16.0).reshape(2, 2, 2, 2)
    y = fwd(x, (3, 3, 3, 3), LIN, (1.5,) * 4)
    np.testing.assert_allclose(y[0, 0, 0, :], [0, 0.5, 1], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(y[1, 1, 1, 1], 7.5, rtol=1e-6)
    np.testing.assert_allclose(y[2, 2, 2, 2], 15, rtol=1e-6)
    np.testing.assert_allclose(y.sum(), 607.5, rtol=1e-6)
    dx = grad(np.ones((3, 3, 3, 3)), (2, 2, 2, 2), LIN, (1.5,) * 4)
    np.testing.assert_allclose(dx, np.full((2, 2, 2, 2), 5.0625), rtol=1e-6)


def test_r17_float16_input_exact():
    y = fwd(np.array([1, 2], np.float16), (4,), LIN, (2,))
    np.testing.assert_array_equal(y, [1, 1.25, 1.75, 2])


def test_coordinates_are_float32():
    # Align-corners 8 -> 3, Scale 2/7, offsets 0/0: x(1) = 1/float32(2/7) = 3.4999998 in float32
    # (3.5 exactly in real arithmetic), so round-half-up picks 3, not 4 (docs/semantics.md §6.2).
    y = fwd(np.arange(8.0), (3,), NN, (2 / 7,), (0, 0))
    np.testing.assert_array_equal(y, [0, 3, 7])


def test_resample_does_not_modify_input():
    x = np.arange(6.0).reshape(2, 3)
    before = x.copy()
    fwd(x, (3, 5), LIN, (1.5, 5 / 3))
    grad(x, (1, 2), LIN, (0.7, 0.6))
    np.testing.assert_array_equal(x, before)


def brute_force_resample(x, out, mode, scales, in_offs, out_offs, rd):
    """Direct per-output evaluation of docs/semantics.md §3.1 (2^D taps), independent of axis_weights."""
    x = np.asarray(x, np.float64)
    y = np.zeros(out)
    for o in itertools.product(*[range(n) for n in out]):
        taps = []  # per dimension: list of (index, weight)
        for d in range(x.ndim):
            c = (np.float32(o[d]) - np.float32(out_offs[d])) / np.float32(scales[d]) \
                - np.float32(in_offs[d])
            last = x.shape[d] - 1
            if mode == NN:
                r = {None: np.floor(float(c) + 0.5), "decreasing": np.floor(c),
                     "increasing": np.ceil(c)}[rd]
                taps.append([(int(min(max(r, 0), last)), 1.0)])
            else:
                fl = np.floor(c)
                f = np.float32(c - fl)
                taps.append([(int(min(max(fl, 0), last)), float(np.float32(1) - f)),
                             (int(min(max(fl + 1, 0), last)), float(f))])
        for combo in itertools.product(*taps):
            idx = tuple(i for i, _ in combo)
            y[o] += np.prod([w for _, w in combo]) * x[idx]
    return y


def random_resample_params(rng, rank):
    in_shape = tuple(int(v) for v in rng.integers(1, 6, rank))
    scales = [float(v) for v in rng.uniform(0.3, 3.7, rank)]
    out = []
    for n, s in zip(in_shape, scales):
        o = int(rng.integers(1, 8))
        if o == round(n * s):  # make sizes that do not equal In * Scale
            o += 1
        out.append(o)
    in_offs = [float(v) for v in rng.uniform(-1, 1, rank)]
    out_offs = [float(v) for v in rng.uniform(-1, 1, rank)]
    return in_shape, tuple(out), scales, in_offs, out_offs


MODES_RD = [(NN, None), (NN, "decreasing"), (NN, "increasing"), (LIN, None)]


@pytest.mark.parametrize("mode,rd", MODES_RD)
def test_resample_forward_matches_brute_force(mode, rd):
    rng = np.random.default_rng(1)
    for rank in (1, 2, 3, 4):
        for _ in range(3):
            in_shape, out, scales, in_offs, out_offs = random_resample_params(rng, rank)
            x = rng.standard_normal(in_shape)
            y = ref.resample1(x, out, **params(mode, scales, in_offs, out_offs, rd))
            np.testing.assert_allclose(
                y, brute_force_resample(x, out, mode, scales, in_offs, out_offs, rd),
                rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,rd", MODES_RD)
def test_rg_p_adjoint_and_sum(mode, rd):
    rng = np.random.default_rng(2)
    for trial in range(40):
        rank = 1 + trial % 4
        in_shape, out, scales, in_offs, out_offs = random_resample_params(rng, rank)
        x = rng.standard_normal(in_shape)
        dy = rng.standard_normal(out)
        y = ref.resample1(x, out, **params(mode, scales, in_offs, out_offs, rd))
        dx = ref.resample_grad(dy, in_shape, **params(mode, scales, in_offs, out_offs, rd))
        assert y.shape == out and dx.shape == in_shape
        lhs, rhs = np.sum(y * dy), np.sum(x * dx)
        scale = np.sum(np.abs(y * dy)) + np.sum(np.abs(x * dx))
        assert abs(lhs - rhs) <= 1e-12 * scale
        # Sum preservation: every forward output's weights sum to 1.  Nearest: exactly.  Linear:
        # the weights 1 - f and f are float32 values, so a row sums to 1 within 2^-24 per axis.
        tol = 0 if mode == NN else 4 * rank * 2.0 ** -24 * np.sum(np.abs(dy))
        assert abs(np.sum(dx) - np.sum(dy)) <= tol + 1e-12 * np.sum(np.abs(dy))


@pytest.mark.parametrize("mode,rd", MODES_RD)
def test_resample_grad_is_transpose_of_forward_jacobian(mode, rd):
    rng = np.random.default_rng(3)
    for rank in (1, 2, 3):
        in_shape, out, scales, in_offs, out_offs = random_resample_params(rng, rank)
        n_in = int(np.prod(in_shape))
        # Jacobian of the forward, column by column (forward applied to unit vectors).
        jac = np.stack([ref.resample1(e.reshape(in_shape), out,
                                      **params(mode, scales, in_offs, out_offs, rd)).ravel()
                        for e in np.eye(n_in)], axis=1)
        dy = rng.standard_normal(out)
        dx = ref.resample_grad(dy, in_shape, **params(mode, scales, in_offs, out_offs, rd))
        np.testing.assert_allclose(dx.ravel(), jac.T @ dy.ravel(), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------
# BatchNorm (10.5)
# ------------------------------------------------------------------------------------------

BN_X = np.array([1, 3, 2, 6, 5, 7, 4, 0], np.float64).reshape(2, 2, 1, 2)
BN_DY = np.arange(1, 9, dtype=np.float64).reshape(2, 2, 1, 2)
BN_SCALE = np.array([1.0, 2.0]).reshape(1, 2, 1, 1)
BN_BIAS = np.array([0.0, 1.0]).reshape(1, 2, 1, 1)
STAT = (1, 2, 1, 1)


def test_bnt1():
    y, mean, var = ref.batch_normalization_training(BN_X, BN_SCALE, BN_BIAS, 4)
    np.testing.assert_allclose(y.ravel(), [-1, -1 / 3, 1 / 3, 3, 1 / 3, 1, 5 / 3, -1], rtol=1e-6)
    assert mean.shape == STAT and var.shape == STAT
    np.testing.assert_allclose(mean.ravel(), [4, 3], rtol=1e-6)
    np.testing.assert_allclose(var.ravel(), [5, 5], rtol=1e-6)


def test_bntg1():
    _, mean, var = ref.batch_normalization_training(BN_X, BN_SCALE, BN_BIAS, 4)
    r = ref.batch_normalization_training_grad(BN_X, BN_DY, mean, var, BN_SCALE, 4)
    assert isinstance(r, ref.BatchNormGradResult)
    np.testing.assert_allclose(
        r.output_gradient.ravel(),
        [-1 / 3, -1 / 3, -49 / 27, -5 / 9, 1 / 3, 1 / 3, 31 / 27, 11 / 9], rtol=1e-6)
    np.testing.assert_allclose(r.output_scale_gradient.ravel(), [6, -8 / 3], rtol=1e-6)
    np.testing.assert_allclose(r.output_bias_gradient.ravel(), [14, 22], rtol=1e-6)
    assert r.output_scale_gradient.shape == STAT and r.output_bias_gradient.shape == STAT


def test_bng1():
    mean, var = np.array([4.0, 3]).reshape(STAT), np.array([5.0, 5]).reshape(STAT)
    dx, ds, db = ref.batch_normalization_grad(BN_X, BN_DY, mean, var, BN_SCALE, 4)
    np.testing.assert_allclose(
        dx.ravel(), [1 / 3, 2 / 3, 2, 8 / 3, 5 / 3, 2, 14 / 3, 16 / 3], rtol=1e-6)
    np.testing.assert_allclose(ds.ravel(), [6, -8 / 3], rtol=1e-6)
    np.testing.assert_allclose(db.ravel(), [14, 22], rtol=1e-6)
    assert ds.shape == STAT and db.shape == STAT


def test_bng2():
    mean, var = np.array([0.0, 1]).reshape(STAT), np.array([3.99, 0.99]).reshape(STAT)
    r = ref.batch_normalization_grad(BN_X, BN_DY, mean, var, BN_SCALE, 0.01)
    np.testing.assert_allclose(r.output_gradient.ravel(), [0.5, 1, 6, 8, 2.5, 3, 14, 16],
                               rtol=1e-6)
    np.testing.assert_allclose(r.output_scale_gradient.ravel(), [37, 36], rtol=1e-6)
    np.testing.assert_allclose(r.output_bias_gradient.ravel(), [14, 22], rtol=1e-6)


def test_bnt2_bntg2_1d():
    x = np.array([1.0, 2, 3, 6])
    y, mean, var = ref.batch_normalization_training(x, [1.0], [0.0], 0.5)
    np.testing.assert_allclose(mean, [3], rtol=1e-6)
    np.testing.assert_allclose(var, [3.5], rtol=1e-6)
    np.testing.assert_allclose(y, [-1, -0.5, 0, 1.5], rtol=1e-6)
    r = ref.batch_normalization_training_grad(x, [1.0, 0, 0, 0], mean, var, [1.0], 0.5)
    np.testing.assert_allclose(r.output_gradient, [0.25, -0.1875, -0.125, 0.0625], rtol=1e-6)
    np.testing.assert_allclose(r.output_scale_gradient, [-1], rtol=1e-6)
    np.testing.assert_allclose(r.output_bias_gradient, [1], rtol=1e-6)


def test_bng3_no_reduction():
    r = ref.batch_normalization_grad([[1.0, 2]], [[3.0, 4]], [[0.0, 1]], [[0.0, 3]], [[2.0, 2]], 1)
    np.testing.assert_allclose(r.output_gradient, [[6, 4]], rtol=1e-6)
    np.testing.assert_allclose(r.output_scale_gradient, [[3, 2]], rtol=1e-6)
    np.testing.assert_allclose(r.output_bias_gradient, [[3, 4]], rtol=1e-6)


def test_training_grad_uses_supplied_mean_only_in_scale_gradient():
    # Literal 7.4: dX recentres with mean_R(X); dScale uses the Mean argument.
    _, mean, var = ref.batch_normalization_training(BN_X, BN_SCALE, BN_BIAS, 4)
    r0 = ref.batch_normalization_training_grad(BN_X, BN_DY, mean, var, BN_SCALE, 4)
    r1 = ref.batch_normalization_training_grad(BN_X, BN_DY, mean + 1, var, BN_SCALE, 4)
    np.testing.assert_array_equal(r0.output_gradient, r1.output_gradient)
    np.testing.assert_array_equal(r0.output_bias_gradient, r1.output_bias_gradient)
    coef0 = 1 / np.sqrt(var + 4)
    np.testing.assert_allclose(r1.output_scale_gradient,
                               r0.output_scale_gradient - r0.output_bias_gradient * coef0)


# BN-P: finite differences.  (input shape, statistics shape)
BN_LAYOUTS = [
    ((2, 3, 2, 2), (1, 3, 1, 1)),  # NCHW per-channel
    ((2, 2, 2, 3), (1, 1, 1, 3)),  # NHWC-like: channel last
    ((5, 3), (1, 3)),              # 2-D {N, C}
    ((2, 3), (2, 3)),              # no reduction
]
H = 1e-6


def central_diff(f, a):
    """Gradient of scalar f at array a by central differences (a is copied, not modified)."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[i] += H
        am[i] -= H
        g[i] = (f(ap) - f(am)) / (2 * H)
    return g


def assert_close_fd(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("shape,sshape", BN_LAYOUTS, ids=["nchw", "nhwc", "nc", "none"])
def test_bn_p_training(shape, sshape):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape) * 2 + 1
    dy = rng.standard_normal(shape)
    scale = rng.uniform(0.5, 2, sshape)
    bias = rng.standard_normal(sshape)
    eps = 0.1 if sshape == shape else 1e-3  # no reduction: variance 0, sigma = sqrt(eps)

    def loss(x_=x, s_=scale, b_=bias):
        return np.sum(ref.batch_normalization_training(x_, s_, b_, eps)[0] * dy)

    _, mean, var = ref.batch_normalization_training(x, scale, bias, eps)
    r = ref.batch_normalization_training_grad(x, dy, mean, var, scale, eps)
    assert r.output_gradient.shape == shape
    assert r.output_scale_gradient.shape == sshape == r.output_bias_gradient.shape
    assert_close_fd(r.output_gradient, central_diff(lambda a: loss(x_=a), x))
    assert_close_fd(r.output_scale_gradient, central_diff(lambda a: loss(s_=a), scale))
    assert_close_fd(r.output_bias_gradient, central_diff(lambda a: loss(b_=a), bias))


@pytest.mark.parametrize("shape,sshape", BN_LAYOUTS, ids=["nchw", "nhwc", "nc", "none"])
def test_bn_p_inference(shape, sshape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape) * 2 + 1
    dy = rng.standard_normal(shape)
    mean = rng.standard_normal(sshape)
    var = rng.uniform(0.2, 3, sshape)
    scale = rng.uniform(0.5, 2, sshape)
    bias = rng.standard_normal(sshape)
    eps = 1e-3

    def loss(x_=x, s_=scale, b_=bias):
        return np.sum(ref.batch_normalization(x_, mean, var, s_, b_, eps) * dy)

    r = ref.batch_normalization_grad(x, dy, mean, var, scale, eps)
    assert r.output_gradient.shape == shape
    assert r.output_scale_gradient.shape == sshape == r.output_bias_gradient.shape
    assert_close_fd(r.output_gradient, central_diff(lambda a: loss(x_=a), x))
    assert_close_fd(r.output_scale_gradient, central_diff(lambda a: loss(s_=a), scale))
    assert_close_fd(r.output_bias_gradient, central_diff(lambda a: loss(b_=a), bias))


def test_bn_inputs_not_modified_and_float64():
    x, dy = BN_X.astype(np.float32), BN_DY.astype(np.float32)
    xc, dyc = x.copy(), dy.copy()
    _, mean, var = ref.batch_normalization_training(x, BN_SCALE, BN_BIAS, 4)
    for fn in (ref.batch_normalization_grad, ref.batch_normalization_training_grad):
        r = fn(x, dy, mean, var, BN_SCALE, 4)
        assert all(a.dtype == np.float64 for a in r)
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(dy, dyc)
