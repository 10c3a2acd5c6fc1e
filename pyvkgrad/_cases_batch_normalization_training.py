"""BATCH_NORMALIZATION_TRAINING's parts of its operator-table record (operators.py): the case
generator, the descriptor of a case and its call, the magnitudes its tolerances are relative
to, and the examples of valid and invalid fields for the descriptor fuzzing. Nothing here
touches a device."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from .operator_record import Case, Tolerance, packed
from .ops.batch_normalization_training import BatchNormalizationTrainingDesc

# Exact sums of float32 chunk sums, then a few correctly rounded operations: relative to each
# output's terms (the chunks' float32 trees), as the other reductions; float16 rounds once.
BATCH_NORMALIZATION_TRAINING_TOLERANCES = {
    "float32": Tolerance(magnitude=1e-5),
    "float16": Tolerance(magnitude=1e-5, value=2.0**-10, absolute=1e-7)}


def batch_normalization_training_case(rng: np.random.Generator, shape: Tuple[int, ...],
                                      dtype) -> Case:
    """X about a random centre; statistics kept (X's size) on about 40% of the dimensions,
    reduced on the rest (at least one reduced where any dimension is longer than 1, so that
    Variance is not 0 with Epsilon 0 everywhere); Epsilon 1e-5, 1e-3 or 0.5; a fused add half
    the time, ReLU half the time."""
    x = (rng.standard_normal(shape) + rng.uniform(-2, 2)).astype(dtype)
    stats = [s if rng.random() < 0.4 else 1 for s in shape]
    if all(t == s for t, s in zip(stats, shape)) and stats:
        stats[int(np.argmax(shape))] = 1
    stats = tuple(stats)
    scale = rng.standard_normal(stats).astype(dtype)
    bias = rng.standard_normal(stats).astype(dtype)
    epsilon = (1e-5, 1e-3, 0.5)[int(rng.integers(3))]
    fused = rng.standard_normal(shape).astype(dtype) if rng.random() < 0.5 else None
    act = "ACTIVATION_RELU" if rng.random() < 0.5 else None
    return Case((x, scale, bias, epsilon), dict(fused_add=fused, fused_activation=act),
                label=f"{np.dtype(dtype).name} {list(shape)}, statistics {list(stats)}, "
                      f"fused add {fused is not None}, {act}")


def batch_normalization_training_magnitude(args, kwargs):
    """Output: |Scale| / sqrt(Variance + Epsilon) (|X| + mean_R |X - shift| + sqrt(mean_R
    X^2)) + |Bias| + |FusedAdd|; Mean: mean_R |X|; Variance: mean_R X^2 (the terms of the
    sums, whatever shift the kernel takes)."""
    x, scale, bias = (np.asarray(a, np.float64) for a in args[:3])
    eps = args[3]
    axes = tuple(d for d in range(x.ndim) if scale.shape[d] == 1)
    mean_abs = np.abs(x).mean(axis=axes, keepdims=True) if axes else np.abs(x)
    mean_sq = (x * x).mean(axis=axes, keepdims=True) if axes else x * x
    var = x.var(axis=axes, keepdims=True) if axes else np.zeros_like(x)
    c = np.abs(scale) / np.sqrt(var + eps)
    fused = kwargs.get("fused_add")
    out = c * (np.abs(x) + 2 * mean_abs + np.sqrt(mean_sq)) + np.abs(bias)
    if fused is not None:
        out = out + np.abs(np.asarray(fused, np.float64))
    return out, mean_abs.reshape(scale.shape), mean_sq.reshape(scale.shape)


def batch_normalization_training_describe(case: Case) -> BatchNormalizationTrainingDesc:
    x, scale, bias, epsilon = case.args
    fused = case.kwargs.get("fused_add")
    big, small = packed(x), packed(scale)
    return BatchNormalizationTrainingDesc(
        big, small, packed(bias), None if fused is None else packed(fused), big, small, small,
        epsilon, case.kwargs.get("fused_activation"))


def batch_normalization_training_call(desc: BatchNormalizationTrainingDesc,
                                      values: Dict[str, np.ndarray]) -> Tuple[tuple, dict]:
    return ((values["input_tensor"], values["scale_tensor"], values["bias_tensor"],
             desc.epsilon),
            dict(fused_add=values.get("fused_add_tensor"),
                 fused_activation=desc.fused_activation))


def batch_normalization_training_parameters(rank: int) -> Dict[str, Tuple[list, list]]:
    return {"epsilon": ([1e-3, 0.0, 0.5], [-1e-5, float("nan"), float("inf"), "0.1", True]),
            "fused_activation": ([None, "ACTIVATION_RELU"],
                                 ["ACTIVATION_SIGMOID", "relu", 1, True])}
