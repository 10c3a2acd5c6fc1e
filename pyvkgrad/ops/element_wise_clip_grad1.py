"""DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD1: ELEMENT_WISE_CLIP_GRAD with Min and Max in the tensors'
own data type, compared in it (exact for integers; docs/semantics.md §10).

MinMaxDataType must equal the tensors' data type. Min and Max (DirectML's DML_SCALAR_UNION):
for an integer type an integer within its range; for FLOAT32 or FLOAT16 a number the type
holds exactly (+-Inf and NaN included; a value that would round is refused, so a float16
bound is the half it names: numpy.float16 values, or a bit pattern through
`numpy.uint16(bits).view(numpy.float16)`). The kernels are ELEMENT_WISE_CLIP_GRAD's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, Optional, Tuple, Union

import numpy as np

from ..tensor import DATA_TYPE_VALUES, DataType, dml_name, fail, real_number
from ..tensor import TensorDesc  # noqa: F401 (the inherited fields' type, for pdoc)
from . import _elementwise
from .element_wise_clip_grad import DATA_TYPES, pass_range

if TYPE_CHECKING:
    from ..device import DeviceLike

Scalar = Union[int, float]


def check_scalar(operator: str, field: str, value: object, data_type: DataType) -> Scalar:
    """A DML_SCALAR_UNION bound of `data_type`: an int within an integer type's range, or a
    number a float type holds exactly (+-Inf, NaN included), returned as a Python int or
    float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        fail(operator, field, "must be a number", data_type.numpy_dtype.name,
             type(value).__name__, TypeError)
    if not data_type.is_float:
        if not isinstance(value, (int, np.integer)):
            fail(operator, field, f"must be an integer for {data_type.name}", "int",
                 type(value).__name__, TypeError)
        info = np.iinfo(data_type.numpy_dtype)
        if not info.min <= int(value) <= info.max:
            fail(operator, field, f"must fit {data_type.name}", f"{info.min} to {info.max}",
                 int(value))
        return int(value)
    number = real_number(operator, field, value)
    with np.errstate(over="ignore"):
        held = float(data_type.numpy_dtype.type(number))
    if not (held == number or math.isnan(number)):
        fail(operator, field, f"must be exactly representable in {data_type.name}",
             f"a {data_type.numpy_dtype.name} value (e.g. {held!r})", number)
    return number


@dataclass(frozen=True)
class ElementWiseClipGrad1Desc(_elementwise.ElementwiseGradDesc):
    """`DML_ELEMENT_WISE_CLIP_GRAD1_OPERATOR_DESC`: three tensors of one data type (FLOAT32,
    FLOAT16, INT32, INT16, INT8, UINT32, UINT16, UINT8) and sizes, 1 to 8 dimensions, any
    strides (the output's may not overlap); MinMaxDataType, the tensors' data type; Min and
    Max in it."""

    min_max_data_type: Optional[DataType] = None
    min: Scalar = 0
    max: Scalar = 0
    OPERATOR: ClassVar[str] = "ELEMENT_WISE_CLIP_GRAD1"
    KERNEL: ClassVar[str] = "element_wise_clip_grad"
    DATA_TYPES: ClassVar[Tuple[DataType, ...]] = DATA_TYPES
    # DirectML allows dX over X only (spec: the output may alias InputTensor).
    IN_PLACE: ClassVar[Dict[str, Tuple[str, ...]]] = {
        "output_gradient_tensor": ("input_tensor",)}

    def check_parameters(self) -> None:
        op, data_type = self.OPERATOR, self.input_tensor.data_type
        given = self.min_max_data_type
        if isinstance(given, (bool, np.bool_)) or not (
                isinstance(given, DataType) or (isinstance(given, (int, np.integer))
                                                and int(given) in DATA_TYPE_VALUES)):
            fail(op, "MinMaxDataType", "must be a DataType", data_type.name, repr(given),
                 TypeError)
        if DataType(int(given)) is not data_type:
            fail(op, "MinMaxDataType", "must equal InputTensor.DataType", data_type.name,
                 DataType(int(given)).name, TypeError)
        object.__setattr__(self, "min_max_data_type", data_type)
        for name in ("min", "max"):
            object.__setattr__(self, name, check_scalar(op, dml_name(name), getattr(self, name),
                                                        data_type))

    def kernel_parameters(self) -> Dict[str, object]:
        """LOW and HIGH, the order keys of the X that pass (ELEMENT_WISE_CLIP_GRAD's kernels)."""
        low, high = pass_range(self.input_tensor.data_type, self.min, self.max, lambda v: v)
        return dict(LOW=low, HIGH=high)


def element_wise_clip_grad1(input: np.ndarray, input_gradient: np.ndarray, min: Scalar,
                            max: Scalar, *, device: DeviceLike = None) -> np.ndarray:
    """dX = (input <= min or input >= max) ? 0 : input_gradient on the device, compared in
    input's own data type (ELEMENT_WISE_CLIP_GRAD1; MinMaxDataType is input's type); a packed
    array of input's dtype."""
    return _elementwise.run(ElementWiseClipGrad1Desc, input, input_gradient,
                            dict(min_max_data_type=_data_type_of(input), min=min, max=max),
                            device)


def _data_type_of(array: np.ndarray) -> Optional[DataType]:
    """The array's DataType for MinMaxDataType; what is no supported array is left to the
    descriptor's checks of the tensors (None)."""
    try:
        return DataType.from_numpy(array.dtype, "", "", DATA_TYPES)
    except (AttributeError, TypeError):
        return None
