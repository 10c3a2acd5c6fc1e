"""The float64 oracles of batch normalization: the forwards, BATCH_NORMALIZATION_GRAD and
BATCH_NORMALIZATION_TRAINING_GRAD (docs/semantics.md §4 and §5), float64 throughout."""

from typing import NamedTuple, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from ._reference_common import _f64


class BatchNormGradResult(NamedTuple):
    """The oracle's BatchNorm grads: dX, dScale and dBias, float64."""

    output_gradient: np.ndarray
    output_scale_gradient: np.ndarray
    output_bias_gradient: np.ndarray


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
                                 epsilon: float, *, fused_add: Optional[ArrayLike] = None,
                                 fused_activation: Optional[str] = None
                                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DML_BATCH_NORMALIZATION_TRAINING -> (output, mean, variance), statistics over
    R = {d : scale size is 1}.

    Mean = mean_R(X); Variance = mean_R((X - Mean)^2) (biased, docs/semantics.md §5);
    Output = Act(Scale * (X - Mean) / sqrt(Variance + Epsilon) + Bias [+ FusedAdd]), Act the
    identity or ReLU ("ACTIVATION_RELU"). Mean/variance have the statistics shape (size 1 on
    R, input size elsewhere).
    """
    x, s, b = _f64(input), _f64(scale), _f64(bias)
    axes = _reduced_axes(x.shape, s.shape, "scale")
    mean = x.mean(axis=axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    output = s * (x - mean) / np.sqrt(variance + epsilon) + b
    if fused_add is not None:
        output = output + _f64(fused_add)
    if fused_activation == "ACTIVATION_RELU":
        output = np.where(output > 0, output, np.where(np.isnan(output), output, 0.0))
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
