"""ELEMENT_WISE_CLIP_GRAD's and ELEMENT_WISE_CLIP_GRAD1's parts of their operator-table records
(operators.py): the case generator, the descriptor of a GRAD1 case (GRAD's is the element-wise
one) and the call of both, the examples of valid and invalid bounds for the descriptor fuzzing,
their data types and tolerances. Nothing here touches a device."""

from __future__ import annotations

import math
from typing import Callable, Dict, Tuple, Union

import numpy as np
from numpy.typing import DTypeLike

from .operator_record import EXACT, Case, packed
from .ops.element_wise_clip_grad import DATA_TYPES as CLIP_DATA_TYPES
from .ops.element_wise_clip_grad import ElementWiseClipGradDesc
from .ops.element_wise_clip_grad1 import ElementWiseClipGrad1Desc
from .tensor import DataType


def _clip_values(rng: np.random.Generator, shape: Tuple[int, ...], dtype: DTypeLike,
                 bounds: Callable[[np.ndarray], Union[int, float]]
                 ) -> Tuple[np.ndarray, np.ndarray, Tuple[Union[int, float], Union[int, float]]]:
    """X, dY and two bounds for a clip grad: floats standard normal times 2 with a few NaN,
    +-Inf and -0; integers over the whole type, half of them near zero. `bounds(x)` draws
    one bound: near the data (often one of X's values, so X == bound is common), at the
    type's extremes, beyond them, or NaN."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = (2 * rng.standard_normal(shape)).astype(dtype)
        special = rng.random(shape) < 0.05
        x[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype),
                                np.count_nonzero(special))
        dy = rng.standard_normal(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        wide = rng.integers(info.min, info.max, shape, dtype, endpoint=True)
        x = np.where(rng.random(shape) < 0.5, wide, rng.integers(-8, 9, shape).clip(
            info.min, info.max).astype(dtype))
        dy = rng.integers(info.min, info.max, shape, dtype, endpoint=True)
    return x, dy, (bounds(x), bounds(x))


def clip_case(native: bool) -> Callable[[np.random.Generator, Tuple[int, ...], type], Case]:
    """The case generator of ELEMENT_WISE_CLIP_GRAD (float bounds) or, `native`, _GRAD1
    (bounds in the tensors' type). Min > Max about one case in ten."""
    def make_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
        dtype = np.dtype(dtype)

        def bound(x: np.ndarray) -> Union[int, float]:
            pick = rng.random()
            if dtype.kind == "f":
                if pick < 0.4:
                    value = x.flat[int(rng.integers(x.size))]
                elif pick < 0.8:
                    value = rng.uniform(-3, 3)
                else:
                    value = (np.nan, np.inf, -np.inf, 0.0, -0.0)[int(rng.integers(5))]
                return float(dtype.type(value)) if native else float(np.float32(value))
            info = np.iinfo(dtype)
            if pick < 0.4:
                value = int(x.flat[int(rng.integers(x.size))])
            elif pick < 0.7:
                value = int(rng.integers(-8, 9))
            else:
                value = (info.min, info.max, info.min + 1, info.max - 1)[int(rng.integers(4))]
            value = min(max(value, int(info.min)), int(info.max))
            if native:
                return value
            # Float bounds: the integer, or half-way to the next (a bound between integers).
            return float(np.float32(value + (0.5 if rng.random() < 0.3 else 0.0)))

        x, dy, (low, high) = _clip_values(rng, shape, dtype, bound)
        if low > high and rng.random() < 0.8:
            low, high = high, low
        label = f"{dtype.name} {list(shape)} min={low:.7g} max={high:.7g}"
        return Case((x, dy), dict(min=low, max=high), label=label)
    return make_case


def clip1_describe(case: Case) -> ElementWiseClipGrad1Desc:
    x, dy = case.args
    return ElementWiseClipGrad1Desc(packed(x), packed(dy), packed(x), packed(x).data_type,
                                    **case.kwargs)


def clip_call(desc: Union[ElementWiseClipGradDesc, ElementWiseClipGrad1Desc],
               values: Dict[str, np.ndarray]
               ) -> Tuple[Tuple[np.ndarray, ...], Dict[str, Union[int, float]]]:
    return ((values["input_tensor"], values["input_gradient_tensor"]),
            dict(min=desc.min, max=desc.max))


def clip_parameters(native: bool) -> Callable[[int], Dict[str, Tuple[list, list]]]:
    def examples(rank: int) -> Dict[str, Tuple[list, list]]:
        if native:  # valid for FLOAT32 tensors, the fuzzing's usual type
            return {"min": ([0, -1.5, math.nan, -math.inf], [0.1, "0", True, None]),
                    "max": ([6, 2.5, math.inf], [1e39, 1 + 2.0**-30, "1"]),
                    "min_max_data_type": ([DataType.FLOAT32], [DataType.INT32, 0, 1.0])}
        return {"min": ([0.0, -1.5, math.nan, -math.inf, 3], [1e39, "0", True, None]),
                "max": ([6.0, 2.5, math.inf, math.nan], [-1e39, "1", False])}
    return examples


# Every DataType the clip grads take, as numpy types (`Operator.dtypes`).
CLIP_DTYPES = tuple(t.numpy_dtype.type for t in CLIP_DATA_TYPES)
# Clip grads select dY or +0: exact (bitwise) in every data type.
CLIP_TOLERANCES = {np.dtype(dtype).name: EXACT for dtype in CLIP_DTYPES}
