"""DML_OPERATOR_RESAMPLE_GRAD: dX = W^T dY, the exact transpose of DML_RESAMPLE1
(docs/semantics.md §3).

The parameters are the forward's (docs/semantics.md §6.1): `Scales`, `InputPixelOffsets` and
`OutputPixelOffsets` of the RESAMPLE1 whose input has dX's sizes and whose output has dY's.
Per dimension d the forward reads, for output index o, the input coordinate
(docs/semantics.md §6.2)

    x(o) = (float32(o) - OutputPixelOffset) / Scale - InputPixelOffset      (float32, this order)

Nearest neighbour takes clamp(floor(x + 0.5)) (RESAMPLE1, ties up), or with a rounding direction
(DML_RESAMPLE_GRAD1) clamp(floor(x)) for "decreasing" and clamp(ceil(x)) for "increasing".
Linear takes floor(x) with weight 1 - f and floor(x) + 1 with weight f (f = x - floor(x), both
in float32), each index clamped to the edge (a clamped tap keeps its weight). The map is
separable, so dX[i] = sum_o dY[o] * prod_d W_d[o_d, i_d].

Every coordinate, index and weight is computed on the host, in exact float32 numpy
(GPU float division is not correctly rounded everywhere), into small per-axis tables (sizes
summed over axes, never multiplied; _resample_grad_tables.py); the kernels only look them up
(the plans: _resample_grad_plan.py):

* "gather" (default): each dX element is summed by one invocation, in one canonical order
  fixed by the problem alone (no atomics), so results are the same bits from run to run, on
  every device, with every plan, workgroup width and subgroup size (docs/semantics.md §6.15).
  Per axis the forward outputs that read input i form a contiguous range (the map is
  monotone), stored as BEG[i] (first o), CNT[i..i+1] (prefix counts) and WGT (the weights,
  linear only). The canonical order (include/resample_grad.glsl): the element's terms in
  ascending logical dY order (o0, o1, ... with the last axis innermost), float32 from +0;
  nearest acc = acc + dY; linear, per row (one combination of the contributors along the axes
  before the innermost resampled axis R) h = h + dY * w_R from +0, then acc = acc + h * w_outer,
  w_outer = ((w0 * w1) * w2) over the axes before R. Each multiply and add is rounded on its
  own (no fma: Vulkan lets a device fuse it or not) on `precise` values (no contraction).
  Three kernel families compute exactly that:
  - `resample_grad_walk` (and `resample_grad_walk_pair`), used where at most two axes are
    resampled (`_walk_plan`): an invocation owns a block of dX, ROWS x COLS elements of the two
    resampled axes, walks the dY rows they read once each, ascending, adding every loaded value
    into the rows and columns that read it (the rows through the forward table of the outer
    axis, the columns through their transposed ranges). So each dY value is loaded once per
    block instead of once per contributor, and per-tap table loads are gone. Lanes run along
    the memory-innermost axis (the columns, or the channels of an NHWC layout), and a float16
    invocation owns whole 32-bit words of dX (two columns, or two channels) where the layout
    allows, storing without atomics.
  - `resample_grad_gather`, the general one: one invocation per dX element (per float16 word
    of a packed dX, PAIRED), any number of resampled axes.
  - `resample_grad_gather_windowed`, where a driver ends long loops before an element's terms
    are summed (`_windows`): one dispatch per window, a range of term numbers in every
    element's canonical order, each going on from the running sums (acc, and linear's
    unfinished row sum h) the last one left in float32 scratch, which resample_grad_convert
    then stores in dX's type and layout. No window changes a rounding.
* "atomic": one invocation per dY element scatters into its taps with float32 atomic adds
  (`resample_grad_atomic_native` where the device's float atomic add is enabled, else
  `resample_grad_atomic`, a compare-and-swap loop), after `resample_grad_fill` zeroes the
  accumulator: a packed float32 dX itself, or a packed float32 scratch that
  `resample_grad_convert` stores into dX's type and layout (rounding float16 once), so that
  nothing between a strided dX's elements is written. Per axis the forward table is FWD[o]
  (first tap), then the weights of taps i0 and i0 + 1 (linear only).

Choices where DirectML is silent:
* rounding_direction only affects nearest neighbour (as in DML_RESAMPLE_GRAD1); it is accepted
  and ignored with linear.
* Taps of weight exactly 0 (linear, f = 0) are dropped, so a non-finite dY next to them does not
  spread NaN (keep gradients finite; DirectML's behaviour is unknown, docs/semantics.md §6.11).
* A coordinate that overflows float32 (a tiny Scale) clamps to the edge element with weight 1.
* An axis whose map is the identity (same sizes, o reads exactly i) uses no table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, Optional, Sequence, Tuple, Type, Union

import numpy as np

from .. import defaults
from ..plan import READ, WRITE, Limits, OperatorDesc, Plan
from ..tensor import (TensorDesc, as_uint_tuple, check_desc, check_float_type, check_output,
                      check_rank, check_same, enum_value, fail, named_desc, real_number)
from . import _one_call, _resample_grad_plan
from ._resample_grad_plan import MAX_COUNT
# The operator's name and parameter enums are defined with the tables (the bottom of the
# ResampleGrad modules, no import cycle); this module is their public home.
from ._resample_grad_tables import (IDENTITY_MAP, OPERATOR, AxisDirection, AxisMap,
                                    InterpolationMode,
                                    axis_map, is_identity)
from ._split import largest_buffer

if TYPE_CHECKING:
    from ..device import DeviceLike

MAX_RANK = 4

ALGORITHMS = ("gather", "atomic")


# ---- parameter normalisation -------------------------------------------------------------------

def _float32_array(operator: str, values, field: str, rank: int):
    """DirectML's FLOAT[DimensionCount] array: one real number per dimension, as float32."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        fail(operator, field, "must be a sequence of numbers", "a sequence",
             type(values).__name__, TypeError)
    values = tuple(values)
    for d, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                                   np.floating)):
            fail(operator, f"{field}[{d}]", "must be a real number", "int or float",
                 type(v).__name__, TypeError)
    if len(values) != rank:
        fail(operator, field, "must have one entry per dimension", rank, len(values))
    numbers = [real_number(operator, f"{field}[{d}]", v) for d, v in enumerate(values)]
    with np.errstate(over="ignore"):
        return tuple(np.float32(v) for v in numbers), values


