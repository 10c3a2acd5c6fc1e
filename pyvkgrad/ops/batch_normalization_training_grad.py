"""DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD: the full gradient of training-mode batch
normalization, docs/semantics.md §5 followed literally (§6.7).

    Coef0          = 1 / sqrt(Variance + Epsilon)
    Xc             = X - mean_R(X)
    OutputGradient = Scale * Coef0 * (dY - mean_R(dY) - Xc * mean_R(dY * Xc) / (Variance + Epsilon))
    OutputScaleGradient = sum_R dY * (X - Mean) * Coef0
    OutputBiasGradient  = sum_R dY

OutputGradient recentres with the batch's own mean_R(X); the scale gradient uses the supplied
Mean (the two agree when Mean comes from the training forward on the same X). R = the
dimensions where the statistics' sizes are 1. Validation, axes and kernel plan are shared with
BATCH_NORMALIZATION_GRAD in `_batch_normalization.py`, `_batch_normalization_axes.py` and
`_batch_normalization_plan.py`.
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

OPERATOR = "BATCH_NORMALIZATION_TRAINING_GRAD"


@dataclass(frozen=True)
class BatchNormalizationTrainingGradDesc(bn.BatchNormalizationGradFields):
    """`DML_BATCH_NORMALIZATION_TRAINING_GRAD_OPERATOR_DESC`: the same eight tensors, rules and
    Epsilon as `BatchNormalizationGradDesc`."""

    OPERATOR: ClassVar[str] = OPERATOR
    TRAINING: ClassVar[bool] = True


def batch_normalization_training_grad(input: np.ndarray, input_gradient: np.ndarray, mean: np.ndarray,
                                      variance: np.ndarray, scale: np.ndarray, epsilon: float, *,
                                      device: DeviceLike = None) -> BatchNormalizationGradResult:
    """(output_gradient, output_scale_gradient, output_bias_gradient) on the device: packed
    arrays of input's dtype, shaped like input, mean and mean. Mean and Variance are the
    training forward's (biased variance); the statistics have input's rank, each size 1
    (reduced) or input's."""
    return bn.run(BatchNormalizationTrainingGradDesc, input, input_gradient, mean, variance,
                  scale, epsilon, device)
