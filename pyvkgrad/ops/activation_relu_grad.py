"""DML_OPERATOR_ACTIVATION_RELU_GRAD: dX = X > 0 ? dY : +0, element-wise (docs/semantics.md §2).

X = 0, -0 and NaN give +0; a NaN in dY passes where X > 0 (docs/semantics.md §6.6). A select on
bit patterns, not a multiply, so results are bit copies of dY or +0 in float32 and float16 alike
(the formula: shaders/include/activation_relu_grad.glsl, on the element-wise base).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..tensor import TensorDesc  # noqa: F401 (the inherited fields' type, for pdoc)
from . import _elementwise

if TYPE_CHECKING:
    from ..device import DeviceLike


@dataclass(frozen=True)
class ActivationReluGradDesc(_elementwise.ElementwiseGradDesc):
    """`DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC`: three tensors of one data type and sizes,
    1 to 8 dimensions, any strides (the output's may not overlap)."""

    OPERATOR: ClassVar[str] = "ACTIVATION_RELU_GRAD"


def activation_relu_grad(input: np.ndarray, input_gradient: np.ndarray, *,
                         device: DeviceLike = None) -> np.ndarray:
    """dX = input > 0 ? input_gradient : 0 on the device; a packed array of input's dtype."""
    return _elementwise.run(ActivationReluGradDesc, input, input_gradient, {}, device)
