"""BATCH_NORMALIZATION_GRAD's and BATCH_NORMALIZATION_TRAINING_GRAD's parts of their
operator-table records (operators.py): the case generator, the magnitudes their tolerances are
relative to, the descriptor of a case and its inverse, and the examples of valid and invalid
Epsilon for the descriptor fuzzing. Nothing here touches a device."""

from __future__ import annotations

import math

import numpy as np

from .operator_record import Case, packed


def batch_normalization_case(rng, shape, dtype) -> Case:
    """X, dY; statistics kept (input's size) on about 40% of the dimensions, reduced (1) on
    the rest; Mean arbitrary (not X's own), Variance in [0.5, 2); Epsilon 0, 1e-5, 1e-3 or
    0.5."""
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    stats_shape = tuple(s if rng.random() < 0.4 else 1 for s in shape)
    mean = rng.standard_normal(stats_shape).astype(dtype)
    variance = rng.uniform(0.5, 2.0, stats_shape).astype(dtype)
    scale = rng.standard_normal(stats_shape).astype(dtype)
    epsilon = (0.0, 1e-5, 1e-3, 0.5)[int(rng.integers(4))]
    return Case((x, dy, mean, variance, scale, epsilon),
                label=f"{np.dtype(dtype).name} {list(shape)}, statistics {list(stats_shape)}")


def batch_normalization_magnitude(training: bool):
    """Per output, the size of the terms it is made of (float64), for error bounds: the sum of
    the absolute terms of each sum, and for dX the absolute terms of its formula."""
    def magnitude(args, kwargs):
        x, dy, m, v, s = (np.asarray(a, np.float64) for a in args[:5])
        eps = args[5]
        dy = np.broadcast_to(dy, x.shape)
        axes = tuple(d for d in range(x.ndim) if m.shape[d] == 1)
        sigma = np.sqrt(v + eps)
        mag_scale = np.sum(np.abs(dy * (x - m)), axis=axes, keepdims=True) / sigma
        mag_bias = np.sum(np.abs(dy), axis=axes, keepdims=True)
        if not training:
            mag_dx = np.abs(dy * s / sigma)
        else:
            ma = (x - m).mean(axis=axes, keepdims=True)
            mdy = dy.mean(axis=axes, keepdims=True)
            q = (dy * (x - m - ma)).mean(axis=axes, keepdims=True) / (v + eps)
            mag_dx = np.abs(s / sigma) * (np.abs(dy) + np.abs(mdy)
                                          + (np.abs(x - m) + np.abs(ma)) * np.abs(q))
        return mag_dx, mag_scale.reshape(m.shape), mag_bias.reshape(m.shape)
    return magnitude


def batch_normalization_describe(descriptor):
    def describe(case):
        x, dy, mean, variance, scale, epsilon = case.args
        big, small = packed(x), packed(mean)
        return descriptor(big, packed(dy), small, packed(variance), packed(scale), big, small,
                          small, epsilon)
    return describe


def batch_normalization_call(desc, values):
    return (tuple(values[name] for name in ("input_tensor", "input_gradient_tensor",
                                            "mean_tensor", "variance_tensor", "scale_tensor"))
            + (desc.epsilon,), {})


def batch_normalization_parameters(rank):
    return {"epsilon": ([1e-3, 0.0, 0.5, 1e-5], [-1e-5, math.nan, math.inf, 1e39, "0.1", True])}
