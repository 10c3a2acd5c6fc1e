"""LOCAL_RESPONSE_NORMALIZATION_GRAD's parts of its operator-table record (operators.py): the
case generator, the magnitudes its tolerance is relative to, the descriptor of a case and its
inverse, and the examples of valid and invalid scalar fields for the descriptor fuzzing.
Nothing here touches a device."""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np

from . import reference
from .operator_record import Case, Tolerance
from .ops.local_response_normalization_grad import LocalResponseNormalizationGradDesc
from .tensor import DataType, TensorDesc

# Tolerances, relative to an element's magnitude M = |dY_i N_i^-Beta| + |2 Alpha Beta / L X_i|
# sum |dY_p X_p N_p^(-Beta-1)| (the two terms' sizes): float32 1e-5 M covers the float32 window
# sums (N's relative error about (L + 2) 2^-24, raised to Beta), pow_fixed's few ulps
# (docs/semantics.md §15), the division and the final difference, with a wide margin for the
# generator's L <= 9 and Beta <= 1.5. Float16 adds the store's rounding (2^-10 of |dX|, which
# also covers a truncating driver) and float16's subnormal spacing.
LRN_TOLERANCES = {"float32": Tolerance(magnitude=1e-5),
                  "float16": Tolerance(magnitude=1e-5, value=2.0**-10, absolute=2.0**-24)}


def _shape4(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """A 4-D {N, C, H, W} shape from any: the last four sizes, padded with 1 in front."""
    return ((1, 1, 1, 1) + tuple(shape))[-4:]


def lrn_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype) -> Case:
    """X and dY standard normal of `shape` made 4-D; CrossChannel three times in four; L from
    1 to 9 (even and odd); Alpha from 1e-4 to 1 (times L: PyTorch's alpha is DirectML's Alpha),
    Beta from 0.1 to 1.5, Bias from 0.5 to 2."""
    shape = _shape4(shape)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    cross_channel = bool(rng.random() < 0.75)
    local_size = int(rng.integers(1, 10))
    alpha = float(10 ** rng.uniform(-4, 0))
    beta, bias = float(rng.uniform(0.1, 1.5)), float(rng.uniform(0.5, 2.0))
    label = (f"{np.dtype(dtype).name} {list(shape)} {'across C' if cross_channel else 'in HxW'} "
             f"L={local_size} alpha={alpha:.3g} beta={beta:.3g} bias={bias:.3g}")
    return Case((x, dy, cross_channel, local_size, alpha, beta, bias), label=label)


def lrn_magnitude(args, kwargs):
    """M per element: the sizes of dX's two terms, the oracle's terms on |X| and |dY|."""
    x, dy = (np.abs(np.asarray(a, np.float64)) for a in args[:2])
    first, second = reference.local_response_normalization_grad_terms(x, dy, *args[2:])
    return (np.abs(first) + np.abs(second),)


def lrn_describe(case: Case) -> LocalResponseNormalizationGradDesc:
    x, dy = case.args[:2]
    desc = TensorDesc(DataType.from_numpy(x.dtype, "", ""), x.shape)
    return LocalResponseNormalizationGradDesc(desc, desc, desc, *case.args[2:])


def lrn_call(desc: LocalResponseNormalizationGradDesc, values: Dict[str, np.ndarray]
             ) -> Tuple[tuple, dict]:
    return ((values["input_tensor"], values["input_gradient_tensor"], desc.cross_channel,
             desc.local_size, desc.alpha, desc.beta, desc.bias), {})


def lrn_parameters(rank: int) -> Dict[str, Tuple[list, list]]:
    bad = [math.nan, math.inf, 1e39, "0.1", True, None]
    return {"cross_channel": ([True, False], [1, "yes", None]),
            "local_size": ([1, 2, 5, 100], [0, -1, 2**31, 2.0, True, "5"]),
            "alpha": ([1e-4, 0.0, 2.5], bad), "beta": ([0.75, 0.0, 1.0], bad),
            "bias": ([1.0, 2.0], bad)}
