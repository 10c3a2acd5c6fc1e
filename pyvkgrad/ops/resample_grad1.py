"""DML_OPERATOR_RESAMPLE_GRAD1: dX = W^T dY, the exact transpose of DML_RESAMPLE2
(docs/semantics.md §12).

RESAMPLE_GRAD with a mandatory RoundingDirection (DML_AXIS_DIRECTION), placed after
InterpolationMode. Per dimension the forward reads the coordinate

    x(o) = (float32(o) - OutputPixelOffset) / Scale - InputPixelOffset      (float32, this order)

and nearest neighbour takes clamp(floor(x)) for DECREASING, clamp(ceil(x)) for INCREASING (no
implicit + 0.5); linear is RESAMPLE_GRAD's and ignores the direction. So RESAMPLE_GRAD is
RESAMPLE_GRAD1(DECREASING) with every InputPixelOffset lowered by 0.5.

A thin descriptor: the checks, tables, plans and kernels are RESAMPLE_GRAD's
(resample_grad.py, `ResampleGradRules`), whose nearest tables already take both roundings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence, Tuple, Union

import numpy as np

from ..tensor import TensorDesc
from .resample_grad import AxisDirection, InterpolationMode, ResampleGradRules, run

if TYPE_CHECKING:
    from ..device import DeviceLike


@dataclass(frozen=True)
class ResampleGrad1Desc(ResampleGradRules):
    """`DML_RESAMPLE_GRAD1_OPERATOR_DESC`, fields in DirectML's order.

    input_gradient_tensor: dY, the forward output's sizes; output_gradient_tensor: dX, the
    forward input's sizes. One data type (FLOAT32 or FLOAT16), 1 to 4 dimensions, any strides
    (dX's may not overlap). interpolation_mode: InterpolationMode or "nearest_neighbor" /
    "linear". rounding_direction (required): AxisDirection or "decreasing" (floor) /
    "increasing" (ceil); nearest only, linear ignores it. scales, input_pixel_offsets,
    output_pixel_offsets: one float per dimension, the forward RESAMPLE2's; stored as float32
    values (Python floats). algorithm: "gather" (deterministic; "auto" means it) or "atomic".
    """

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    interpolation_mode: Union[InterpolationMode, str]
    rounding_direction: Union[AxisDirection, str]
    scales: Tuple[float, ...]
    input_pixel_offsets: Tuple[float, ...]
    output_pixel_offsets: Tuple[float, ...]
    algorithm: str = "gather"
    OPERATOR: ClassVar[str] = "RESAMPLE_GRAD1"
    ROUNDING_REQUIRED: ClassVar[bool] = True


def resample_grad1(input_gradient: np.ndarray, output_gradient_sizes: Sequence[int], *,
                   interpolation_mode: Union[str, InterpolationMode] = "nearest_neighbor",
                   rounding_direction: Union[str, AxisDirection],
                   scales: Optional[Sequence[float]] = None,
                   input_pixel_offsets: Optional[Sequence[float]] = None,
                   output_pixel_offsets: Optional[Sequence[float]] = None,
                   algorithm: str = "auto", device: DeviceLike = None) -> np.ndarray:
    """dX of a RESAMPLE2 whose input had `output_gradient_sizes` and whose output gradient is
    `input_gradient`; a packed array of input_gradient's dtype.

    rounding_direction has no default: DirectML requires it (and DirectMLX, whose
    `dml::Resample` defaults RESAMPLE2's to INCREASING, has no RESAMPLE_GRAD1 helper). The
    other defaults are `resample_grad`'s: interpolation_mode nearest neighbour and, as
    DirectMLX's `dml::ResampleGrad` (pyvkgrad/defaults.py), scales = input_gradient size /
    output_gradient size per dimension (in float32), input offsets 0.5, output offsets -0.5.
    algorithm: "auto" (= "gather", deterministic), "gather" or "atomic".
    """
    return run(ResampleGrad1Desc, input_gradient, output_gradient_sizes,
               dict(interpolation_mode=interpolation_mode, rounding_direction=rounding_direction,
                    scales=scales, input_pixel_offsets=input_pixel_offsets,
                    output_pixel_offsets=output_pixel_offsets), algorithm, device)
