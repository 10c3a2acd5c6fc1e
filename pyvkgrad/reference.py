"""Float64 NumPy reference oracle for the operators pyvkgrad implements.

Written from the formulas of docs/semantics.md (sections 2-5) and its choices (section 6),
without looking at any GPU code, so that the two implementations stay independent.
Every function converts its inputs with ``np.asarray(x, dtype=np.float64)`` (inputs are never
modified) and returns float64 arrays. Each takes the arguments of the one-call function of its
name, with the same defaults (shared with it through pyvkgrad/defaults.py), less the execution
options (``device``, ``algorithm``) that do not change the result.

Deliberate precision choices:

* Resample coordinates are computed in float32 (docs/semantics.md §6.2), because that is what a GPU
  shader with float32 ``Scales`` does; ties such as align-corners ``1/(2/7) = 3.4999998`` therefore
  round the way the device rounds.  Everything after the coordinate (index selection on the exact
  float32 value, weight products, accumulation) is float64.
* Batch normalization is float64 throughout.
* The random generator (Philox 4x32-10) is integer arithmetic: uint64 holds the 32x32-bit
  products exactly, Python integers the 128-bit counter; it returns uint32 arrays, no float.
"""

import enum
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike

from . import defaults

__all__ = [
    "BatchNormGradResult",
    "activation_relu_grad",
    "element_wise_clip_grad",
    "element_wise_clip_grad1",
    "resample1",
    "resample_grad",
    "resample_grad1",
    "batch_normalization",
    "batch_normalization_training",
    "batch_normalization_grad",
    "batch_normalization_training_grad",
    "philox_4x32_10",
    "random_generator",
    "average_pooling_grad",
    "max_pooling_grad",
    "slice_grad",
    "local_response_normalization_grad",
]

class BatchNormGradResult(NamedTuple):
    """The oracle's BatchNorm grads: dX, dScale and dBias, float64."""

    output_gradient: np.ndarray
    output_scale_gradient: np.ndarray
    output_bias_gradient: np.ndarray

_MODES = ("nearest_neighbor", "linear")
_ROUNDING = (None, "decreasing", "increasing")

# An interpolation mode or rounding direction: its name, or DirectML's enum member.
Named = Union[str, enum.Enum]


def _f64(x):
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# ReLU grad (docs/semantics.md §2)
# --------------------------------------------------------------------------------------------


def activation_relu_grad(input: ArrayLike, input_gradient: ArrayLike) -> np.ndarray:
    """dX = (X > 0) ? dY : +0.0, element-wise (DML_ACTIVATION_RELU_GRAD).

    A select, not ``dY * (X > 0)``: NaN/Inf in dY pass through where X > 0 and give exactly +0.0
    elsewhere; X = 0, -0.0 and NaN all compare false and give +0.0.
    """
    x = _f64(input)
    dy = _f64(input_gradient)
    with np.errstate(invalid="ignore"):  # NaN > 0 is simply False
        keep = x > 0
    # 0.0 literal is +0.0, so every dropped element is a positive zero.
    return np.where(keep, dy, 0.0)


# --------------------------------------------------------------------------------------------
# Clip grads (docs/semantics.md §10)
# --------------------------------------------------------------------------------------------


def _clip_grad(x: np.ndarray, input_gradient: ArrayLike, min: float, max: float) -> np.ndarray:
    """dX = (X <= Min or X >= Max) ? +0.0 : dY on float64 values x: a select, so X = NaN (both
    comparisons false) passes dY, a NaN bound never holds, and Min >= Max zeroes every X."""
    with np.errstate(invalid="ignore"):
        clipped = (x <= min) | (x >= max)
    return np.where(clipped, 0.0, _f64(input_gradient))


def element_wise_clip_grad(input: ArrayLike, input_gradient: ArrayLike, min: float,
                           max: float) -> np.ndarray:
    """DML_ELEMENT_WISE_CLIP_GRAD: X converted to float32 (integers round to nearest even),
    compared with Min and Max as float32 (DirectML FLOATs)."""
    with np.errstate(invalid="ignore"):  # signalling float16 NaNs stay NaNs
        x = np.asarray(input).astype(np.float32).astype(np.float64)
    return _clip_grad(x, input_gradient, float(np.float32(min)), float(np.float32(max)))


def element_wise_clip_grad1(input: ArrayLike, input_gradient: ArrayLike, min: Union[int, float],
                            max: Union[int, float]) -> np.ndarray:
    """DML_ELEMENT_WISE_CLIP_GRAD1: X compared with Min and Max in its own data type (every
    value of the supported types, and the bounds, are exact in float64)."""
    return _clip_grad(_f64(input), input_gradient, float(min), float(max))


# --------------------------------------------------------------------------------------------
# Resample forward / grad (docs/semantics.md §3)
# --------------------------------------------------------------------------------------------


def _axis_coordinates(out_size, scale, in_off, out_off):
    """x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset, in float32, in this order."""
    o = np.arange(out_size).astype(np.float32)
    t = o - np.float32(out_off)
    t = t / np.float32(scale)
    return t - np.float32(in_off)  # float32 array


