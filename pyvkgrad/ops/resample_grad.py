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

* "gather" (default, deterministic): each dX element is summed by one invocation, in a fixed
  order (no atomics), so results are bitwise identical from run to run. Per axis the
  forward outputs that read input i form a contiguous range (the map is monotone), stored as
  BEG[i] (first o), CNT[i..i+1] (prefix counts) and WGT (the weights, linear only).
  Two kernel families compute the same sums in the same order with the same arithmetic
  (nearest: acc += dY; linear: along the innermost resampled axis h = fma(dY, w, h), then
  acc = fma(h, w_outer, acc) per combination of the outer contributors), so the same bits:
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
    of a packed dX, PAIRED), any number of resampled axes, and windows of contributors
    where a driver ends long loops (WINDOWED, `_windows`).
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

import enum
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional, Sequence, Tuple, Union

import numpy as np

from .. import defaults
from ..plan import READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, Scratch, grid, right_align
from ..tensor import (TensorDesc, as_uint_tuple, check_desc, check_float_type, check_output,
                      check_rank, check_same, enum_value, fail, packed_strides)
from . import _one_call
from ._split import largest_buffer

if TYPE_CHECKING:
    from ..device import DeviceLike

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
    return enum_value(OPERATOR, enum_cls, value, field, allowed)


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
class ResampleGradDesc(OperatorDesc):
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
    # Along which axes the one-call function may cut a problem too large for one buffer.
    INDEPENDENT_AXES: ClassVar[str] = "only the axes that are not resampled"

    def __post_init__(self):
        dy = check_desc(OPERATOR, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(OPERATOR, "OutputGradientTensor", self.output_gradient_tensor)
        check_rank(OPERATOR, "InputGradientTensor", dy, 1, MAX_RANK)
        if dx.rank != dy.rank:
            fail(OPERATOR, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy.rank, dx.rank)
        check_same(OPERATOR, "data_type", ("InputGradientTensor", dy),
                   ("OutputGradientTensor", dx))
        check_float_type(OPERATOR, "InputGradientTensor", dy)
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

    def cut_candidates(self) -> Tuple[int, ...]:
        """Only an axis of equal sizes may be the identity (found without any table)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        return tuple(a for a in range(dy.rank) if dy.sizes[a] == dx.sizes[a])

    def independent_axes(self) -> Tuple[int, ...]:
        """Axes along which dX's slice depends only on dY's same slice, with the same
        parameters: those whose map is the identity (same sizes, o reads exactly i). Decided
        without building any table (`_is_identity`)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        return tuple(d for d in range(dy.rank)
                     if dx.sizes[d] == dy.sizes[d]
                     and _is_identity(dy.sizes[d], linear, self.scales[d],
                                      self.input_pixel_offsets[d],
                                      self.output_pixel_offsets[d], self.rounding_direction))

    # -- per-axis maps, exact float32 on the host --

    def axis_maps(self):
        """One `_AxisMap` per dimension, outermost first (an identity axis's holds no table)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        identity = self.independent_axes()
        return tuple(_IDENTITY_MAP if d in identity else
                     _axis_map(dx.sizes[d], dy.sizes[d], linear, self.scales[d],
                               self.input_pixel_offsets[d], self.output_pixel_offsets[d],
                               self.rounding_direction)
                     for d in range(dy.rank))

    def plan(self, limits: Limits, gather: Optional[dict] = None) -> Plan:
        """The dispatches on a device with `limits`. `gather` (benchmarks and tests) chooses
        among the gather kernels: {"kernel": "auto" | "walk" | "gather", and the walk's
        settings, _WALK_DEFAULTS}; by default "auto": the walk kernels where they apply, else
        resample_grad_gather ("walk" raises ValueError where they do not). Every choice gives
        the same bits."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        for field, t in (("InputGradientTensor", dy), ("OutputGradientTensor", dx)):
            if t.element_count > _MAX_COUNT:
                fail(OPERATOR, f"{field}.Sizes", "hold too many elements for pyvkgrad's kernels",
                     f"<= {_MAX_COUNT}", t.element_count)
        maps = self.axis_maps()
        pad = _AXES - dy.rank
        is_f16 = dx.data_type.element_size == 2
        is_linear = self.interpolation_mode == InterpolationMode.LINEAR
        wg = limits.local_size
        count_x, count_y = dx.element_count, dy.element_count
        paired = is_f16 and dx.is_packed
        tensors = ("input_gradient_tensor", "output_gradient_tensor")
        # What the gather and scatter kernels share (shaders/include/resample_grad.glsl).
        shared = dict(WG=wg, IS_F16=is_f16, IS_LINEAR=is_linear,
                      IDENTITY=right_align((m.identity for m in maps), _AXES, True))
        tables = _TableBuilder()
        if self.algorithm == "gather":
            options = dict(_WALK_DEFAULTS, **(gather or {}))
            if options["kernel"] not in ("auto", "walk", "gather"):
                raise ValueError(f"resample_grad: unknown gather kernel {options['kernel']!r}")
            if options["kernel"] != "gather":
                walk = _walk_plan(self, maps, limits, options)
                if walk is not None:
                    return walk
                if options["kernel"] == "walk":
                    raise ValueError("resample_grad: the walk kernels do not apply here")
            beg, cnt, wgt = [0] * _AXES, [0] * _AXES, [0] * _AXES
            for d, m in enumerate(maps):
                if m.identity:
                    continue
                k = pad + d
                cnt[k] = tables.add(m.counts)
                beg[k] = cnt[k] if m.begin is None else tables.add(m.begin)
                wgt[k] = tables.add(m.weights.view(np.uint32)) if is_linear else 0
            items = -(-count_x // 2) if paired else count_x
            gather = dict(shared, DX_SIZES=right_align(dx.sizes, _AXES, 1),
                          DY_STRIDES=right_align(dy.element_strides, _AXES, 0),
                          BEGIN=tuple(beg), COUNTS=tuple(cnt), WEIGHTS=tuple(wgt))
            windows = _windows(maps, pad, items, 2 if paired else 1, count_x, wg, limits,
                               dx.sizes)
            if windows is None:
                return Plan((Dispatch(
                    "resample_grad_gather",
                    dict(tables="tables", dy="input_gradient_tensor", dx="output_gradient_tensor"),
                    grid(items, wg, limits),
                    constants=dict(gather, PAIRED=paired, WINDOWED=False,
                                   DX_STRIDES=right_align(dx.element_strides, _AXES, 0)),
                    push=dict(_NO_WINDOW, count=count_x, first=1)),),
                    (tables.scratch(),), tensors=tensors)
            # Too many contributors per element for the driver's loop limit: windows of the
            # contributors, summed in a fixed order into a float32 accumulator.
            dispatches = [Dispatch(
                "resample_grad_gather",
                dict(tables="tables", dy="input_gradient_tensor", dx="accumulator"),
                grid(count_x, wg, limits),
                constants=dict(gather, PAIRED=False, WINDOWED=True,
                               DX_STRIDES=right_align(packed_strides(dx.sizes), _AXES, 0)),
                push=dict(window, count=count_x, first=int(n == 0)))
                for n, window in enumerate(windows)]
            dispatches.append(_convert(dx, is_f16, paired, wg, limits))
            return Plan(tuple(dispatches), (tables.scratch(), Scratch("accumulator", 4 * count_x)),
                        tensors=tensors)
        forward = [0] * _AXES
        for d, m in enumerate(maps):
            if m.identity:
                continue
            forward[pad + d] = tables.add(m.first)
            if is_linear:
                tables.add(m.weight_first.view(np.uint32))
                tables.add(m.weight_next.view(np.uint32))
        scratch = [tables.scratch()]
        # A packed float32 dX accumulates in place; otherwise a packed float32 scratch does,
        # then is stored in dX's type and layout (zeroing a strided dX whole would write
        # between its elements).
        in_place = not is_f16 and dx.is_packed
        if in_place:
            target, target_strides, fill_count = "output_gradient_tensor", dx.element_strides, \
                count_x
        else:
            target, target_strides, fill_count = "accumulator", packed_strides(dx.sizes), count_x
            scratch.append(Scratch("accumulator", 4 * count_x))
        dispatches = [
            Dispatch("resample_grad_fill", dict(accumulator=target),
                     grid(fill_count, wg, limits), constants=dict(WG=wg),
                     push=dict(count=fill_count, value=0)),
            # Native float atomics where the device has them enabled, else compare-and-swap.
            Dispatch("resample_grad_atomic_native" if limits.float_atomic_add
                     else "resample_grad_atomic",
                     dict(tables="tables", dy="input_gradient_tensor", accumulator=target),
                     grid(count_y, wg, limits),
                     constants=dict(shared, DY_SIZES=right_align(dy.sizes, _AXES, 1),
                                    DY_STRIDES=right_align(dy.element_strides, _AXES, 0),
                                    ACCUMULATOR_STRIDES=right_align(target_strides, _AXES, 0),
                                    FORWARD=tuple(forward)),
                     push=dict(count=count_y)),
        ]
        if not in_place:
            dispatches.append(_convert(dx, is_f16, paired, wg, limits))
        if limits.max_loop_iterations:
            # Per dY element the tap loops (2 taps per resampled axis, linear), and per tap
            # at least one pass of the compare-and-swap loop; per dX element (or word) one
            # iteration of the fill and of the conversion.
            taps = [1] * pad + [2 if is_linear and not m.identity else 1 for m in maps]
            cas = 0 if limits.float_atomic_add else math.prod(taps)
            if (_per_invocation(count_y, wg, limits) * (1 + _nested(taps) + cas)
                    > limits.max_loop_iterations - 64):
                _beyond_loop_limit("InputGradientTensor", dy.sizes, limits)
            if _per_invocation(count_x, wg, limits) > limits.max_loop_iterations - 64:
                _beyond_loop_limit("OutputGradientTensor", dx.sizes, limits)
        return Plan(tuple(dispatches), tuple(scratch), tensors=tensors)


_NO_WINDOW = dict({f"window_begin{d}": 0 for d in range(_AXES)},
                  **{f"window_end{d}": 2**32 - 1 for d in range(_AXES)})


def _convert(dx: TensorDesc, is_f16: bool, paired: bool, wg: int, limits: Limits) -> Dispatch:
    """Store the packed float32 accumulator into dX's data type and layout."""
    count = dx.element_count
    return Dispatch("resample_grad_convert",
                    dict(accumulator="accumulator", dx="output_gradient_tensor"),
                    grid(-(-count // 2) if paired else count, wg, limits),
                    constants=dict(WG=wg, IS_F16=is_f16, PAIRED=paired,
                                   SIZES=right_align(dx.sizes, _AXES, 1),
                                   DX_STRIDES=right_align(dx.element_strides, _AXES, 0)),
                    push=dict(count=count))


def _per_invocation(count: int, wg: int, limits: Limits) -> int:
    """Items each invocation of a grid-stride loop over `count` items runs (at most)."""
    return -(-count // (grid(count, wg, limits) * wg))


def _nested(n) -> int:
    """Iterations of the loops nested as n[0], n[1], ...: n0 + n0 n1 + n0 n1 n2 + ..."""
    return sum(math.prod(n[:k + 1]) for k in range(len(n)))


def _beyond_loop_limit(field: str, sizes, limits: Limits):
    fail(OPERATOR, f"{field}.Sizes", f"need fewer loop iterations per invocation than the "
         f"device allows ({limits.max_loop_iterations} with {limits.max_workgroups} "
         f"workgroups of {limits.local_size})", "a smaller problem", sizes, kind=RuntimeError)


def _windows(maps, pad: int, items: int, per_item: int, count: int, wg: int, limits: Limits,
             sizes):
    """None when every invocation of the gather stays within the driver's loop limit
    (`limits.max_loop_iterations`); else the windows of contributors, per axis, each
    dispatch sums: push-constant dicts, in the order they run.

    An invocation runs ceil(items / invocations) items of `per_item` dX elements (windowed:
    ceil(count / invocations) elements, one per item), and an
    element with n_d contributors per axis runs n0 + n0 n1 + n0 n1 n2 + n0 n1 n2 n3 loop
    iterations. A window of L outputs along an axis leaves at most min(n_d, L) contributors
    (they are consecutive outputs), so windows shrink, largest axis first, until the count fits;
    where even windows of one contributor do not, RuntimeError naming dX's `sizes`.
    """
    limit = limits.max_loop_iterations
    if not limit:
        return None
    most = [1] * _AXES
    outs = [1] * _AXES
    for d, m in enumerate(maps):
        if not m.identity:
            most[pad + d] = max(1, int(np.diff(m.counts.astype(np.int64)).max()))
            outs[pad + d] = m.first.size

    def iterations(n, items, per_item):
        return _per_invocation(items, wg, limits) * (1 + per_item * (_nested(n) + 4))

    length = list(outs)
    effective = list(most)
    if iterations(effective, items, per_item) <= limit - 64:
        return None
    while iterations(effective, count, 1) > limit - 64:
        d = max(range(_AXES), key=lambda a: (effective[a], a))
        if effective[d] == 1:  # too many elements per invocation: windows cannot help
            _beyond_loop_limit("OutputGradientTensor", sizes, limits)
        length[d] = max(1, effective[d] // 2)
        effective[d] = min(most[d], length[d])
    starts = [range(0, outs[d], length[d]) for d in range(_AXES)]
    return [dict({f"window_begin{d}": b[d] for d in range(_AXES)},
                 **{f"window_end{d}": min(outs[d], b[d] + length[d]) for d in range(_AXES)})
            for b in itertools.product(*starts)]


# ---- the walk kernels ----------------------------------------------------------------------------

_WALK_MAX_ROWS, _WALK_MAX_COLS, _WALK_MAX_U = 16, 2, 12  # include/resample_grad_walk.glsl
# rows: dX rows per invocation (None: 8, fewer for small problems); pair: float16 invocations
# own whole 32-bit words of dX where the layout allows; lanes: "auto" (along the memory-innermost
# identity axis where dX has one, else along the columns) or "q" (columns); pad: round the
# column groups up to whole subgroups, so no subgroup straddles two row blocks; cols: dX columns
# per invocation (None: 2 where a float16 pair of columns is one word of dX, else 1); switch,
# select, zero_weights, align: ROW_SWITCH, SELECT_VALUES, ZERO_WEIGHTS, DY_ALIGNED
# (include/resample_grad_walk.glsl; zero_weights applies with several columns only, align to
# float16 dY read by words along the columns).
_WALK_DEFAULTS = dict(kernel="auto", rows=None, pair=True, lanes="auto", pad=False, cols=None,
                      switch=None, select=None, zero_weights=None, align=None)
# Rows per invocation, the row `switch` (False: a loop) and zeroed values (False: predicated
# additions) where not asked for, per (linear, float16): the fastest settings on the H100 over
# the benchmark's shapes (benchmarks/gather_variants.py, benchmarks/RESULTS.md). Every setting
# gives the same bits.
_WALK_TUNED = {
    (False, False): dict(rows=4, switch=False, select=True, zero_weights=False, align=False),
    (True, False): dict(rows=4, switch=True, select=True, zero_weights=False, align=False),
    (False, True): dict(rows=2, switch=True, select=True, zero_weights=False, align=True),
    (True, True): dict(rows=4, switch=False, select=False, zero_weights=True, align=True)}
_WALK_MIN_ITEMS = 2**18  # auto rows: fewer rows per invocation until this many invocations


def _walk_plan(desc: "ResampleGradDesc", maps, limits: Limits, options: dict) -> Optional[Plan]:
    """resample_grad_walk or resample_grad_walk_pair (include/resample_grad_walk.glsl), or None
    where they do not apply: no resampled axis or more than two, an invocation's columns reading
    more than _WALK_MAX_U dY values, or more loop iterations than the driver allows.

    Axes: the resampled ones become P and Q in logical order (so the summation order stays the
    logical one); a single resampled axis is Q where it is dX's memory-innermost axis, else P
    with Q the innermost identity axis. B is the innermost of the other two (identity) axes.
    """
    dy, dx = desc.input_gradient_tensor, desc.output_gradient_tensor
    pad = _AXES - dy.rank
    sizes, dy_sizes = right_align(dx.sizes, _AXES, 1), right_align(dy.sizes, _AXES, 1)
    dxs = right_align(dx.element_strides, _AXES, 0)
    dys = right_align(dy.element_strides, _AXES, 0)
    amaps = [None] * pad + list(maps)
    resampled = [k for k in range(_AXES) if amaps[k] is not None and not amaps[k].identity]
    if not 1 <= len(resampled) <= 2:
        return None

    def stride(k):  # dX's stride along axis k; axes of one element come last
        return dxs[k] if sizes[k] > 1 else 2**63

    identity = [k for k in range(_AXES) if k not in resampled]
    if len(resampled) == 2:
        p, q = resampled
    else:
        inner = min(identity, key=stride)
        if stride(resampled[0]) < stride(inner):
            p, q = inner, resampled[0]
        else:
            p, q = resampled[0], inner
    a, b = sorted((k for k in range(_AXES) if k not in (p, q)), key=stride, reverse=True)
    lanes_on_b = {"auto": sizes[b] > 1 and dxs[b] == 1 and stride(q) != 1,
                  "q": False, "b": sizes[b] > 1}[options["lanes"]]
    is_f16 = dx.data_type.element_size == 2
    is_linear = desc.interpolation_mode == InterpolationMode.LINEAR
    tuned = _WALK_TUNED[(is_linear, is_f16)]
    options = {k: tuned[k] if v is None and k in ("switch", "select", "zero_weights", "align")
               else v
               for k, v in options.items()}

    def even_but(strides, sz, k):  # every other stride even: element offsets keep k's parity
        return all(strides[i] % 2 == 0 for i in range(_AXES) if i != k and sz[i] > 1)

    pair_lanes, cols = 1, 1
    if is_f16 and options["pair"]:
        if lanes_on_b:
            if sizes[b] % 2 == 0 and dxs[b] == 1 and even_but(dxs, sizes, b):
                pair_lanes = 2
        elif sizes[q] % 2 == 0 and dxs[q] == 1 and even_but(dxs, sizes, q):
            cols = 2
    pair_q = cols == 2
    if options["cols"] is not None and options["cols"] != cols:
        if not 1 <= options["cols"] <= _WALK_MAX_COLS or pair_lanes == 2:
            return None
        cols, pair_q = options["cols"], False
    if pair_lanes == 2:
        dy_words = is_f16 and dys[b] == 1 and even_but(dys, dy_sizes, b)
    else:
        dy_words = is_f16 and dys[q] == 1 and even_but(dys, dy_sizes, q)
    p_map, q_map = amaps[p], amaps[q]
    p_identity = p_map is None or p_map.identity
    q_identity = q_map is None or q_map.identity
    if not p_identity and is_linear and not np.all(p_map.weight_first != 0):
        return None  # the transposed tables drop such taps; the forward table would not

    def spans(m, block, size, count=False, align=1):
        """Per block of `block` inputs, the outputs they read: [lo, hi), or (lo, hi - lo) with
        `count`, lo rounded down to a multiple of `align`; and the most outputs a block reads."""
        counts = m.counts.astype(np.int64)
        n = np.diff(counts)
        begin = counts[:-1] if m.begin is None else m.begin.astype(np.int64)
        blocks = -(-size // block)
        fill = blocks * block - size
        lo = np.concatenate([np.where(n > 0, begin, 2**62), np.full(fill, 2**62)])
        hi = np.concatenate([np.where(n > 0, begin + n, -1), np.full(fill, -1)])
        lo, hi = lo.reshape(blocks, block).min(1), hi.reshape(blocks, block).max(1)
        empty = hi < 0
        lo[empty], hi[empty] = 0, 0
        lo -= lo % align
        return _u32(np.stack([lo, hi - lo if count else hi], 1)), int((hi - lo).max())

    # Float16 dY read by words along Q, with every column span starting at an even element:
    # each dY row is whole words from the span's start (DY_ALIGNED). Several columns only
    # (the kernel finds a single column's contributors at the union's start), and only where
    # the rounded spans still fit in _WALK_MAX_U.
    align = 2 if dy_words and pair_lanes == 1 and options["align"] and cols > 1 else 1
    if q_identity:
        col_spans, most = None, cols
    else:
        col_spans, most = spans(q_map, cols, sizes[q], count=True, align=align)
        if most > _WALK_MAX_U and align == 2:
            align = 1
            col_spans, most = spans(q_map, cols, sizes[q], count=True)
        if most > _WALK_MAX_U and cols == 2 and options["cols"] is None:
            pair_q, cols = False, 1
            col_spans, most = spans(q_map, cols, sizes[q], count=True)
        if most > _WALK_MAX_U:
            return None
    dy_aligned = align == 2 and cols > 1 and (not q_identity or cols % 2 == 0)
    maxu = max(1, most)
    wg = limits.local_size
    col_groups = -(-sizes[q] // cols)
    col_slots = col_groups
    if options["pad"] and not lanes_on_b:
        col_slots = -(-col_groups // limits.subgroup_size) * limits.subgroup_size
    lanes_b = sizes[b] // pair_lanes

    def items(rows):
        return sizes[a] * lanes_b * -(-sizes[p] // rows) * col_slots

    rows = options["rows"]
    if rows is None:
        rows = tuned["rows"]
        while rows > 1 and items(rows) < _WALK_MIN_ITEMS:
            rows //= 2
    rows = max(1, min(rows, _WALK_MAX_ROWS, sizes[p]))
    count = items(rows)
    if count > _MAX_COUNT:
        return None
    tables = _TableBuilder()
    first = weight_first = weight_next = row_spans = 0
    begin = counts = weights = col_spans_at = 0
    if p_identity:
        most_rows = rows
    else:
        first = tables.add(p_map.first)
        if is_linear:
            weight_first = tables.add(p_map.weight_first.view(np.uint32))
            weight_next = tables.add(p_map.weight_next.view(np.uint32))
        spans_p, most_rows = spans(p_map, rows, sizes[p])
        row_spans = tables.add(spans_p)
    if not q_identity:
        counts = tables.add(q_map.counts)
        begin = counts if q_map.begin is None else tables.add(q_map.begin)
        weights = tables.add(q_map.weights.view(np.uint32)) if is_linear else 0
        col_spans_at = tables.add(col_spans)
    workgroups = grid(count, wg, limits)
    zero_weights = bool(options["zero_weights"]) and cols > 1
    if limits.max_loop_iterations:
        # Counted as if the driver unrolled nothing: per dY row the loads, the zeroed copies
        # of several columns, linear's row sums per column, and the additions into the rows.
        # zero_weights may sum a column twice (the second time tested), so counts it twice.
        twice = 2 if zero_weights else 1
        per_row = (1 + (maxu + 2) // 2 + maxu + (cols * (1 + maxu) if cols > 1 else 0)
                   + (twice * cols * (1 + maxu) if is_linear else 0)
                   + rows * (1 + twice * cols * (1 + maxu)))
        per_item = 2 + most_rows * per_row + cols * (1 + maxu) + 2 * rows * (1 + cols)
        if -(-count // (workgroups * wg)) * per_item > limits.max_loop_iterations - 64:
            return None
    order = (a, b, p, q)
    constants = dict(
        WG=wg, IS_F16=is_f16, IS_LINEAR=is_linear, IDENTITY=(True, True, p_identity, q_identity),
        ROWS=rows, COLS=cols, MAXU=maxu, LANES_ON_B=lanes_on_b, PAIR_Q=pair_q, DY_WORDS=dy_words,
        SIZES=tuple(sizes[k] for k in order), DX_STRIDES=tuple(dxs[k] for k in order),
        DY_STRIDES=tuple(dys[k] for k in order), FIRST=first, WEIGHT_FIRST=weight_first,
        WEIGHT_NEXT=weight_next, ROW_SPANS=row_spans, BEGIN=begin, COUNTS=counts,
        WEIGHTS=weights, COL_SPANS=col_spans_at, ROW_BLOCKS=-(-sizes[p] // rows),
        COL_GROUPS=col_groups, COL_SLOTS=col_slots, ROW_SWITCH=bool(options["switch"]),
        SELECT_VALUES=bool(options["select"]), ZERO_WEIGHTS=zero_weights, DY_ALIGNED=dy_aligned)
    kernel = "resample_grad_walk_pair" if pair_lanes == 2 else "resample_grad_walk"
    return Plan((Dispatch(kernel, dict(tables="tables", dy="input_gradient_tensor",
                                       dx="output_gradient_tensor"),
                          workgroups, constants=constants, push=dict(count=count)),),
                (tables.scratch(),), tensors=("input_gradient_tensor", "output_gradient_tensor"))


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


# An identity axis's map: the kernels use no table for it (IDENTITY), so it holds none.
_NO_TABLE = np.zeros(0, np.uint32)
_IDENTITY_MAP = _AxisMap(_NO_TABLE, _NO_TABLE.view(np.float32), _NO_TABLE.view(np.float32), None,
                         _NO_TABLE, _NO_TABLE.view(np.float32), True)


def axis_coordinates(out_size: int, scale: float, in_off: float, out_off: float) -> np.ndarray:
    """x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset in float32, in this order
    (numpy's float32 arithmetic is correctly rounded, so this is the exact float32 value)."""
    return _coordinates(np.arange(out_size, dtype=np.int64), scale, in_off, out_off)


def _coordinates(outputs: np.ndarray, scale: float, in_off: float, out_off: float) -> np.ndarray:
    """axis_coordinates of the outputs `outputs` (int64)."""
    o = outputs.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = o - np.float32(out_off)
        t = t / np.float32(scale)
        return t - np.float32(in_off)


def _nearest_taps(x32: np.ndarray, last: int, rounding) -> np.ndarray:
    """Nearest neighbour's input index (int64) of each coordinate."""
    # On the exact float32 value, in float64 (a float32 x + 0.5 could round up to a tie).
    x = x32.astype(np.float64)
    if rounding is None:
        idx = np.floor(x + 0.5)
    elif rounding == AxisDirection.DECREASING:
        idx = np.floor(x)
    else:
        idx = np.ceil(x)
    return np.clip(idx, 0, last).astype(np.int64)  # clip in float: no int overflow


def _linear_taps(x32: np.ndarray, last: int):
    """Linear's taps of each coordinate: (i0, i1, weight of i0, weight of i1), before taps
    clamped onto one element are merged."""
    finite = np.isfinite(x32)
    xs = np.where(finite, x32, np.float32(0))
    fl32 = np.floor(xs)
    f = xs - fl32  # exact in float32
    w0 = np.float32(1) - f  # rounded to float32, as the oracle does
    # A coordinate that overflowed float32 sits beyond the edge: both taps on the edge element.
    fl = np.where(finite, fl32.astype(np.float64), np.where(x32 > 0, last, -1))
    i0 = np.clip(fl, 0, last).astype(np.int64)
    i1 = np.clip(fl + 1, 0, last).astype(np.int64)
    return i0, i1, w0, f


_IDENTITY_CHUNK = 2**20  # outputs per step of _is_identity


def _is_identity(size, linear, scale, in_off, out_off, rounding) -> bool:
    """Whether the map of an axis of `size` inputs and outputs is the identity (o reads exactly
    i, with weight 1 and no second tap), as `_axis_map` decides it; in chunks, stopping at the
    first output that is not, so a long axis costs no table of its length."""
    for start in range(0, size, _IDENTITY_CHUNK):
        outputs = np.arange(start, min(start + _IDENTITY_CHUNK, size), dtype=np.int64)
        x32 = _coordinates(outputs, scale, in_off, out_off)
        if not linear:
            same = np.array_equal(_nearest_taps(x32, size - 1, rounding), outputs)
        else:
            i0, i1, w0, w1 = _linear_taps(x32, size - 1)
            # A tap merged with its clamped neighbour has weight w0 + w1 (see _axis_map).
            wa = np.where(i0 == i1, (w0.astype(np.float64) + w1).astype(np.float32), w0)
            same = (np.array_equal(i0, outputs) and bool(np.all(wa == 1))
                    and not np.any((i0 != i1) & (w1 != 0)))
        if not same:
            return False
    return True


def _axis_map(in_size, out_size, linear, scale, in_off, out_off, rounding) -> _AxisMap:
    x32 = axis_coordinates(out_size, scale, in_off, out_off)
    last = in_size - 1
    outputs = np.arange(out_size, dtype=np.int64)
    if not linear:
        first = _nearest_taps(x32, last, rounding)
        wa = np.ones(out_size, np.float32)
        wb = np.zeros(out_size, np.float32)
        # Monotone, so the outputs reading i are the range [counts[i], counts[i+1]).
        counts = np.searchsorted(first, np.arange(in_size + 1), side="left")
        identity = in_size == out_size and bool(np.array_equal(first, outputs))
        return _AxisMap(_u32(first), wa, wb, None, _u32(counts), np.ones(out_size, np.float32),
                        identity)
    i0, i1, w0, w1 = _linear_taps(x32, last)
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
    params = (output_gradient_sizes, interpolation_mode, scales, input_pixel_offsets,
              output_pixel_offsets, rounding_direction, algorithm)

    whole = []  # the whole problem's descriptor, for its pieces

    def describe(d, dev):
        dy_desc = d["input_gradient"]
        check_rank(OPERATOR, "InputGradientTensor", dy_desc, 1, MAX_RANK)
        sizes = as_uint_tuple(output_gradient_sizes, OPERATOR, "output_gradient_sizes")
        if len(sizes) != dy_desc.rank:
            fail(OPERATOR, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy_desc.rank, len(sizes))
        if min(sizes) == 0:
            fail(OPERATOR, "OutputGradientTensor.Sizes", "must all be at least 1", ">= 1",
                 sizes)
        desc = ResampleGradDesc(dy_desc, TensorDesc(dy_desc.data_type, sizes),
                                interpolation_mode, *defaults.resample_grad(
                                    dy_desc.sizes, sizes, scales, input_pixel_offsets,
                                    output_pixel_offsets), rounding_direction, algorithm)
        whole[:] = [desc]
        # The atomic kernel accumulates a float16 dX in a float32 scratch of dX's element count,
        # and so does the gather where it sums windows of contributors (a driver's loop limit):
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
        return (resample_grad(
            input_gradient, tuple(n if a in identity else sizes[a]
                                  for a, n in enumerate(input_gradient.shape)),
            interpolation_mode=interpolation_mode, scales=desc.scales,
            input_pixel_offsets=desc.input_pixel_offsets,
            output_pixel_offsets=desc.output_pixel_offsets,
            rounding_direction=rounding_direction, algorithm=algorithm, device=dev),)

    (dx,) = _one_call.run(OPERATOR, device, params, {"input_gradient": input_gradient},
                          describe, rerun)
    return dx
