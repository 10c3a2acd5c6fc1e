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

This module holds the element-wise oracles (ReLU, clip, Adam) and SLICE_GRAD's copy; each other
family has its own module (`_reference_resample.py`, `_reference_batch_normalization.py`,
`_reference_random.py`, `_reference_pooling.py`, `_reference_roi_align.py`, `_reference_lrn.py`,
their shared helpers in `_reference_common.py`), every oracle re-exported here.
"""

from typing import Union

import numpy as np
from numpy.typing import ArrayLike

# The other families' oracles, one module each, re-exported here: reference.X is every oracle.
from ._reference_batch_normalization import (BatchNormGradResult, batch_normalization,
                                             batch_normalization_grad,
                                             batch_normalization_training,
                                             batch_normalization_training_grad)
from ._reference_common import _f64
from ._reference_lrn import (local_response_normalization_grad,
                             local_response_normalization_grad_terms)
from ._reference_pooling import average_pooling_grad, max_pooling_grad
from ._reference_random import philox_4x32_10, random_generator
from ._reference_resample import axis_weights, resample1, resample_grad, resample_grad1
from ._reference_roi_align import (roi_align_grad, roi_align_grad_magnitude,
                                   roi_samples_per_output)

__all__ = [
    "BatchNormGradResult",
    "activation_relu_grad",
    "element_wise_clip_grad",
    "element_wise_clip_grad1",
    "axis_weights",
    "resample1",
    "resample_grad",
    "resample_grad1",
    "batch_normalization",
    "batch_normalization_training",
    "batch_normalization_grad",
    "batch_normalization_training_grad",
    "philox_4x32_10",
    "random_generator",
    "adam_optimizer",
    "average_pooling_grad",
    "max_pooling_grad",
    "roi_samples_per_output",
    "roi_align_grad",
    "roi_align_grad_magnitude",
    "slice_grad",
    "local_response_normalization_grad_terms",
    "local_response_normalization_grad",
]

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
        # (NumPy powers: a Beta above 1 at a large T overflows to Inf, not OverflowError)
        alpha = np.sqrt(1 - np.float64(b2) ** t) / (1 - np.float64(b1) ** t)
        new_x = x - lr * alpha * new_m / (np.sqrt(new_v) + eps)
    return new_x, new_m, new_v


# --------------------------------------------------------------------------------------------
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
