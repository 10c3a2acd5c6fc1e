"""DML_OPERATOR_BATCH_NORMALIZATION_TRAINING: training-mode batch normalization's forward,
with the batch's statistics (docs/semantics.md §18).

    R        = the dimensions where ScaleTensor's size is 1;  n = the elements of R
    Mean     = sum_R X / n
    Variance = sum_R (X - Mean)^2 / n            (biased; without Epsilon)
    Output   = Act(Scale (X - Mean) / sqrt(Variance + Epsilon) + Bias [+ FusedAdd])

Act is the identity or ReLU (`fused_activation="ACTIVATION_RELU"`). The sums are exact
(shaders/include/exact_sums.glsl): a channel's elements are summed in float32 in chunks of 16
whose membership and tree are fixed by the problem, and the chunk sums are added as integers,
so the results are the same bits on every device, whatever its subgroup size, the workgroup
width or the plan. Two dispatches: the sums and, as each channel's sums complete, its
statistics (batch_normalization_training_sums), then Output, element-wise
(batch_normalization_training_output). Where one work item takes each channel whole and Output
and FusedAdd are laid out as X, that item writes the channel's Output itself (OUTPUT_HERE), in
one dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, ClassVar, Optional, Tuple

import numpy as np

from ..plan import (READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, grid_slices,
                    right_align)
from ..tensor import (TensorDesc, check_desc, check_float_type, check_output, check_rank,
                      check_same, coalesce, fail)
from . import _one_call
from ._batch_normalization import BatchNormalizationTrainingResult, check_epsilon
from ._batch_normalization_axes import Axes, channel_run
from ._batch_normalization_sums import sums_and_finish

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "BATCH_NORMALIZATION_TRAINING"
# The fused activations implemented: none, or DML_OPERATOR_ACTIVATION_RELU.
FUSED_ACTIVATIONS = (None, "ACTIVATION_RELU")
# (descriptor field, DirectML field, access), in DirectML's order.
FIELDS = (("input_tensor", "InputTensor", READ), ("scale_tensor", "ScaleTensor", READ),
          ("bias_tensor", "BiasTensor", READ), ("fused_add_tensor", "FusedAddTensor", READ),
          ("output_tensor", "OutputTensor", WRITE),
          ("output_mean_tensor", "OutputMeanTensor", WRITE),
          ("output_variance_tensor", "OutputVarianceTensor", WRITE))
STATISTICS_SHAPED = ("BiasTensor", "OutputMeanTensor", "OutputVarianceTensor")
@dataclass(frozen=True)
class BatchNormalizationTrainingDesc(OperatorDesc):
    """`DML_BATCH_NORMALIZATION_TRAINING_OPERATOR_DESC`. Every tensor FLOAT32 or FLOAT16 (one
    type) with InputTensor's rank (1 to 8); Scale, Bias, OutputMean and OutputVariance of one
    set of sizes, each 1 (reduced) or InputTensor's; FusedAdd (optional) and Output of
    InputTensor's sizes. Epsilon >= 0, finite in float32. fused_activation: None or
    "ACTIVATION_RELU" (DirectML's DML_OPERATOR_ACTIVATION_RELU, with no tensors). No output
    may share memory with an input."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc
    bias_tensor: TensorDesc
    fused_add_tensor: Optional[TensorDesc]
    output_tensor: TensorDesc
    output_mean_tensor: TensorDesc
    output_variance_tensor: TensorDesc
    epsilon: float
    fused_activation: Optional[str] = None
    OPERATOR: ClassVar[str] = OPERATOR
    INDEPENDENT_AXES: ClassVar[str] = ("only the channel axes (where the statistics' sizes are "
                                       "not 1), never those they reduce over")

    def __post_init__(self) -> None:
        descs = {dml: check_desc(OPERATOR, dml, getattr(self, name))
                 for name, dml, _ in FIELDS if name != "fused_add_tensor"
                 or self.fused_add_tensor is not None}
        x = descs["InputTensor"]
        check_rank(OPERATOR, "InputTensor", x, 1, 8)
        check_float_type(OPERATOR, "InputTensor", x)
        others = [(dml, d) for dml, d in descs.items() if dml != "InputTensor"]
        check_same(OPERATOR, "data_type", ("InputTensor", x), *others)
        for dml, d in others:
            if d.rank != x.rank:
                fail(OPERATOR, f"{dml}.DimensionCount", "must equal InputTensor.DimensionCount",
                     x.rank, d.rank)
        check_same(OPERATOR, "sizes", ("InputTensor", x),
                   *[(n, descs[n]) for n in ("FusedAddTensor", "OutputTensor") if n in descs])
        scale = descs["ScaleTensor"]
        for d, (m, s) in enumerate(zip(scale.sizes, x.sizes)):
            if m not in (1, s):
                fail(OPERATOR, f"ScaleTensor.Sizes[{d}]", f"must be 1 or InputTensor.Sizes[{d}]",
                     f"1 or {s}", m)
        check_same(OPERATOR, "sizes", ("ScaleTensor", scale),
                   *[(n, descs[n]) for n in STATISTICS_SHAPED])
        for name, dml, access in FIELDS:
            if access == WRITE:
                check_output(OPERATOR, dml, descs[dml])
        object.__setattr__(self, "epsilon", check_epsilon(OPERATOR, self.epsilon))
        if not (self.fused_activation is None or isinstance(self.fused_activation, str)) \
                or self.fused_activation not in FUSED_ACTIVATIONS:
            fail(OPERATOR, "FusedActivation", "must be one of the activations implemented",
                 " or ".join(map(repr, FUSED_ACTIVATIONS)), repr(self.fused_activation))

    def tensor_fields(self) -> Tuple[Tuple[str, Tuple[TensorDesc, str]], ...]:
        return tuple((name, (getattr(self, name), access)) for name, _, access in FIELDS
                     if getattr(self, name) is not None)

    def independent_axes(self) -> Tuple[int, ...]:
        """The kept (channel) axes, where the statistics' sizes are not 1."""
        return tuple(a for a, n in enumerate(self.scale_tensor.sizes) if n != 1)

    def plan(self, limits: Limits) -> Plan:
        return _plan(self, limits)


# ---- the plan -----------------------------------------------------------------------------------

def _plan(desc: BatchNormalizationTrainingDesc, limits: Limits) -> Plan:
    x, scale = desc.input_tensor, desc.scale_tensor
    is_f16 = x.data_type.element_size == 2
    axes = Axes(SimpleNamespace(input_tensor=x, input_gradient_tensor=x, mean_tensor=scale))
    wg = limits.local_size
    tensors = tuple(name for name, _ in desc.tensor_fields())

    # The sums of a = X - shift and a^2, and as each channel's complete, its statistics. The
    # kernel's grad bindings (dY, Mean, Variance read; dX and the parameter gradients written)
    # name buffers it does not touch: inputs and the scratch. Where Output and FusedAdd are
    # laid out as X, the kernel may write Output too (OUTPUT_HERE): its dX binding is Output,
    # its dY FusedAdd.
    ksizes, (kx, ks, kb, km, kv) = axes.over(axes.kept, x, scale, desc.bias_tensor,
                                             desc.output_mean_tensor,
                                             desc.output_variance_tensor)
    y, fused = desc.output_tensor, desc.fused_add_tensor
    live = [d for d in range(x.rank) if x.sizes[d] > 1]
    as_x = all(t.element_strides[d] == x.element_strides[d] for d in live
               for t in (y, fused) if t is not None)
    output_here = (dict(dx="output_tensor", dy="input_tensor" if fused is None
                        else "fused_add_tensor"),
                   dict(FUSED_ADD=fused is not None,
                        RELU=desc.fused_activation == "ACTIVATION_RELU")) if as_x else None
    sums = sums_and_finish(
        OPERATOR, axes, x, limits, 2,
        dict(x="input_tensor", dy="input_tensor", mean="scale_tensor", variance="scale_tensor",
             scale="scale_tensor", bias="bias_tensor", output_mean="output_mean_tensor",
             output_variance="output_variance_tensor", dx="partials", dscale="partials",
             dbias="partials"),
        dict(K_SIZES=ksizes, K_X_STRIDES=kx, K_SCALE_STRIDES=ks, K_BIAS_STRIDES=kb,
             K_OUTPUT_MEAN_STRIDES=km, K_OUTPUT_VARIANCE_STRIDES=kv, EPSILON=desc.epsilon),
        coefficients=1, output=output_here)
    if sums.output_here:
        return Plan(sums.dispatches, sums.scratch, tensors=tensors)

    # Output, element-wise, in Output's memory order (PAIRS: float16 words of a packed Output).
    extra = fused if fused is not None else x
    order = sorted(live, key=lambda d: y.element_strides[d], reverse=True)
    sizes, strides = coalesce([x.sizes[d] for d in order],
                              *[[t.element_strides[d] for d in order] for t in (x, extra, y)],
                              [axes.channel_strides[d] for d in order])
    # An item: a 16-byte vector where every tensor walked is packed (its elements share a
    # channel where the innermost dimension is reduced and a multiple of the vector: SAME),
    # else a float16 word of a packed Output (2), else one element.
    width = 8 if is_f16 else 4
    packed = x.is_packed and y.is_packed and (fused is None or fused.is_packed)
    if packed and x.element_count % width == 0:
        vec = width
    else:
        vec = 2 if is_f16 and y.is_packed else 1
    same = vec == width and strides[3][-1] == 0 and sizes[-1] % width == 0
    count = -(-x.element_count // vec)
    constants = dict(WG=wg, IS_F16=is_f16, FUSED_ADD=fused is not None,
                     RELU=desc.fused_activation == "ACTIVATION_RELU", VEC=vec, SAME=same,
                     RUN=channel_run(sizes, strides[3], width) if vec == width else 0,
                     SIZES=right_align(sizes, 8, 1),
                     **{f"{name}_STRIDES": right_align(s, 8, 0) for name, s in
                        zip(("X", "FUSED_ADD", "Y", "CHANNEL"), strides)})
    output = tuple(
        Dispatch("batch_normalization_training_output",
                 dict(x="input_tensor", fused_add="fused_add_tensor" if fused is not None
                      else "input_tensor", coefficients="coefficients", y="output_tensor"),
                 workgroups, constants=constants,
                 push=dict(count=end, first=first, elements=x.element_count))
        # (A vector item's loop over its 4 words: 4 iterations and the test that ends it.)
        for first, end, workgroups in grid_slices(count, wg, limits,
                                                  1 + (4 + 1 if vec > 2 else 0)))
    return Plan(sums.dispatches + output, sums.scratch, tensors=tensors)


# ---- the one-call function ----------------------------------------------------------------------

def batch_normalization_training(input: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                                 epsilon: float, *, fused_add: Optional[np.ndarray] = None,
                                 fused_activation: Optional[str] = None,
                                 device: DeviceLike = None) -> BatchNormalizationTrainingResult:
    """(output, output_mean, output_variance) on the device: new packed arrays of input's
    dtype, shaped like input, scale and scale. scale and bias have input's rank, each size 1
    (reduced) or input's; fused_add (optional) input's shape; fused_activation None or
    "ACTIVATION_RELU"."""
    arrays = {"input": input, "scale": scale, "bias": bias}
    if fused_add is not None:
        arrays["fused_add"] = fused_add

    def describe(d, dev):
        x, s = d["input"], d["scale"]
        desc = BatchNormalizationTrainingDesc(
            x, s, d["bias"], d.get("fused_add"), x.with_sizes(x.sizes), s.with_sizes(s.sizes),
            s.with_sizes(s.sizes), epsilon, fused_activation)
        item = x.data_type.element_size
        return desc, {"output": (np.shape(input), item), "output_mean": (np.shape(scale), item),
                      "output_variance": (np.shape(scale), item)}

    def rerun(dev, **pieces):
        return batch_normalization_training(
            pieces["input"], pieces["scale"], pieces["bias"], epsilon,
            fused_add=pieces.get("fused_add"), fused_activation=fused_activation, device=dev)

    return BatchNormalizationTrainingResult(*_one_call.run(
        OPERATOR, device, (epsilon, fused_activation), arrays, describe, rerun))
