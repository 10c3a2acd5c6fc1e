"""DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD: dX = (X <= Min or X >= Max) ? +0 : dY, element-wise
(docs/semantics.md §10).

Min and Max are DirectML FLOATs (float32); X of any of the operator's data types is compared as
float32 (integers converted with round-to-nearest-even, floats exactly). Both bounds are
excluded, X = NaN passes dY, a NaN bound disables its side, Min >= Max gives all +0. A select,
so results are bit copies of dY or +0 in every data type.

The kernels (shaders/elementwise/element_wise_clip_grad.glsl, shared with
ELEMENT_WISE_CLIP_GRAD1) compare integers only: the plan turns the bounds into the range
[LOW, HIGH] of the order keys of the X that pass (`pass_range`), exactly on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Dict, Tuple, Union

import numpy as np

from ..tensor import DataType, dml_name, fail, real_number
from ..tensor import TensorDesc  # noqa: F401 (the inherited fields' type, for pdoc)
from . import _elementwise

if TYPE_CHECKING:
    from ..device import DeviceLike

# Every data type DirectML lists for CLIP_GRAD and CLIP_GRAD1 but the 64-bit ones.
DATA_TYPES = (DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.INT16, DataType.INT8,
              DataType.UINT32, DataType.UINT16, DataType.UINT8)
_UNSIGNED = (DataType.UINT32, DataType.UINT16, DataType.UINT8)


def check_float32(operator: str, field: str, value: object) -> float:
    """A DirectML FLOAT bound: a real number within float32's range, or +-Inf or NaN (a NaN
    bound disables its side), returned rounded to float32 as a Python float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        fail(operator, field, "must be a number", "float", type(value).__name__, TypeError)
    number = real_number(operator, field, value)
    with np.errstate(over="ignore"):
        single = np.float32(number)
    if math.isfinite(number) and not np.isfinite(single):
        fail(operator, field, "must be within float32's range (or +-Inf, NaN)",
             f"|{field}| <= 3.4e38", number)
    return float(single)


# ---- order keys: the kernels' view of the elements (element_wise_clip_grad.glsl) -----------------

def _sign(data_type: DataType) -> int:
    return 0 if data_type in _UNSIGNED else 1 << (8 * data_type.element_size - 1)


def key_range(data_type: DataType) -> Tuple[int, int]:
    """The order keys of the type's values (floats: -Inf to +Inf; NaN has none)."""
    if data_type.is_float:
        infinity = 0x7C00 if data_type is DataType.FLOAT16 else 0x7F800000
        return _sign(data_type) - infinity, _sign(data_type) + infinity
    return 0, (1 << (8 * data_type.element_size)) - 1


def value_of_key(data_type: DataType, key: int) -> Union[int, float]:
    """The value (a Python int or float) whose order key is `key`."""
    sign = _sign(data_type)
    if data_type.is_float:
        bits = key - sign if key >= sign else sign | (sign - key)
        unsigned = np.uint16 if data_type is DataType.FLOAT16 else np.uint32
        return float(np.array(bits, unsigned).view(data_type.numpy_dtype))
    return key - sign


def pass_range(data_type: DataType, minimum: Union[int, float], maximum: Union[int, float],
               compared: Callable[[Union[int, float]], Union[int, float]]) -> Tuple[int, int]:
    """(LOW, HIGH): the order keys of the X whose `compared(value)` lies strictly between
    `minimum` and `maximum` (a NaN bound: no limit on that side); (1, 0) when there are none.
    `compared` is non-decreasing, so each side is one binary search over the keys."""
    first, last = key_range(data_type)

    def search(low: int, high: int, above: Callable[[int], bool]) -> int:
        """The first key in [low, high] where `above` holds (monotone), or high + 1."""
        while low <= high:
            middle = (low + high) // 2
            if above(middle):
                high = middle - 1
            else:
                low = middle + 1
        return low

    low = first if math.isnan(minimum) else search(
        first, last, lambda k: compared(value_of_key(data_type, k)) > minimum)
    high = last if math.isnan(maximum) else search(
        first, last, lambda k: compared(value_of_key(data_type, k)) >= maximum) - 1
    return (low, high) if low <= high else (1, 0)


def _as_float32(value: Union[int, float]) -> float:
    """X as CLIP_GRAD compares it: converted to float32, round to nearest even."""
    return float(np.float32(value))


@dataclass(frozen=True)
class ElementWiseClipGradDesc(_elementwise.ElementwiseGradDesc):
    """`DML_ELEMENT_WISE_CLIP_GRAD_OPERATOR_DESC`: three tensors of one data type (FLOAT32,
    FLOAT16, INT32, INT16, INT8, UINT32, UINT16, UINT8) and sizes, 1 to 8 dimensions, any
    strides (the output's may not overlap); Min and Max, floats (float32; +-Inf and NaN
    allowed)."""

    min: float = 0.0
    max: float = 0.0
    OPERATOR: ClassVar[str] = "ELEMENT_WISE_CLIP_GRAD"
    DATA_TYPES: ClassVar[Tuple[DataType, ...]] = DATA_TYPES
    # DirectML allows dX over X only (spec: the output may alias InputTensor).
    IN_PLACE: ClassVar[Dict[str, Tuple[str, ...]]] = {
        "output_gradient_tensor": ("input_tensor",)}

    def check_parameters(self) -> None:
        for name in self.parameter_names():
            object.__setattr__(self, name, check_float32(self.OPERATOR, dml_name(name),
                                                         getattr(self, name)))

    def kernel_parameters(self) -> Dict[str, object]:
        """LOW and HIGH, the order keys of the X that pass (the kernels compare integers)."""
        low, high = pass_range(self.input_tensor.data_type, self.min, self.max, _as_float32)
        return dict(LOW=low, HIGH=high)


def element_wise_clip_grad(input: np.ndarray, input_gradient: np.ndarray, min: float,
                           max: float, *, device: DeviceLike = None) -> np.ndarray:
    """dX = (input <= min or input >= max) ? 0 : input_gradient on the device, comparing
    input as float32 with float32 bounds (ELEMENT_WISE_CLIP_GRAD, for every data type; for a
    comparison in an integer array's own type, `element_wise_clip_grad1`); a packed array of
    input's dtype."""
    return _elementwise.run(ElementWiseClipGradDesc, input, input_gradient,
                            dict(min=min, max=max), device)
