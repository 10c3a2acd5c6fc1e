"""What BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD share: the descriptor
base (eight tensors and Epsilon), their validation and the one-call driver. The tensor fields
and the reduction axes are in `_batch_normalization_axes.py`, the kernel plan in
`_batch_normalization_plan.py` (its OutputGradient dispatches in
`_batch_normalization_output.py`).
"""

from dataclasses import dataclass
from typing import ClassVar, Dict, NamedTuple, Tuple

import numpy as np

from ..plan import WRITE, Limits, OperatorDesc, Plan
from ..tensor import (TensorDesc, check_desc, check_float, check_float_type, check_output,
                      check_rank, check_same, fail)
from . import _one_call
from ._batch_normalization_axes import FIELDS
from ._batch_normalization_plan import plan


class BatchNormalizationGradResult(NamedTuple):
    """The BatchNorm grads' outputs: dX, dScale and dBias (DirectML's OutputGradient,
    OutputScaleGradient, OutputBiasGradient)."""

    output_gradient: np.ndarray
    output_scale_gradient: np.ndarray
    output_bias_gradient: np.ndarray


class BatchNormalizationTrainingResult(NamedTuple):
    """BATCH_NORMALIZATION_TRAINING's outputs: DirectML's OutputTensor, OutputMeanTensor and
    OutputVarianceTensor (here, beside the grads' result: a module without postponed
    annotations, so that the API reference resolves np.ndarray)."""

    output: np.ndarray
    output_mean: np.ndarray
    output_variance: np.ndarray


INPUT_SHAPED = ("InputGradientTensor", "OutputGradientTensor")
STATISTICS_SHAPED = ("VarianceTensor", "ScaleTensor", "OutputScaleGradientTensor",
                     "OutputBiasGradientTensor")


# ---- validation ---------------------------------------------------------------------------------

def validate(desc) -> float:
    """docs/semantics.md §8 for the eight tensors, and Epsilon; returns Epsilon as a float.

    Epsilon must be finite and >= 0 (also in float32). 0 is allowed, as in DirectML: then a
    zero variance gives infinite or NaN results, as in float64 arithmetic.
    """
    op = desc.OPERATOR
    descs = {dml: check_desc(op, dml, getattr(desc, name)) for name, dml, _ in FIELDS}
    x = descs["InputTensor"]
    check_rank(op, "InputTensor", x, 1, 8)
    others = [(dml, d) for dml, d in descs.items() if dml != "InputTensor"]
    check_same(op, "data_type", ("InputTensor", x), *others)
    check_float_type(op, "InputTensor", x)
    for dml, d in others:
        if d.rank != x.rank:
            fail(op, f"{dml}.DimensionCount", "must equal InputTensor.DimensionCount", x.rank,
                 d.rank)
    check_same(op, "sizes", ("InputTensor", x), *[(n, descs[n]) for n in INPUT_SHAPED])
    mean = descs["MeanTensor"]
    for d, (m, s) in enumerate(zip(mean.sizes, x.sizes)):
        if m not in (1, s):
            fail(op, f"MeanTensor.Sizes[{d}]", f"must be 1 or InputTensor.Sizes[{d}]",
                 f"1 or {s}", m)
    check_same(op, "sizes", ("MeanTensor", mean), *[(n, descs[n]) for n in STATISTICS_SHAPED])
    for name, dml, access in FIELDS:
        if access == WRITE:
            check_output(op, dml, descs[dml])
    return check_epsilon(op, desc.epsilon)


def check_epsilon(op: str, epsilon) -> float:
    return check_float(op, "Epsilon", epsilon, non_negative=True)


def tensor_fields(desc):
    return tuple((name, (getattr(desc, name), access)) for name, _, access in FIELDS)


# ---- the descriptor -----------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchNormalizationGradFields(OperatorDesc):
    """The eight tensor fields (DirectML's order) and Epsilon both BatchNorm grad descriptors
    share, with their validation and plan; each operator file subclasses it with its
    `OPERATOR` and `TRAINING`."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    mean_tensor: TensorDesc
    variance_tensor: TensorDesc
    scale_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    output_scale_gradient_tensor: TensorDesc
    output_bias_gradient_tensor: TensorDesc
    epsilon: float
    OPERATOR: ClassVar[str] = ""
    TRAINING: ClassVar[bool] = False
    # dX may be X's or dY's tensor (identical descriptors): every kernel reads an element's
    # X and dY before it writes that element's dX, and reductions finish before dX is written.
    IN_PLACE: ClassVar[Dict[str, Tuple[str, ...]]] = {
        "output_gradient_tensor": ("input_tensor", "input_gradient_tensor")}
    # Along which axes the one-call function may cut a problem too large for one buffer.
    INDEPENDENT_AXES: ClassVar[str] = ("only the channel axes (where the statistics' sizes are "
                                       "not 1), never those they reduce over")

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", validate(self))

    def tensor_fields(self) -> Tuple[Tuple[str, Tuple[TensorDesc, str]], ...]:
        return tensor_fields(self)

    def independent_axes(self) -> Tuple[int, ...]:
        """Axes along which outputs depend only on the same slice of the inputs: the kept
        (channel) axes, where the statistics' sizes are not 1."""
        return tuple(a for a, n in enumerate(self.mean_tensor.sizes) if n != 1)

    def plan(self, limits: Limits) -> Plan:
        return plan(self, limits, training=self.TRAINING)


# ---- the one-call functions ---------------------------------------------------------------------

def run(desc_cls, input, input_gradient, mean, variance, scale, epsilon, device):
    """Describe the arrays, build the descriptor (packed outputs), run, read three outputs."""

    def describe(d, dev):
        x, m = d["input"], d["mean"]
        desc = desc_cls(x, d["input_gradient"], m, d["variance"], d["scale"], x.with_sizes(x.sizes),
                        m.with_sizes(m.sizes), m.with_sizes(m.sizes), epsilon)
        item = x.data_type.element_size
        # Each statistic (channel) index is a problem of its own; reduced axes are not cut.
        return desc, {"output_gradient": (np.shape(input), item),
                      "output_scale_gradient": (np.shape(mean), item),
                      "output_bias_gradient": (np.shape(mean), item)}

    return BatchNormalizationGradResult(*_one_call.run(
        desc_cls.OPERATOR, device, (epsilon,),
        {"input": input, "input_gradient": input_gradient, "mean": mean, "variance": variance,
         "scale": scale}, describe,
        lambda dev, **p: run(desc_cls, epsilon=epsilon, device=dev, **p)))
