"""ADAM_OPTIMIZER's parts of its operator-table record (operators.py): the case generator, the
magnitudes its tolerances are relative to, the descriptor of a case and its inverse, and the
examples of valid and invalid hyperparameters for the descriptor fuzzing. Nothing here touches
a device."""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

import numpy as np

from . import reference
from .operator_record import Case, Tolerance, packed
from .ops.adam_optimizer import AdamOptimizerDesc


def adam_case(rng, shape, dtype) -> Case:
    """Parameters N(0, 1), moments of a few earlier steps, gradients N(0, 1) with a few zeros;
    a step T from 1 to 1000 and hyperparameters around the usual ones."""
    x, g = rng.standard_normal(shape), rng.standard_normal(shape) * (rng.random(shape) > 0.1)
    m, v = 0.1 * rng.standard_normal(shape), 0.01 * rng.standard_normal(shape) ** 2
    scalars = (10.0 ** rng.uniform(-4, -1), rng.uniform(0.8, 0.95), rng.uniform(0.99, 0.9999),
               float(rng.choice([1e-8, 1e-6, 1e-3])))
    t = int(rng.choice([1, 2, 3, 7, 100, 1000]))
    step = np.full((1,) * len(shape), t, np.uint32)  # TrainingStepTensor
    return Case(tuple(a.astype(dtype) for a in (x, m, v, g)) + (step,) + scalars,
                label=f"{np.dtype(dtype).name} {list(shape)}, T {t}")


def adam_magnitude(float32: Tolerance
                   ) -> Callable[[Tuple[Any, ...], Dict[str, Any]], Sequence[np.ndarray]]:
    """The magnitudes of ADAM_OPTIMIZER whose float32 tolerance is `float32`: |each term| of m',
    v' and x'; x' also carries alpha's error, from float32 Beta^T: about T 2^-23 / (1 - Beta^T)
    of it for each Beta, in units of the float32 tolerance."""
    def magnitude(args, kwargs):
        x, m, v, g = (np.abs(np.asarray(a, np.float64)) for a in args[:4])
        t, b1, b2 = int(np.asarray(args[4]).reshape(-1)[0]), args[6], args[7]
        new_x, new_m, new_v = reference.adam_optimizer(*args)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # (T 0: Inf)
            alpha = t * 2.0**-23 * (1 / (1 - np.float64(b1) ** t) + 1 / (1 - np.float64(b2) ** t))
        step = np.abs(np.asarray(args[0], np.float64) - new_x)
        return (x + step * (1 + alpha / float32.magnitude), b1 * m + (1 - b1) * g,
                b2 * v + (1 - b2) * g * g)
    return magnitude


def adam_describe(case):
    x = packed(case.args[0])
    return AdamOptimizerDesc(*(packed(a) for a in case.args[:5]), x, x, x, *case.args[5:])


def adam_call(desc, values):
    return (tuple(values[f] for f in ("input_parameters_tensor", "input_first_moment_tensor",
                                      "input_second_moment_tensor", "gradient_tensor",
                                      "training_step_tensor"))
            + (desc.learning_rate, desc.beta1, desc.beta2, desc.epsilon)), {}


def adam_parameters(rank):
    bad = [float("nan"), float("inf"), 1e39, "0.1", True]
    return {name: ([0.5, 1e-3], bad) for name in ("learning_rate", "beta1", "beta2", "epsilon")}
