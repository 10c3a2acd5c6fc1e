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

Every coordinate, index and weight is computed here, on the host, in exact float32 numpy
(GPU float division is not correctly rounded everywhere), into small per-axis tables (sizes
summed over axes, never multiplied); the kernels only look them up:

* "gather" (default, deterministic): one invocation per dX element sums its contributors in a
  fixed order (no atomics), so results are bitwise identical from run to run. Per axis the
  forward outputs that read input i form a contiguous range (the map is monotone), stored as
  BEG[i] (first o), CNT[i..i+1] (prefix counts) and WGT (the weights, linear only).
* "atomic": one invocation per dY element scatters into its taps with float32 atomic adds
  (`resample_grad_atomic_native` where the device's float atomic add is enabled, else
  `resample_grad_atomic`, a compare-and-swap loop), after `fill_words` zeroes the accumulator:
  float32 dX itself (any strides; DirectML lets an operator write anywhere in an output's
  range), or a packed float32 scratch that `resample_grad_convert` rounds once into a float16
  dX. Per axis the forward table is FWD[o] (first tap), then the weights of taps i0 and i0 + 1
  (linear only).

Choices where DirectML is silent:
* rounding_direction only affects nearest neighbour (as in DML_RESAMPLE_GRAD1); it is accepted
  and ignored with linear.
* Taps of weight exactly 0 (linear, f = 0) are dropped, so a non-finite dY next to them does not
  spread NaN (keep gradients finite; DirectML's behaviour is unknown, docs/semantics.md §6.11).
* A coordinate that overflows float32 (a tiny Scale) clamps to the edge element with weight 1.
* An axis whose map is the identity (same sizes, o reads exactly i) uses no table.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from ..plan import READ, READ_WRITE, WRITE, Dispatch, Limits, Plan, Scratch, grid, right_align
from ..tensor import (TensorDesc, as_uint_tuple, check_desc, check_output, check_rank, check_same,
                      array_desc, fail, packed_strides)
from ._split import fits, run_in_pieces

OPERATOR = "RESAMPLE_GRAD"
MAX_RANK = 4
_AXES = 4  # kernels index 4 dimensions, right-aligned
_MAX_COUNT = 2**31 - 1  # grid-stride loops in uint32


class InterpolationMode(enum.IntEnum):
    """`DML_INTERPOLATION_MODE` (DirectML's values)."""

    NEAREST_NEIGHBOR = 0
    LINEAR = 1


class AxisDirection(enum.IntEnum):
    """`DML_AXIS_DIRECTION` as DML_RESAMPLE_GRAD1's RoundingDirection (DirectML's values):
    INCREASING rounds a fractional coordinate up (ceil), DECREASING down (floor)."""

    INCREASING = 0
    DECREASING = 1


ALGORITHMS = ("gather", "atomic")


# ---- parameter normalisation -------------------------------------------------------------------

def _enum_value(enum_cls, value, field: str, allowed: str):
    """An enum member from a member, its int value or its lower-case name."""
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str):
        try:
            return enum_cls[value.upper()]
        except KeyError:
            fail(OPERATOR, field, "is not supported", allowed, repr(value))
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        try:
            return enum_cls(int(value))
        except ValueError:
            fail(OPERATOR, field, "is not supported", allowed, repr(value))
    fail(OPERATOR, field, "must be a string or an enum value", allowed, type(value).__name__,
         TypeError)