class ResampleGradRules(OperatorDesc):
    """What `ResampleGradDesc` and `ResampleGrad1Desc` (resample_grad1.py) share: the checks,
    tensor fields, independent axes, per-axis maps and plan. Each declares its own dataclass
    fields, in its DirectML struct's order (RESAMPLE_GRAD1 has RoundingDirection after
    InterpolationMode), and its OPERATOR, which every error message names."""

    # Along which axes the one-call function may cut a problem too large for one buffer.
    INDEPENDENT_AXES: ClassVar[str] = "only the axes that are not resampled"
    # RESAMPLE_GRAD1's RoundingDirection is mandatory; RESAMPLE_GRAD takes None (RESAMPLE1).
    ROUNDING_REQUIRED: ClassVar[bool] = False

    def __post_init__(self) -> None:
        op = self.OPERATOR
        dy = check_desc(op, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(op, "OutputGradientTensor", self.output_gradient_tensor)
        check_rank(op, "InputGradientTensor", dy, 1, MAX_RANK)
        if dx.rank != dy.rank:
            fail(op, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy.rank, dx.rank)
        check_same(op, "data_type", ("InputGradientTensor", dy), ("OutputGradientTensor", dx))
        check_float_type(op, "InputGradientTensor", dy)
        check_output(op, "OutputGradientTensor", dx)
        mode = enum_value(op, InterpolationMode, self.interpolation_mode, "InterpolationMode",
                          "'nearest_neighbor' or 'linear' (InterpolationMode)")
        rounding = self.rounding_direction
        if rounding is not None or self.ROUNDING_REQUIRED:
            rounding = enum_value(op, AxisDirection, rounding, "RoundingDirection",
                                  ("" if self.ROUNDING_REQUIRED else "None, ")
                                  + "'decreasing' or 'increasing' (AxisDirection)")
        algorithm = self.algorithm
        if not isinstance(algorithm, str):
            fail(op, "algorithm", "must be a string", "'auto', 'gather' or 'atomic'",
                 type(algorithm).__name__, TypeError)
        if algorithm == "auto":
            algorithm = "gather"  # deterministic by default
        if algorithm not in ALGORITHMS:
            fail(op, "algorithm", "is not supported", "'auto', 'gather' or 'atomic'",
                 repr(algorithm))
        scales, given = _float32_array(op, self.scales, "Scales", dy.rank)
        for d, (s32, s) in enumerate(zip(scales, given)):
            if not (s > 0 and math.isfinite(s)):
                fail(op, f"Scales[{d}]", "must be positive and finite", "> 0", float(s))
            if not (s32 > 0 and np.isfinite(s32)):
                fail(op, f"Scales[{d}]", "must be positive and finite in float32",
                     f"> 0 and <= {float(np.finfo(np.float32).max)}", float(s))
        offsets = {}
        for field, name in (("input_pixel_offsets", "InputPixelOffsets"),
                            ("output_pixel_offsets", "OutputPixelOffsets")):
            values, given = _float32_array(op, getattr(self, field), name, dy.rank)
            for d, (v32, v) in enumerate(zip(values, given)):
                if not np.isfinite(v32):
                    fail(op, f"{name}[{d}]", "must be finite", "a finite float32", float(v))
            offsets[field] = tuple(float(v) for v in values)
        object.__setattr__(self, "interpolation_mode", mode)
        object.__setattr__(self, "rounding_direction", rounding)
        object.__setattr__(self, "algorithm", algorithm)
        object.__setattr__(self, "scales", tuple(float(s) for s in scales))
        for field, values in offsets.items():
            object.__setattr__(self, field, values)

    def tensor_fields(self) -> Tuple[Tuple[str, Tuple[TensorDesc, str]], ...]:
        return (("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def cut_candidates(self) -> Tuple[int, ...]:
        """Only an axis of equal sizes may be the identity (found without any table)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        return tuple(a for a in range(dy.rank) if dy.sizes[a] == dx.sizes[a])

    def independent_axes(self) -> Tuple[int, ...]:
        """Axes along which dX's slice depends only on dY's same slice, with the same
        parameters: those whose map is the identity (same sizes, o reads exactly i). Decided
        without building any table (`is_identity`)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        return tuple(d for d in range(dy.rank)
                     if dx.sizes[d] == dy.sizes[d]
                     and is_identity(dy.sizes[d], linear, self.scales[d],
                                     self.input_pixel_offsets[d],
                                     self.output_pixel_offsets[d], self.rounding_direction))

    # -- per-axis maps, exact float32 on the host --

    def axis_maps(self) -> Tuple[AxisMap, ...]:
        """One `AxisMap` per dimension, outermost first (an identity axis's holds no table)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        identity = self.independent_axes()
        return tuple(IDENTITY_MAP if d in identity else
                     axis_map(dx.sizes[d], dy.sizes[d], linear, self.scales[d],
                              self.input_pixel_offsets[d], self.output_pixel_offsets[d],
                              self.rounding_direction)
                     for d in range(dy.rank))

    def plan(self, limits: Limits, gather: Optional[Dict[str, object]] = None) -> Plan:
        """The dispatches on a device with `limits`. `gather` (benchmarks and tests) chooses
        among the gather kernels: {"kernel": "auto" | "walk" | "gather", the walk's settings
        and "window", _WALK_DEFAULTS in _resample_grad_plan.py}; by default "auto": the walk
        kernels where they apply, else resample_grad_gather ("walk" raises ValueError where
        they do not), in windows of terms where the loop limit needs them or "window" asks.
        Every choice gives the same bits."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        for field, t in (("InputGradientTensor", dy), ("OutputGradientTensor", dx)):
            if t.element_count > MAX_COUNT:
                fail(self.OPERATOR, f"{field}.Sizes",
                     "hold too many elements for pyvkgrad's kernels",
                     f"<= {MAX_COUNT}", t.element_count)
        maps = self.axis_maps()
        return _resample_grad_plan.plan(self, maps, limits, gather)


@dataclass(frozen=True)
class ResampleGradDesc(ResampleGradRules):
    """`DML_RESAMPLE_GRAD_OPERATOR_DESC` (plus DML_RESAMPLE_GRAD1's RoundingDirection).

    input_gradient_tensor: dY, the forward output's sizes; output_gradient_tensor: dX, the
    forward input's sizes. One data type (FLOAT32 or FLOAT16), 1 to 4 dimensions, any strides
    (dX's may not overlap). interpolation_mode: InterpolationMode or "nearest_neighbor" /
    "linear". scales, input_pixel_offsets, output_pixel_offsets: one float per dimension, the
    forward's; stored as float32 values (Python floats). rounding_direction: None (RESAMPLE1,
    round half up), AxisDirection or "decreasing" (floor) / "increasing" (ceil); nearest only.
    algorithm: "gather" (deterministic; "auto" means it) or "atomic".
    """

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    interpolation_mode: Union[InterpolationMode, str]
    scales: Tuple[float, ...]
    input_pixel_offsets: Tuple[float, ...]
    output_pixel_offsets: Tuple[float, ...]
    rounding_direction: Union[None, AxisDirection, str] = None
    algorithm: str = "gather"
    OPERATOR: ClassVar[str] = OPERATOR


# ---- one-call functions --------------------------------------------------------------------------

def resample_grad(input_gradient: np.ndarray, output_gradient_sizes: Sequence[int], *,
                  interpolation_mode: Union[str, InterpolationMode] = "nearest_neighbor",
                  scales: Optional[Sequence[float]] = None,
                  input_pixel_offsets: Optional[Sequence[float]] = None,
                  output_pixel_offsets: Optional[Sequence[float]] = None,
                  rounding_direction: Union[None, str, AxisDirection] = None,
                  algorithm: str = "auto", device: DeviceLike = None) -> np.ndarray:
    """dX of a RESAMPLE1 whose input had `output_gradient_sizes` and whose output gradient is
    `input_gradient`; a packed array of input_gradient's dtype.

    Defaults as DirectMLX's `dml::ResampleGrad` (pyvkgrad/defaults.py): scales =
    input_gradient size / output_gradient size per dimension (in float32), input offsets 0.5,
    output offsets -0.5 (half-pixel).
    algorithm: "auto" (= "gather", deterministic), "gather" or "atomic".
    """
    return run(ResampleGradDesc, input_gradient, output_gradient_sizes,
               dict(interpolation_mode=interpolation_mode, rounding_direction=rounding_direction,
                    scales=scales, input_pixel_offsets=input_pixel_offsets,
                    output_pixel_offsets=output_pixel_offsets), algorithm, device)


def run(descriptor: Type[ResampleGradRules], input_gradient: np.ndarray,
        output_gradient_sizes: Sequence[int], parameters: Dict[str, object], algorithm: str,
        device: DeviceLike) -> np.ndarray:
    """The body of the one-call functions `resample_grad` and `resample_grad1`: dX of a
    `descriptor` (ResampleGradDesc or ResampleGrad1Desc) with `parameters`, its fields
    interpolation_mode, rounding_direction, scales, input_pixel_offsets and
    output_pixel_offsets (offsets and scales None: DirectMLX's defaults)."""
    op = descriptor.OPERATOR
    params = (output_gradient_sizes, *parameters.values(), algorithm)

    whole = []  # the whole problem's descriptor, for its pieces

    def describe(d, dev):
        dy_desc = d["input_gradient"]
        check_rank(op, "InputGradientTensor", dy_desc, 1, MAX_RANK)
        sizes = as_uint_tuple(output_gradient_sizes, op, "output_gradient_sizes")
        if len(sizes) != dy_desc.rank:
            fail(op, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy_desc.rank, len(sizes))
        if min(sizes) == 0:
            fail(op, "OutputGradientTensor.Sizes", "must all be at least 1", ">= 1", sizes)
        scales, input_offsets, output_offsets = defaults.resample_grad(
            dy_desc.sizes, sizes, parameters["scales"], parameters["input_pixel_offsets"],
            parameters["output_pixel_offsets"])
        desc = descriptor(  # type: ignore[call-arg]
            input_gradient_tensor=dy_desc,
            output_gradient_tensor=named_desc(op, "OutputGradientTensor", dy_desc.data_type,
                                              sizes),
            interpolation_mode=parameters["interpolation_mode"],
            rounding_direction=parameters["rounding_direction"], scales=scales,
            input_pixel_offsets=input_offsets, output_pixel_offsets=output_offsets,
            algorithm=algorithm)
        whole[:] = [desc]
        # The atomic kernel accumulates a float16 dX in a float32 scratch of dX's element count,
        # and so does the gather where it sums windows of terms (a driver's loop limit):
        # only its plan knows, asked where the answer decides whether dX fits.
        item = 4 if desc.algorithm == "atomic" else dy_desc.data_type.element_size
        if item == 2 and largest_buffer([(2, dy_desc.sizes), (2, sizes)]) <= \
                dev.max_buffer_bytes < largest_buffer([(2, dy_desc.sizes), (4, sizes)]):
            item = 4 if any(s.name == "accumulator"
                            for s in desc.plan(dev.limits).scratch) else 2
        return desc, {"output_gradient": (sizes, item)}

    def rerun(dev, input_gradient):
        # Along an identity axis (same sizes, o reads exactly i) dX's slice depends only on
        # dY's same slice, with the whole problem's parameters.
        desc = whole[0]
        identity, sizes = desc.independent_axes(), desc.output_gradient_tensor.sizes
        return (run(descriptor, input_gradient,
                    tuple(n if a in identity else sizes[a]
                          for a, n in enumerate(input_gradient.shape)),
                    dict(parameters, scales=desc.scales,
                         input_pixel_offsets=desc.input_pixel_offsets,
                         output_pixel_offsets=desc.output_pixel_offsets), algorithm, dev),)

    (dx,) = _one_call.run(op, device, params, {"input_gradient": input_gradient},
                          describe, rerun)
    return dx
