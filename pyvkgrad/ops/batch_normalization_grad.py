"""DML_OPERATOR_BATCH_NORMALIZATION_GRAD: the gradient of batch normalization with constant
statistics (docs/semantics.md §4, §6.7).

    OutputGradient      = dY * Scale / sqrt(Variance + Epsilon)             (element-wise)
    OutputScaleGradient = sum_R dY * (X - Mean) / sqrt(Variance + Epsilon)
    OutputBiasGradient  = sum_R dY

R = the dimensions where the statistics' sizes are 1 (possibly none). Validation, axes and
kernel plan are shared with the training grad in `_batch_normalization.py`,
`_batch_normalization_axes.py` and `_batch_normalization_plan.py`; the output gradient's kernel
needs no reduction and runs beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..tensor import TensorDesc  # noqa: F401 (the inherited fields' type, for pdoc)
from . import _batch_normalization as bn
from ._batch_normalization import BatchNormalizationGradResult

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "BATCH_NORMALIZATION_GRAD"


@dataclass(frozen=True)
class BatchNormalizationGradDesc(bn.BatchNormalizationGradFields):
    """`DML_BATCH_NORMALIZATION_GRAD_OPERATOR_DESC`: eight tensors of one data type and rank
    (1 to 8); X, dY and dX share sizes; Mean, Variance, Scale and the two parameter
    gradients share sizes, each 1 or the input's; any strides (outputs may not overlap);
    Epsilon finite and >= 0."""

    OPERATOR: ClassVar[str] = OPERATOR
    TRAINING: ClassVar[bool] = False


def batch_normalization_grad(input: np.ndarray, input_gradient: np.ndarray, mean: np.ndarray,
                             variance: np.ndarray, scale: np.ndarray, epsilon: float, *,
                             device: DeviceLike = None) -> BatchNormalizationGradResult:
    """(output_gradient, output_scale_gradient, output_bias_gradient) on the device: packed
    arrays of input's dtype, shaped like input, mean and mean. The statistics have input's
    rank, each size 1 (reduced) or input's."""
    return bn.run(BatchNormalizationGradDesc, input, input_gradient, mean, variance, scale,
                  epsilon, device)