def _float32_array(values, field: str, rank: int):
    """DirectML's FLOAT[DimensionCount] array: one real number per dimension, as float32."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        fail(OPERATOR, field, "must be a sequence of numbers", "a sequence",
             type(values).__name__, TypeError)
    values = tuple(values)
    for d, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                                   np.floating)):
            fail(OPERATOR, f"{field}[{d}]", "must be a real number", "int or float",
                 type(v).__name__, TypeError)
    if len(values) != rank:
        fail(OPERATOR, field, "must have one entry per dimension", rank, len(values))
    with np.errstate(over="ignore"):
        return tuple(np.float32(v) for v in values), values


@dataclass(frozen=True)
class ResampleGradDesc:
    """`DML_RESAMPLE_GRAD_OPERATOR_DESC` (plus DML_RESAMPLE_GRAD1's RoundingDirection).

    input_gradient_tensor: dY, the forward output's sizes; output_gradient_tensor: dX, the
    forward input's sizes. One data type (FLOAT32 or FLOAT16), 1 to 4 dimensions, any strides
    (dX's may not overlap). interpolation_mode: InterpolationMode or "nearest_neighbor" /
    "linear". scales, input_pixel_offsets, output_pixel_offsets: one float per dimension, the
    forward's; stored as float32 values (Python floats). rounding_direction: None (RESAMPLE1,
    round half up), AxisDirection or "decreasing" (floor) / "increasing" (ceil); nearest only.
    algorithm: "gather" (deterministic; "auto" means it) or "atomic".
    """

    input_gradient_tensor: object
    output_gradient_tensor: object
    interpolation_mode: object
    scales: Tuple[float, ...]
    input_pixel_offsets: Tuple[float, ...]
    output_pixel_offsets: Tuple[float, ...]
    rounding_direction: Optional[object] = None
    algorithm: str = "gather"
    OPERATOR: ClassVar[str] = OPERATOR

    def __post_init__(self):
        dy = check_desc(OPERATOR, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(OPERATOR, "OutputGradientTensor", self.output_gradient_tensor)
        check_rank(OPERATOR, "InputGradientTensor", dy, 1, MAX_RANK)
        if dx.rank != dy.rank:
            fail(OPERATOR, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy.rank, dx.rank)
        check_same(OPERATOR, "data_type", ("InputGradientTensor", dy),
                   ("OutputGradientTensor", dx))
        check_output(OPERATOR, "OutputGradientTensor", dx)
        mode = _enum_value(InterpolationMode, self.interpolation_mode, "InterpolationMode",
                           "'nearest_neighbor' or 'linear' (InterpolationMode)")
        rounding = self.rounding_direction
        if rounding is not None:
            rounding = _enum_value(AxisDirection, rounding, "RoundingDirection",
                                   "None, 'decreasing' or 'increasing' (AxisDirection)")
        algorithm = self.algorithm
        if not isinstance(algorithm, str):
            fail(OPERATOR, "algorithm", "must be a string", "'auto', 'gather' or 'atomic'",
                 type(algorithm).__name__, TypeError)
        if algorithm == "auto":
            algorithm = "gather"  # deterministic by default
        if algorithm not in ALGORITHMS:
            fail(OPERATOR, "algorithm", "is not supported", "'auto', 'gather' or 'atomic'",
                 repr(algorithm))
        scales, given = _float32_array(self.scales, "Scales", dy.rank)
        for d, (s32, s) in enumerate(zip(scales, given)):
            if not (s > 0 and math.isfinite(s)):
                fail(OPERATOR, f"Scales[{d}]", "must be positive and finite", "> 0", float(s))
            if not (s32 > 0 and np.isfinite(s32)):
                fail(OPERATOR, f"Scales[{d}]", "must be positive and finite in float32",
                     f"> 0 and <= {float(np.finfo(np.float32).max)}", float(s))
        offsets = {}
        for field, name in (("input_pixel_offsets", "InputPixelOffsets"),
                            ("output_pixel_offsets", "OutputPixelOffsets")):
            values, given = _float32_array(getattr(self, field), name, dy.rank)
            for d, (v32, v) in enumerate(zip(values, given)):
                if not np.isfinite(v32):
                    fail(OPERATOR, f"{name}[{d}]", "must be finite", "a finite float32",
                         float(v))
            offsets[field] = tuple(float(v) for v in values)
        object.__setattr__(self, "interpolation_mode", mode)
        object.__setattr__(self, "rounding_direction", rounding)
        object.__setattr__(self, "algorithm", algorithm)
        object.__setattr__(self, "scales", tuple(float(s) for s in scales))
        for field, values in offsets.items():
            object.__setattr__(self, field, values)

    def tensor_fields(self):
        return (("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    # -- per-axis maps, exact float32 on the host --

    def axis_maps(self):
        """One `_AxisMap` per dimension, outermost first."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        return tuple(_axis_map(dx.sizes[d], dy.sizes[d], linear, self.scales[d],
                               self.input_pixel_offsets[d], self.output_pixel_offsets[d],
                               self.rounding_direction)
                     for d in range(dy.rank))

    def plan(self, limits: Limits) -> Plan:
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        for field, t in (("InputGradientTensor", dy), ("OutputGradientTensor", dx)):
            if t.element_count > _MAX_COUNT:
                fail(OPERATOR, f"{field}.Sizes", "hold too many elements for pyvkgrad's kernels",
                     f"<= {_MAX_COUNT}", t.element_count)
        maps = self.axis_maps()
        pad = _AXES - dy.rank
        is_f16 = int(dx.data_type.element_size == 2)
        is_linear = int(self.interpolation_mode == InterpolationMode.LINEAR)
        local = limits.local_size
        count_x, count_y = dx.element_count, dy.element_count
        paired = int(bool(is_f16) and dx.is_packed)
        ids = right_align((int(m.identity) for m in maps), _AXES, 1)
        tables = _TableBuilder()
        if self.algorithm == "gather":
            beg, cnt, wgt = [0] * _AXES, [0] * _AXES, [0] * _AXES
            for d, m in enumerate(maps):
                if m.identity:
                    continue
                k = pad + d
                cnt[k] = tables.add(m.counts)
                beg[k] = cnt[k] if m.begin is None else tables.add(m.begin)
                wgt[k] = tables.add(m.weights.view(np.uint32)) if is_linear else 0
            spec = ((local, is_f16, is_linear, paired) + right_align(dx.sizes, _AXES, 1)
                    + right_align(dx.element_strides, _AXES, 0)
                    + right_align(dy.element_strides, _AXES, 0)
                    + ids + tuple(beg) + tuple(cnt) + tuple(wgt))
            items = -(-count_x // 2) if paired else count_x
            return Plan((Dispatch("resample_grad_gather",
                                  (("tables", READ), ("input_gradient_tensor", READ),
                                   ("output_gradient_tensor", WRITE)),
                                  grid(items, local, limits), spec, (count_x,)),),
                        (tables.scratch(),))
        fwd = [0] * _AXES
        for d, m in enumerate(maps):
            if m.identity:
                continue
            fwd[pad + d] = tables.add(m.first)
            if is_linear:
                tables.add(m.weight_first.view(np.uint32))
                tables.add(m.weight_next.view(np.uint32))
        scratch = [tables.scratch()]
        if is_f16:
            target, target_strides, fill_count = "accumulator", packed_strides(dx.sizes), count_x
            scratch.append(Scratch("accumulator", 4 * count_x))
        else:  # float32 dX accumulates in place, whatever its strides
            target, target_strides = "output_gradient_tensor", dx.element_strides
            fill_count = dx.total_tensor_size_in_bytes // 4
        dispatches = [
            Dispatch("fill_words", ((target, WRITE),), grid(fill_count, local, limits),
                     (local,), (fill_count, 0)),
            # Native float atomics where the device has them enabled, else compare-and-swap.
            Dispatch("resample_grad_atomic_native" if limits.float_atomic_add
                     else "resample_grad_atomic",
                     (("tables", READ), ("input_gradient_tensor", READ), (target, READ_WRITE)),
                     grid(count_y, local, limits),
                     (local, is_f16, is_linear) + right_align(dy.sizes, _AXES, 1)
                     + right_align(dy.element_strides, _AXES, 0)
                     + right_align(target_strides, _AXES, 0) + ids + tuple(fwd),
                     (count_y,)),
        ]
        if is_f16:
            items = -(-count_x // 2) if paired else count_x
            dispatches.append(Dispatch(
                "resample_grad_convert",
                (("accumulator", READ), ("output_gradient_tensor", WRITE)),
                grid(items, local, limits),
                (local, paired) + right_align(dx.sizes, _AXES, 1)
                + right_align(dx.element_strides, _AXES, 0),
                (count_x,)))
        return Plan(tuple(dispatches), tuple(scratch))


# ---- host tables ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _AxisMap:
    """The forward map of one axis and its transpose.

    Forward (per output o): first tap `first[o]`, its weight `weight_first[o]`, and the weight
    of tap first[o] + 1 in `weight_next[o]` (0: a single tap; taps clamped onto one element are
    merged, their weights added once in float64 and rounded to float32).
    Transpose (per input i): outputs begin[i] .. begin[i] + counts[i+1] - counts[i] - 1 read i,
    with weights weights[counts[i]:counts[i+1]]. `begin` is None when it equals counts[:-1]
    (nearest: the ranges partition the outputs in order).
    """

    first: np.ndarray  # uint32 [Out]
    weight_first: np.ndarray  # float32 [Out]
    weight_next: np.ndarray  # float32 [Out]
    begin: Optional[np.ndarray]  # uint32 [In] or None
    counts: np.ndarray  # uint32 [In + 1]
    weights: np.ndarray  # float32 [entries]
    identity: bool


def axis_coordinates(out_size: int, scale: float, in_off: float, out_off: float) -> np.ndarray:
    """x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset in float32, in this order
    (numpy's float32 arithmetic is correctly rounded, so this is the exact float32 value)."""
    o = np.arange(out_size, dtype=np.int64).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = o - np.float32(out_off)
        t = t / np.float32(scale)
        return t - np.float32(in_off)


def _axis_map(in_size, out_size, linear, scale, in_off, out_off, rounding) -> _AxisMap:
    x32 = axis_coordinates(out_size, scale, in_off, out_off)
    last = in_size - 1
    outputs = np.arange(out_size, dtype=np.int64)
    if not linear:
        # On the exact float32 value, in float64 (a float32 x + 0.5 could round up to a tie).
        x = x32.astype(np.float64)
        if rounding is None:
            idx = np.floor(x + 0.5)
        elif rounding == AxisDirection.DECREASING:
            idx = np.floor(x)
        else:
            idx = np.ceil(x)
        first = np.clip(idx, 0, last).astype(np.int64)  # clip in float: no int overflow
        wa = np.ones(out_size, np.float32)
        wb = np.zeros(out_size, np.float32)
        # Monotone, so the outputs reading i are the range [counts[i], counts[i+1]).
        counts = np.searchsorted(first, np.arange(in_size + 1), side="left")
        identity = in_size == out_size and bool(np.array_equal(first, outputs))
        return _AxisMap(_u32(first), wa, wb, None, _u32(counts), np.ones(out_size, np.float32),
                        identity)
    finite = np.isfinite(x32)
    xs = np.where(finite, x32, np.float32(0))
    fl32 = np.floor(xs)
    f = xs - fl32  # exact in float32
    w0 = np.float32(1) - f  # rounded to float32, as the oracle does
    w1 = f
    # A coordinate that overflowed float32 sits beyond the edge: both taps on the edge element.
    fl = np.where(finite, fl32.astype(np.float64), np.where(x32 > 0, last, -1))
    i0 = np.clip(fl, 0, last).astype(np.int64)
    i1 = np.clip(fl + 1, 0, last).astype(np.int64)
    merged = i0 == i1
    if not np.all(merged | (i1 == i0 + 1)):
        raise AssertionError("resample_grad: linear taps are not adjacent")
    wa = np.where(merged, (w0.astype(np.float64) + w1.astype(np.float64)).astype(np.float32),
                  w0).astype(np.float32)
    wb = np.where(merged, np.float32(0), w1).astype(np.float32)
    # Transpose: (input, output, weight) entries, zero weights dropped, sorted by input then
    # output. The map is monotone, so each input's outputs are consecutive.
    second = wb != 0
    ent_i = np.concatenate([i0, i0[second] + 1])
    ent_o = np.concatenate([outputs, outputs[second]])
    ent_w = np.concatenate([wa, wb[second]])
    keep = ent_w != 0
    ent_i, ent_o, ent_w = ent_i[keep], ent_o[keep], ent_w[keep]
    order = np.lexsort((ent_o, ent_i))
    ent_i, ent_o, ent_w = ent_i[order], ent_o[order], ent_w[order]
    per_input = np.bincount(ent_i, minlength=in_size)
    counts = np.concatenate([[0], np.cumsum(per_input)])
    begin = np.zeros(in_size, np.int64)
    nonempty = per_input > 0
    begin[nonempty] = ent_o[counts[:-1][nonempty]]
    if not np.array_equal(ent_o - begin[ent_i], np.arange(ent_o.size) - counts[ent_i]):
        raise AssertionError("resample_grad: contributor ranges are not contiguous")
    identity = (in_size == out_size and bool(np.array_equal(i0, outputs))
                and bool(np.all(wa == 1)) and not second.any())
    return _AxisMap(_u32(i0), wa, wb, _u32(begin), _u32(counts), ent_w.astype(np.float32),
                    identity)


def _u32(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >= 2**32):
        raise AssertionError("resample_grad: table entry out of uint32 range")
    return values.astype(np.uint32)


class _TableBuilder:
    """Concatenates uint32 arrays into one constant table; `add` returns the word offset."""

    def __init__(self):
        self._parts = []
        self._size = 0

    def add(self, words: np.ndarray) -> int:
        offset = self._size
        self._parts.append(np.asarray(words, dtype=np.uint32).ravel())
        self._size += self._parts[-1].size
        return offset

    def scratch(self) -> Scratch:
        words = (np.concatenate(self._parts) if self._parts else np.zeros(0, np.uint32))
        if words.size == 0:  # every axis is the identity: bind a dummy table
            words = np.zeros(4, np.uint32)
        return Scratch("tables", 4 * words.size, words=words)


# ---- one-call function ---------------------------------------------------------------------------

def resample_grad(input_gradient, output_gradient_sizes, *, interpolation_mode="nearest_neighbor",
                  scales=None, input_pixel_offsets=None, output_pixel_offsets=None,
                  rounding_direction=None, algorithm="auto", device=None) -> np.ndarray:
    """dX of a RESAMPLE1 whose input had `output_gradient_sizes` and whose output gradient is
    `input_gradient`; a packed array of input_gradient's dtype.

    Defaults as DirectMLX's `dml::ResampleGrad`: scales = input_gradient size / output_gradient
    size per dimension (in float32), input offsets 0.5, output offsets -0.5 (half-pixel).
    algorithm: "auto" (= "gather", deterministic), "gather" or "atomic".
    """
    from ..device import get_device

    dy_desc, dy_elements = array_desc(input_gradient, OPERATOR, "input_gradient")
    check_rank(OPERATOR, "InputGradientTensor", dy_desc, 1, MAX_RANK)
    sizes = as_uint_tuple(output_gradient_sizes, OPERATOR, "output_gradient_sizes")
    if len(sizes) != dy_desc.rank:
        fail(OPERATOR, "OutputGradientTensor.DimensionCount",
             "must equal InputGradientTensor.DimensionCount", dy_desc.rank, len(sizes))
    if min(sizes) == 0:
        fail(OPERATOR, "OutputGradientTensor.Sizes", "must all be at least 1", ">= 1", sizes)
    if scales is None:
        scales = tuple(float(np.float32(o) / np.float32(i)) for o, i in zip(dy_desc.sizes, sizes))
    if input_pixel_offsets is None:
        input_pixel_offsets = (0.5,) * dy_desc.rank
    if output_pixel_offsets is None:
        output_pixel_offsets = (-0.5,) * dy_desc.rank
    desc = ResampleGradDesc(dy_desc, TensorDesc(dy_desc.data_type, sizes), interpolation_mode,
                            scales, input_pixel_offsets, output_pixel_offsets,
                            rounding_direction, algorithm)
    dev = get_device(device)
    arrays = {"input_gradient": input_gradient}
    # The atomic kernel accumulates a float16 dX in a float32 scratch of dX's element count.
    item = 4 if desc.algorithm == "atomic" else dy_desc.data_type.element_size
    outputs = {"output_gradient": (sizes, arrays["input_gradient"].dtype, item)}
    if not fits(dev.max_buffer_bytes, arrays, outputs):
        # Along an identity axis (same sizes, o reads exactly i) dX's slice depends only on
        # dY's same slice, with the same parameters.
        identity = [a for a, m in enumerate(desc.axis_maps()) if m.identity]
        return run_in_pieces(
            OPERATOR, dev.max_buffer_bytes, arrays, outputs, identity,
            "only axes that are not resampled can be cut",
            lambda input_gradient: (resample_grad(
                input_gradient, tuple(n if a in identity else sizes[a]
                                      for a, n in enumerate(input_gradient.shape)),
                interpolation_mode=interpolation_mode,
                scales=desc.scales, input_pixel_offsets=desc.input_pixel_offsets,
                output_pixel_offsets=desc.output_pixel_offsets,
                rounding_direction=rounding_direction, algorithm=algorithm, device=dev),)
        )["output_gradient"]
    (dx,) = dev.run(desc, {"input_gradient_tensor": dy_elements}, ["output_gradient_tensor"])
    return dx