def axis_weights(in_size: int, out_size: int, mode: str, scale: float, in_off: float,
                 out_off: float, rounding_direction: Optional[str]) -> np.ndarray:
    """Per-dimension forward weights W[o, i] (shape [out_size, in_size], float64).

    Forward along this axis is ``y = W @ x``, its gradient ``dx = W.T @ dy``.
    Nearest: W[o, i(o)] = 1 with i(o) = clamp(round(x)) (RESAMPLE1: floor(x + 0.5), ties up;
    RESAMPLE2 "decreasing": floor(x); "increasing": ceil(x)).
    Linear: taps floor(x) with 1 - f and floor(x) + 1 with f (f, 1 - f in float32), each tap
    clamped to [0, In-1]; weights of taps that land on the same element add up.
    """
    x32 = _axis_coordinates(out_size, scale, in_off, out_off)
    # float32 -> float64 is exact, so the rounding below acts on the exact float32 coordinate
    # (a float32 "x + 0.5" could itself round a value just below a tie up to the tie).
    x = x32.astype(np.float64)
    rows = np.arange(out_size)
    w = np.zeros((out_size, in_size), dtype=np.float64)
    last = in_size - 1
    if mode == "nearest_neighbor":
        if rounding_direction is None:
            idx = np.floor(x + 0.5)
        elif rounding_direction == "decreasing":
            idx = np.floor(x)
        else:
            idx = np.ceil(x)
        # Clip in float before the int conversion so far out-of-range coordinates cannot overflow.
        idx = np.clip(idx, 0, last).astype(np.int64)
        w[rows, idx] = 1.0
    else:
        fl32 = np.floor(x32)
        f = x32 - fl32  # float32, exact (the fraction of a float32 is representable)
        w0 = (np.float32(1) - f).astype(np.float64)  # 1 - f rounded to float32, as on the device
        w1 = f.astype(np.float64)
        fl = fl32.astype(np.float64)
        i0 = np.clip(fl, 0, last).astype(np.int64)
        i1 = np.clip(fl + 1, 0, last).astype(np.int64)
        # add.at, not assignment: at a clamped edge both taps hit one element and must add.
        np.add.at(w, (rows, i0), w0)
        np.add.at(w, (rows, i1), w1)
    return w


def _name(value):
    """An interpolation mode or rounding direction as its lower-case name: the one-call
    functions take DirectML's enum members (InterpolationMode.LINEAR) as well as strings."""
    name = getattr(value, "name", value)
    return name.lower() if isinstance(name, str) else name


def _resample_args(x_sizes, y_sizes, mode, scales, in_offs, out_offs, rounding_direction):
    """Check the parameters of a resample whose input has `x_sizes` and whose output has
    `y_sizes`; returns them with the one-call functions' defaults filled in and the mode and
    rounding direction as names."""
    rank = len(x_sizes)
    if not 1 <= rank <= 4:
        raise ValueError(f"resample: rank must be 1..4, got {rank}")
    if len(y_sizes) != rank:
        raise ValueError(f"resample: sizes has {len(y_sizes)} entries, tensor rank is {rank}")
    scales, in_offs, out_offs = defaults.resample_grad(y_sizes, x_sizes, scales, in_offs,
                                                       out_offs)
    mode, rounding_direction = _name(mode), _name(rounding_direction)
    for name, arr in (("scales", scales), ("input_pixel_offsets", in_offs),
                      ("output_pixel_offsets", out_offs)):
        if len(arr) != rank:
            raise ValueError(f"resample: {name} has {len(arr)} entries, tensor rank is {rank}")
    if mode not in _MODES:
        raise ValueError(f"resample: interpolation_mode must be one of {_MODES}, got {mode!r}")
    if rounding_direction not in _ROUNDING:
        raise ValueError(f"resample: rounding_direction must be one of {_ROUNDING}, "
                         f"got {rounding_direction!r}")
    for s in scales:
        if not (np.isfinite(s) and s > 0):
            raise ValueError(f"resample: scales must be finite and > 0, got {s!r}")
    return mode, scales, in_offs, out_offs, rounding_direction


def _apply_along(mats, t):
    """Apply matrix mats[d] (shape [new_d, old_d]) along axis d of t, for every axis."""
    for d, m in enumerate(mats):
        t = np.moveaxis(np.tensordot(m, t, axes=([1], [d])), 0, d)
    return t


def resample1(input: ArrayLike, output_sizes: Sequence[int], *,
              interpolation_mode: Named = "nearest_neighbor",
              scales: Optional[Sequence[float]] = None,
              input_pixel_offsets: Optional[Sequence[float]] = None,
              output_pixel_offsets: Optional[Sequence[float]] = None,
              rounding_direction: Optional[Named] = None) -> np.ndarray:
    """Forward DML_RESAMPLE1 (DML_RESAMPLE2 when rounding_direction is given).

    out = (W_0 (x) W_1 (x) ... ) x: each dimension d is resampled by its own matrix
    W_d = axis_weights(In_d, Out_d, ...), i.e. separable nearest / N-linear interpolation.
    Defaults as resample_grad's (pyvkgrad/defaults.py): scale = output size / input size,
    half-pixel offsets.
    """
    x = _f64(input)
    mode, scales, in_offs, out_offs, rd = _resample_args(
        x.shape, output_sizes, interpolation_mode, scales, input_pixel_offsets,
        output_pixel_offsets, rounding_direction)
    mats = [axis_weights(x.shape[d], int(output_sizes[d]), mode, scales[d], in_offs[d],
                          out_offs[d], rd)
            for d in range(x.ndim)]
    return _apply_along(mats, x)


