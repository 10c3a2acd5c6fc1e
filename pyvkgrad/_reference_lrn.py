"""The float64 oracle of LOCAL_RESPONSE_NORMALIZATION_GRAD (docs/semantics.md §15)."""

import numpy as np

from ._reference_common import _f64


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