def resample_grad(input_gradient: ArrayLike, output_gradient_sizes: Sequence[int], *,
                  interpolation_mode: Named = "nearest_neighbor",
                  scales: Optional[Sequence[float]] = None,
                  input_pixel_offsets: Optional[Sequence[float]] = None,
                  output_pixel_offsets: Optional[Sequence[float]] = None,
                  rounding_direction: Optional[Named] = None) -> np.ndarray:
    """DML_RESAMPLE_GRAD (DML_RESAMPLE_GRAD1 with rounding_direction): dX = W^T dY.

    The parameters are those of the forward being differentiated (docs/semantics.md §6.1);
    input_gradient has the forward output's shape, the result has shape output_gradient_sizes
    (the forward input's).  Built from the same per-axis matrices as resample1, transposed, so it
    is the exact adjoint: <resample1(x), dY> == <x, resample_grad(dY)>.  The signature and
    defaults are pyvkgrad.resample_grad's (pyvkgrad/defaults.py), less its execution options.
    """
    dy = _f64(input_gradient)
    sizes = tuple(int(s) for s in output_gradient_sizes)
    mode, scales, in_offs, out_offs, rd = _resample_args(
        sizes, dy.shape, interpolation_mode, scales, input_pixel_offsets, output_pixel_offsets,
        rounding_direction)
    mats = [axis_weights(sizes[d], dy.shape[d], mode, scales[d], in_offs[d], out_offs[d], rd).T
            for d in range(dy.ndim)]
    return _apply_along(mats, dy)


def resample_grad1(input_gradient: ArrayLike, output_gradient_sizes: Sequence[int], *,
                   interpolation_mode: Named = "nearest_neighbor",
                   rounding_direction: Named,
                   scales: Optional[Sequence[float]] = None,
                   input_pixel_offsets: Optional[Sequence[float]] = None,
                   output_pixel_offsets: Optional[Sequence[float]] = None) -> np.ndarray:
    """DML_RESAMPLE_GRAD1: dX = W^T dY for the forward RESAMPLE2, whose nearest neighbour rounds
    x by the mandatory rounding direction ("decreasing": floor, "increasing": ceil; linear
    ignores it).  resample_grad with that direction (docs/semantics.md §12); the signature and
    defaults are pyvkgrad.resample_grad1's, less its execution options."""
    if _name(rounding_direction) not in _ROUNDING[1:]:
        raise ValueError(f"resample_grad1: rounding_direction must be one of {_ROUNDING[1:]}, "
                         f"got {rounding_direction!r}")
    return resample_grad(input_gradient, output_gradient_sizes,
                         interpolation_mode=interpolation_mode, scales=scales,
                         input_pixel_offsets=input_pixel_offsets,
                         output_pixel_offsets=output_pixel_offsets,
                         rounding_direction=rounding_direction)


# --------------------------------------------------------------------------------------------
# Batch normalization (docs/semantics.md §4 and §5)
# --------------------------------------------------------------------------------------------


def _reduced_axes(input_shape, stats_shape, what):
    """R = {d : stats size is 1}; every other stats dim must equal the input's
    (docs/semantics.md §4)."""
    if len(stats_shape) != len(input_shape):
        raise ValueError(f"batch_normalization: {what} has rank {len(stats_shape)}, "
                         f"input has rank {len(input_shape)}")
    for s, n in zip(stats_shape, input_shape):
        if s != 1 and s != n:
            raise ValueError(f"batch_normalization: {what} sizes {tuple(stats_shape)} are not "
                             f"1 or equal to input sizes {tuple(input_shape)}")
    return tuple(d for d, s in enumerate(stats_shape) if s == 1)


def batch_normalization(input: ArrayLike, mean: ArrayLike, variance: ArrayLike,
                        scale: ArrayLike, bias: ArrayLike, epsilon: float) -> np.ndarray:
    """Inference forward: Y = Scale * (X - Mean) / sqrt(Variance + Epsilon) + Bias (broadcast)."""
    x, m, v, s, b = (_f64(a) for a in (input, mean, variance, scale, bias))
    np.broadcast_shapes(x.shape, m.shape, v.shape, s.shape, b.shape)  # light check
    return s * (x - m) / np.sqrt(v + epsilon) + b


def batch_normalization_training(input: ArrayLike, scale: ArrayLike, bias: ArrayLike,
                                 epsilon: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training forward -> (output, mean, variance), statistics over R = {d : scale size is 1}.

    Mean = mean_R(X); Variance = mean_R((X - Mean)^2) (biased, docs/semantics.md §5);
    Output = Scale * (X - Mean) / sqrt(Variance + Epsilon) + Bias.  Mean/variance have the
    statistics shape (size 1 on R, input size elsewhere).
    """
    x, s, b = _f64(input), _f64(scale), _f64(bias)
    axes = _reduced_axes(x.shape, s.shape, "scale")
    mean = x.mean(axis=axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    output = s * (x - mean) / np.sqrt(variance + epsilon) + b
    return output, mean, variance


def batch_normalization_grad(input: ArrayLike, input_gradient: ArrayLike, mean: ArrayLike,
                             variance: ArrayLike, scale: ArrayLike, epsilon: float
                             ) -> BatchNormGradResult:
    """DML_BATCH_NORMALIZATION_GRAD (docs/semantics.md §4); Mean/Variance are constants.

    dX = dY * Scale / sigma;  dScale = sum_R dY * (X - Mean) / sigma;  dBias = sum_R dY,
    sigma = sqrt(Variance + Epsilon), R = {d : mean size is 1} (possibly empty: element-wise).
    """
    x, dy, m, v, s = (_f64(a) for a in (input, input_gradient, mean, variance, scale))
    axes = _reduced_axes(x.shape, m.shape, "mean")
    sigma = np.sqrt(v + epsilon)
    dx = dy * s / sigma
    # keepdims keeps size 1 on R and the input size elsewhere, i.e. exactly mean's shape.
    dscale = np.sum(dy * (x - m) / sigma, axis=axes, keepdims=True).reshape(m.shape)
    dbias = np.sum(np.broadcast_to(dy, x.shape), axis=axes, keepdims=True).reshape(m.shape)
    return BatchNormGradResult(dx, dscale, dbias)


def batch_normalization_training_grad(input: ArrayLike, input_gradient: ArrayLike,
                                      mean: ArrayLike, variance: ArrayLike, scale: ArrayLike,
                                      epsilon: float) -> BatchNormGradResult:
    """DML_BATCH_NORMALIZATION_TRAINING_GRAD, docs/semantics.md §5 followed literally (§6.7).

    Coef0 = 1/sqrt(Variance + Epsilon); Xc = X - mean_R(X); dYc = dY - mean_R(dY);
    Coef1 = dY * Xc;
    dX = Scale * Coef0 * (dYc - Xc * mean_R(Coef1) / (Variance + Epsilon));
    dScale = sum_R dY * (X - Mean) * Coef0;  dBias = sum_R dY.   R = {d : mean size is 1}.
    """
    x, dy, m, v, s = (_f64(a) for a in (input, input_gradient, mean, variance, scale))
    axes = _reduced_axes(x.shape, m.shape, "mean")
    dy = np.broadcast_to(dy, x.shape)
    coef0 = 1.0 / np.sqrt(v + epsilon)
    # Literal reading (open question 7): dX recentres X with its own mean_R(X), while dScale uses
    # the supplied Mean; the two agree when Mean comes from the training forward on the same X.
    x_centered = x - x.mean(axis=axes, keepdims=True)
    dy_centered = dy - dy.mean(axis=axes, keepdims=True)
    coef1 = dy * x_centered
    mean_coef1 = coef1.mean(axis=axes, keepdims=True)
    dx = s * coef0 * (dy_centered - x_centered * mean_coef1 / (v + epsilon))
    dscale = np.sum(dy * (x - m) * coef0, axis=axes, keepdims=True).reshape(m.shape)
    dbias = np.sum(dy, axis=axes, keepdims=True).reshape(m.shape)
    return BatchNormGradResult(dx, dscale, dbias)


# --------------------------------------------------------------------------------------------
# Random generator (docs/semantics.md §9): Philox 4x32-10, integers only
# --------------------------------------------------------------------------------------------

_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)
_WORD = 0xFFFFFFFF


def philox_4x32_10(counters, key):
    """Philox 4x32-10 of each row of `counters` ((n, 4) words, word 0 least significant) with
    `key` (k0, k1): ten rounds, the key bumped by the Weyl constants before rounds 2..10; each
    round takes the 64-bit products M0 * c0 and M1 * c2 (exact in uint64) and returns
    (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0). Returns (n, 4) uint32."""
    c = [np.asarray(counters, np.uint64)[:, i] for i in range(4)]
    k0, k1 = int(key[0]), int(key[1])
    m0, m1 = (np.uint64(m) for m in _PHILOX_MULTIPLIERS)
    word, shift = np.uint64(_WORD), np.uint64(32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_WEYL[0]) & _WORD, (k1 + _PHILOX_WEYL[1]) & _WORD
        p0, p1 = m0 * c[0], m1 * c[2]  # < 2^64: exact
        c = [(p1 >> shift) ^ c[1] ^ np.uint64(k0), p1 & word,
             (p0 >> shift) ^ c[3] ^ np.uint64(k1), p0 & word]
    return np.stack(c, axis=1).astype(np.uint32)


def _state_words(input_state):
    words = np.asarray(input_state)
    if words.dtype != np.uint32 or words.size != 6:
        raise ValueError(f"random_generator: input_state must be 6 uint32 words, got "
                         f"{words.size} of {words.dtype}")
    return [int(w) for w in words.reshape(-1)]


def random_generator(input_state, output_sizes, type="philox_4x32_10"):
    """(output, output_state) of DML_RANDOM_GENERATOR (PHILOX_4X32_10, the only type).

    State words s0..s5: counter C = s0 + 2^32 s1 + 2^64 s2 + 2^96 s3, key (s4, s5). Output
    element n (row-major over `output_sizes`, E elements) is word n mod 4 of the Philox block of
    counter (C + floor(n/4)) mod 2^128; output_state is ((C + ceil(E/4)) mod 2^128, s4, s5),
    shaped like input_state. Both uint32."""
    if _name(type) not in ("philox_4x32_10", 0):
        raise ValueError(f"random_generator: type must be philox_4x32_10, got {type!r}")
    s = _state_words(input_state)
    counter = s[0] | s[1] << 32 | s[2] << 64 | s[3] << 96
    count = int(np.prod(output_sizes, dtype=np.int64))
    blocks = -(-count // 4)
    # Counters C + b, b < 2^32: the low 64 bits wrap in uint64, their carry goes upward.
    b = np.arange(blocks, dtype=np.uint64)
    low = np.uint64(counter & (2**64 - 1)) + b
    high = np.uint64(counter >> 64) + (low < b).astype(np.uint64)
    shift, word = np.uint64(32), np.uint64(_WORD)
    counters = np.stack([low & word, low >> shift, high & word, high >> shift], axis=1)
    output = philox_4x32_10(counters, s[4:]).reshape(-1)[:count].reshape(tuple(output_sizes))
    after = (counter + blocks) % 2**128
    state = [(after >> (32 * i)) & _WORD for i in range(4)] + s[4:]
    return output, np.array(state, np.uint32).reshape(np.shape(input_state))


# --------------------------------------------------------------------------------------------
# ADAM_OPTIMIZER (docs/semantics.md §10)
# --------------------------------------------------------------------------------------------


def adam_optimizer(input_parameters, input_first_moment, input_second_moment, gradient,
                   training_step, learning_rate, beta1, beta2, epsilon):
    """(x', m', v') of DML_ADAM_OPTIMIZER in float64, the scalars taken as the float32 values
    DirectML's FLOAT fields hold:
        m' = b1 m + (1 - b1) g,  v' = b2 v + (1 - b2) g^2,
        x' = x - lr alpha m' / (sqrt(v') + eps),  alpha = sqrt(1 - b2^T) / (1 - b1^T)."""
    lr, b1, b2, eps = (float(np.float32(s)) for s in (learning_rate, beta1, beta2, epsilon))
    t = int(np.asarray(training_step).reshape(-1)[0])
    x, m, v, g = (_f64(a) for a in (input_parameters, input_first_moment, input_second_moment,
                                    gradient))
    new_m = b1 * m + (1 - b1) * g
    new_v = b2 * v + (1 - b2) * g * g
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        alpha = np.sqrt(np.float64(1 - b2**t)) / np.float64(1 - b1**t)
        new_x = x - lr * alpha * new_m / (np.sqrt(new_v) + eps)
    return new_x, new_m, new_v


# --------------------------------------------------------------------------------------------
# AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD (docs/semantics.md §13)
# --------------------------------------------------------------------------------------------


def _pooling_windows(in_sizes, out_sizes, strides, window_size, start_padding, end_padding,
                     dilations):
    """Per output position o (row-major), (o, the real positions of its window in row-major
    scan order, its count of positions inside the padded extent [-P0, In + P1)). Per axis:
    p = o S - P0 + k D for k in [0, W)."""
    import itertools
    axes = range(len(in_sizes))
    for o in itertools.product(*(range(n) for n in out_sizes)):
        per_axis = [[o[d] * strides[d] - start_padding[d] + k * dilations[d]
                     for k in range(window_size[d])] for d in axes]
        real = [[p for p in ps if 0 <= p < in_sizes[d]] for d, ps in enumerate(per_axis)]
        padded = int(np.prod([sum(-start_padding[d] <= p < in_sizes[d] + end_padding[d]
                                  for p in ps) for d, ps in enumerate(per_axis)]))
        yield o, list(itertools.product(*real)), padded


def average_pooling_grad(input_gradient, output_gradient_sizes, strides, window_size,
                         start_padding, end_padding, include_padding):
    """dX[p] = sum over windows o containing p of dY[o] / count(o), count(o) the window's
    positions inside the padded extent (include_padding) or its real positions; windows with
    no real element add nothing."""
    dy = _f64(input_gradient)
    dx = np.zeros(tuple(output_gradient_sizes))
    spatial = dx.shape[2:]
    for o, real, padded in _pooling_windows(spatial, dy.shape[2:], strides, window_size,
                                            start_padding, end_padding,
                                            (1,) * len(spatial)):
        if not real:
            continue
        term = dy[(...,) + o] / (padded if include_padding else len(real))
        for p in real:
            dx[(...,) + p] += term
    return dx


def max_pooling_grad(input, input_gradient, strides, window_size, start_padding, end_padding,
                     dilations):
    """dX[p] = sum over windows o whose argmax a(o) is p of dY[o]: a(o) the real position
    with the largest X, ties to the first in scan order (lowest logical index), a NaN above
    every number and the first NaN winning; windows with no real element add nothing."""
    x, dy = _f64(input), _f64(input_gradient)
    dx = np.zeros(x.shape)
    for o, real, _ in _pooling_windows(x.shape[2:], dy.shape[2:], strides, window_size,
                                       start_padding, end_padding, dilations):
        if not real:
            continue
        values = np.stack([x[(...,) + p] for p in real], axis=-1)  # (N, C, positions)
        nan = np.isnan(values)
        # The first NaN where there is one, else the first maximum.
        best = np.where(nan.any(-1), np.argmax(nan, -1),
                        np.argmax(np.where(nan, -np.inf, values), -1))
        for k, p in enumerate(real):
            chosen = best == k
            dx[(...,) + p] += np.where(chosen, dy[(...,) + o], 0.0)
    return dx
# ROI_ALIGN_GRAD (docs/semantics.md §16)
# --------------------------------------------------------------------------------------------

_ROI_REDUCTIONS = {"average": "average", "max": "max", 2: "average", 7: "max"}
_ROI_MODES = {"nearest_neighbor": "nearest_neighbor", "linear": "linear", 0: "nearest_neighbor",
              1: "linear"}


def roi_samples_per_output(length, out_size: int, minimum: int, maximum: int) -> int:
    """S along one axis of a region of float32 length L: clamp(ceil(|L| / O), Minimum, Maximum)
    with |L| / O divided in float32 (a NaN quotient takes Minimum, an infinite one Maximum),
    capped at 2^24 // O (defaults.ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES)."""
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.float32(abs(np.float32(length))) / np.float32(out_size)
    if np.isnan(q):
        s = minimum
    elif np.isinf(q):
        s = maximum
    else:
        s = min(max(int(np.ceil(q)), minimum), maximum)
    return min(s, max(1, defaults.ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out_size))


class _RoiAxis(NamedTuple):
    """One region's samples along one axis (N = O S of them, k = 0 .. N-1)."""

    samples: int  # S, per output
    coordinates: np.ndarray  # c(k), float32
    t: np.ndarray  # dc/de (float64): (k - OutputPixelOffset) / N, or / (N - 1), or 1/2
    inside: np.ndarray  # -1 <= c <= size: the sample reads the image
    clamped: np.ndarray  # c outside [0, size - 1] (its taps do not move with c)
    low: np.ndarray  # tap floor(clamp(c)), or the nearest index
    high: np.ndarray  # tap min(low + 1, size - 1) (nearest: low)
    w_low: np.ndarray  # float32 weights: 1 - l and l (nearest: 1 and 0)
    w_high: np.ndarray


def _roi_axis(lo, hi, scale, out_size, size, minimum, maximum, aligned, in_off, out_off,
              linear) -> _RoiAxis:
    """The samples of one axis, every coordinate in float32 in the documented order:
    a = lo*scale, e = hi*scale, L = e - a; d = L / N (aligned: L / (N - 1));
    c(k) = ((k - OutputPixelOffset) * d + a) - InputPixelOffset (aligned, N = 1: (a + e) * 0.5
    - InputPixelOffset)."""
    f = np.float32
    with np.errstate(all="ignore"):
        a, e = f(f(lo) * f(scale)), f(f(hi) * f(scale))
        length = f(e - a)
        s = roi_samples_per_output(length, out_size, minimum, maximum)
        n = out_size * s
        k = np.arange(n, dtype=np.float32)  # exact: n <= 2^24
        if not (np.isfinite(a) and np.isfinite(e)):
            c = np.full(n, np.nan, np.float32)
        elif aligned and n == 1:
            c = np.array([f(f(a + e) * f(0.5)) - f(in_off)], np.float32)
        else:
            d = f(length / f(n - 1 if aligned else n))
            c = (((k - f(out_off)) * d) + a) - f(in_off)
        kk = np.arange(n, dtype=np.float64) - float(f(out_off))
        t = np.full(n, 0.5) if aligned and n == 1 else kk / (n - 1 if aligned else n)
        inside = (c >= -1) & (c <= size)
        clamped = (c < 0) | (c > size - 1)
        cc = np.clip(np.where(inside, c, 0), 0, size - 1).astype(np.float32)
    if linear:
        low = np.floor(cc).astype(np.int64)
        high = np.minimum(low + 1, size - 1)
        frac = (cc - low.astype(np.float32)).astype(np.float32)  # exact
        w_low, w_high = (f(1) - frac).astype(np.float32), frac
    else:
        low = np.rint(cc).astype(np.int64)  # half to even
        high = low
        w_low, w_high = np.ones(n, np.float32), np.zeros(n, np.float32)
    return _RoiAxis(s, c, t, inside, clamped, low, high, w_low, w_high)


def _roi_tap_matrix(axis: _RoiAxis, size: int) -> np.ndarray:
    """[N, size]: the weight with which each sample reads each index (0 outside the image)."""
    m = np.zeros((axis.low.size, size))
    rows = np.nonzero(axis.inside)[0]
    np.add.at(m, (rows, axis.low[rows]), axis.w_low[rows].astype(np.float64))
    np.add.at(m, (rows, axis.high[rows]), axis.w_high[rows].astype(np.float64))
    return m


def _roi_sample_values(x: np.ndarray, ay: _RoiAxis, ax: _RoiAxis, linear: bool) -> np.ndarray:
    """[C, Ny, Nx] float32: each sample's value as the device computes it (MAX compares these):
    nearest X[low_y, low_x]; linear ((w00 TL + w01 TR) + w10 BL) + w11 BR, each weight
    w_ij = w_i(y) * w_j(x) and each product and sum rounded to float32."""
    yl, yh, xl, xh = ay.low[:, None], ay.high[:, None], ax.low[None, :], ax.high[None, :]
    if not linear:
        return x[:, yl, xl]
    with np.errstate(all="ignore"):
        w = [[(ay.w_low[:, None] * ax.w_low[None, :]), (ay.w_low[:, None] * ax.w_high[None, :])],
             [(ay.w_high[:, None] * ax.w_low[None, :]), (ay.w_high[:, None] * ax.w_high[None, :])]]
        v = w[0][0] * x[:, yl, xl] + w[0][1] * x[:, yl, xh]
        v = v + w[1][0] * x[:, yh, xl]
        return v + w[1][1] * x[:, yh, xh]


def roi_align_grad(input, input_gradient, roi, batch_indices, output_gradient_sizes, *,
                   reduction_function="average", interpolation_mode="linear",
                   spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                   output_pixel_offset=-0.5, minimum_samples_per_output=1,
                   maximum_samples_per_output=2**32 - 1, align_regions_to_corners=False,
                   roi_gradient=False):
    """DML_ROI_ALIGN_GRAD: (dX, dROI or None) of ROI_ALIGN1, float64: dX of
    output_gradient_sizes {B, C, H, W}, dROI (with roi_gradient) in roi's shape. input: X
    (needed for MAX and dROI); input_gradient: dY {R, C, OH, OW}; roi: R rows [x1, y1, x2, y2]
    (any shape of R * 4 values); batch_indices: R values (a region whose index is outside
    [0, B) adds nothing and its dROI row is 0).

    Each region's samples (`_roi_axis`, float32 coordinates) read the image through their taps;
    AVERAGE splits dY[r, c, oy, ox] equally over its Sy Sx samples, MAX gives it to the first
    largest in-image sample (float32 values, `_roi_sample_values`; the first NaN wins); samples
    outside the image add nothing. dROI (linear only; nearest 0) differentiates each sample's
    value with the one-sided neighbours floor/ceil of its clamped coordinate."""
    return _roi_align_grad(False, **locals())


def roi_align_grad_magnitude(input, input_gradient, *args, **kwargs):
    """roi_align_grad's outputs as the sums of their terms' absolute values (a tolerance's
    magnitude): dX on |dY| (its weights are positive), dROI with |dY|, |X| for each X in a
    difference, |t| + |1 - t| for either factor and |SpatialScale|."""
    return _roi_align_grad(True, input, np.abs(_f64(input_gradient)), *args, **kwargs)


def _roi_align_grad(absolute, input, input_gradient, roi, batch_indices, output_gradient_sizes,
                    *, reduction_function="average", interpolation_mode="linear",
                    spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                    output_pixel_offset=-0.5, minimum_samples_per_output=1,
                    maximum_samples_per_output=2**32 - 1, align_regions_to_corners=False,
                    roi_gradient=False):
    reduction = _ROI_REDUCTIONS[_name(reduction_function)]
    linear = _ROI_MODES[_name(interpolation_mode)] == "linear"
    dy = _f64(input_gradient)
    rois = np.asarray(roi).astype(np.float32).reshape(-1, 4)
    batch = np.asarray(batch_indices).reshape(-1).astype(np.int64)
    bsz, channels, height, width = (int(s) for s in output_gradient_sizes)
    regions, _, out_h, out_w = dy.shape
    x = None if input is None else np.asarray(input).astype(np.float32)
    dx = np.zeros((bsz, channels, height, width))
    droi = np.zeros((regions, 4))
    sx, sy = float(np.float32(spatial_scale_x)), float(np.float32(spatial_scale_y))
    common = (minimum_samples_per_output, maximum_samples_per_output,
              bool(align_regions_to_corners), input_pixel_offset, output_pixel_offset, linear)
    for r in range(regions):
        b = int(batch[r])
        if not 0 <= b < bsz:
            continue
        ax = _roi_axis(rois[r, 0], rois[r, 2], spatial_scale_x, out_w, width, *common)
        ay = _roi_axis(rois[r, 1], rois[r, 3], spatial_scale_y, out_h, height, *common)
        # q[c, ky, kx]: the share of dY each sample passes on (0 for samples outside).
        inside = ay.inside[:, None] & ax.inside[None, :]
        cell = np.repeat(np.repeat(dy[r], ay.samples, 1), ax.samples, 2)  # dY per sample
        if reduction == "average":
            q = cell * inside / (ay.samples * ax.samples)
        else:
            values = _roi_sample_values(x[b], ay, ax, linear)
            q = np.zeros_like(cell)
            for oy in range(out_h):
                for ox in range(out_w):
                    ys = slice(oy * ay.samples, (oy + 1) * ay.samples)
                    xs = slice(ox * ax.samples, (ox + 1) * ax.samples)
                    where = np.argwhere(inside[ys, xs])
                    if not where.size:
                        continue
                    v = values[:, ys, xs][:, where[:, 0], where[:, 1]]
                    best = where[np.argmax(v, axis=1)]  # first largest; the first NaN wins
                    for c in range(channels):
                        ky, kx = best[c] + (oy * ay.samples, ox * ax.samples)
                        q[c, ky, kx] = dy[r, c, oy, ox]
        with np.errstate(invalid="ignore"):
            dx[b] += np.einsum("cyx,yh,xw->chw", q, _roi_tap_matrix(ay, height),
                               _roi_tap_matrix(ax, width))
        if roi_gradient and linear:
            droi[r] = _roi_corner_gradient(x[b], q, ay, ax, sx, sy, absolute)
    return dx, (droi.reshape(np.shape(roi)) if roi_gradient else None)


def _roi_corner_gradient(x, q, ay: _RoiAxis, ax: _RoiAxis, sx: float, sy: float,
                         absolute: bool = False) -> np.ndarray:
    """d(sum dY Y)/d[x1, y1, x2, y2] of one region: with the floor/ceil neighbours of each
    sample's clamped coordinate, gy = (1-lx)(BL-TL) + lx(BR-TR), gx = (1-ly)(TR-TL) + ly(BR-BL)
    (0 along an axis where the coordinate was clamped), then per sample share q:
    dx1 += q gx (1-tx) Sx, dx2 += q gx tx Sx, dy1 += q gy (1-ty) Sy, dy2 += q gy ty Sy."""
    def neighbours(axis, size):
        c = np.clip(np.where(axis.inside, axis.coordinates, 0), 0, size - 1).astype(np.float64)
        return np.floor(c).astype(np.int64), np.ceil(c).astype(np.int64), c - np.floor(c)
    yf, yc, ly = neighbours(ay, x.shape[1])
    xf, xc, lx = neighbours(ax, x.shape[2])
    x = x.astype(np.float64)
    tl, tr = x[:, yf[:, None], xf[None, :]], x[:, yf[:, None], xc[None, :]]
    bl, br = x[:, yc[:, None], xf[None, :]], x[:, yc[:, None], xc[None, :]]
    ly, lx = ly[:, None], lx[None, :]
    f = np.abs if absolute else (lambda v: v)
    minus = np.add if absolute else np.subtract  # |a - b| <= |a| + |b|
    with np.errstate(invalid="ignore"):
        gy = ((1 - lx) * minus(f(bl), f(tl)) + lx * minus(f(br), f(tr))) * ~ay.clamped[:, None]
        gx = ((1 - ly) * minus(f(tr), f(tl)) + ly * minus(f(br), f(bl))) * ~ax.clamped[None, :]
        qy, qx = (f(q) * gy).sum(axis=(0, 2)), (f(q) * gx).sum(axis=(0, 1))  # per ky, per kx
    if absolute:  # t and 1 - t are rounded on the device: |1 - t| + |t| bounds either factor
        wx, wy = np.abs(1 - ax.t) + np.abs(ax.t), np.abs(1 - ay.t) + np.abs(ay.t)
        x_part, y_part = np.sum(qx * wx) * abs(sx), np.sum(qy * wy) * abs(sy)
        return np.array([x_part, y_part, x_part, y_part])
    return np.array([np.sum(qx * (1 - ax.t)) * sx, np.sum(qy * (1 - ay.t)) * sy,
                     np.sum(qx * ax.t) * sx, np.sum(qy * ay.t) * sy])
# SLICE_GRAD (docs/semantics.md §14)
# --------------------------------------------------------------------------------------------


def slice_grad(input_gradient, output_gradient_sizes, input_window_offsets, input_window_sizes,
               input_window_strides):
    """dX of DML_SLICE_GRAD: zeros of output_gradient_sizes with dX[start + stride * o] =
    dY[o] per dimension, start = offset (stride > 0) or offset + size - 1 (stride < 0). A
    copy, so in dY's own data type (bit copies: NaN payloads and -0 kept), not float64."""
    dy = np.asarray(input_gradient)
    dx = np.zeros(tuple(output_gradient_sizes), dy.dtype)
    index = []
    for n, offset, size, stride in zip(dy.shape, input_window_offsets, input_window_sizes,
                                       input_window_strides):
        start = offset if stride > 0 else offset + size - 1
        index.append(start + stride * np.arange(n))
    dx[np.ix_(*index)] = dy
    return dx


# --------------------------------------------------------------------------------------------
# LOCAL_RESPONSE_NORMALIZATION_GRAD (docs/semantics.md §15)
# --------------------------------------------------------------------------------------------


def _window_sums(values, axes, before, after):
    """Per element p, the sum of `values` over [p - before, p + after] along each of `axes`
    (a box, clipped to the array): zero padding and L shifted slices per axis."""
    for axis in axes:
        n = values.shape[axis]
        pad = [(0, 0)] * values.ndim
        pad[axis] = (before, after)
        padded = np.pad(values, pad)
        values = sum(np.take(padded, np.arange(k, k + n), axis=axis)
                     for k in range(before + after + 1))
    return values


def _power(base, exponent):
    """base^exponent as docs/semantics.md §15 defines it: 1 for exponent 0, NaN for a negative
    or NaN base, IEEE's pow otherwise (0^-b = Inf, Inf^-b = 0 for b > 0)."""
    if exponent == 0:
        return np.ones_like(base)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where((base < 0) | np.isnan(base), np.nan, np.power(base, exponent))


def local_response_normalization_grad_terms(input, input_gradient, cross_channel, local_size,
                                            alpha, beta, bias):
    """The two terms of LOCAL_RESPONSE_NORMALIZATION_GRAD's dX = first - second (float64):
    first = dY_i N_i^-Beta, second = (2 Alpha Beta / L) X_i sum_{p : i in W(p)} dY_p X_p
    N_p^(-Beta-1). On |X| and |dY| their absolute values are the sizes of the terms each
    element is made of (the tolerance's magnitude)."""
    alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
    x, dy = _f64(input), _f64(input_gradient)
    axes = (1,) if cross_channel else (2, 3)
    before, after = (local_size - 1) // 2, local_size // 2
    with np.errstate(invalid="ignore", over="ignore"):
        norm = bias + alpha / local_size * _window_sums(x * x, axes, before, after)
        terms = dy * x * _power(norm, -beta - 1)
        total = _window_sums(terms, axes, after, before)  # the mirrored window
        return dy * _power(norm, -beta), 2 * alpha * beta / local_size * x * total


def local_response_normalization_grad(input, input_gradient, cross_channel, local_size, alpha,
                                      beta, bias):
    """dX of DML_LOCAL_RESPONSE_NORMALIZATION_GRAD on 4-D {N, C, H, W} X and dY, the scalars
    taken as the float32 values DirectML's FLOAT fields hold:
        N_p = Bias + (Alpha / L) sum_{j in W(p)} X_j^2,  W(p) = [p - floor((L-1)/2),
        p + ceil((L-1)/2)] along C (cross_channel) or along H and W, clipped;
        dX_i = dY_i N_i^-Beta - (2 Alpha Beta / L) X_i sum_{p : i in W(p)} dY_p X_p N_p^(-Beta-1)."""
    first, second = local_response_normalization_grad_terms(
        input, input_gradient, cross_channel, local_size, alpha, beta, bias)
    with np.errstate(invalid="ignore"):
        return first - second
