"""What AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD share: the pooling geometry's checks, the
independent axes, the gather's plan and the one-call body (docs/semantics.md §13).

Tensors are {N, C, S_1 .. S_k}, k = DimensionCount = rank - 2 (2 or 3), the spacing fields
one entry per spatial axis ({H, W} or {D, H, W}). Along spatial axis d the window of output
o covers p = o S_d - P0_d + k D_d for k in [0, W_d) (D_d = Dilations[d], 1 for average
pooling); a position is real when 0 <= p < In_d, padding otherwise. With
Weff = (W - 1) D + 1, the output sizes are

    floor rule: Out = floor((In + P0 + P1 - Weff) / S) + 1
    ceil rule:  Out = ceil((In + P0 + P1 - Weff) / S) + 1

and either is accepted, per axis (a ceil-rule last window may hang past the padded extent).

The kernels (shaders/average_pooling_grad.comp, max_pooling_grad.comp, with
shaders/include/pooling_grad.glsl) gather: one invocation per dX element sums the terms of
the windows that contain it in ascending output order, so the result does not depend on the
plan, the workgroup width or the device. Where a driver ends long loops
(`Limits.max_loop_iterations`), the plan splits each element's windows into consecutive runs
over several dispatches that continue one float32 running sum (a scratch accumulator): the same
terms in the same order, the same bits.

Where a tile's work is small (`tile_geometry`: the common 2x2 and 3x3 poolings) and one dispatch
sums every window, the plan runs the kernels' tiles instead: an invocation computes a tile of
dX (stride-sized, 16 bytes along the last axis), each of the tile's windows' terms
(the division, the argmax) once, and every position's sum in the same ascending window order:
the same bits, without per-element divisions or loops of unknown length.
Max pooling's tiles over overlapping windows (3x3 stride 2) first find every window's winner
in a dispatch of their own and store it as a byte (`MaxPoolingGradDesc.own_pass`), so that the
tiles read one byte per window instead of X's footprint.
"""

from __future__ import annotations

import math
from typing import Callable, ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from ..plan import LOOP_MARGIN, Dispatch, Limits, OperatorDesc, Plan, Scratch, grid_slices
from ..tensor import (TensorDesc, as_uint_tuple, check_desc, check_float_type, check_output,
                      check_rank, check_same, fail)
from . import _one_call

# The kernels' index arithmetic is 32-bit: element counts below 2^31 (grid-stride loops),
# padded extents and strides below 2^30 (o S + k D and i + P0 stay below 2^31).
MAX_COUNT = 2**31 - 1
MAX_EXTENT = 2**30
SPATIAL = 3  # the kernels' spatial axes: a 4-D problem gets a leading one of size 1
ALL_WINDOWS = 0xFFFFFFFF  # push constant window_end: every window of an element
# push constant stage: bit 0 continues the accumulator's sum, bit 1 stores dX.
CONTINUE, STORE = 1, 2
# Tiles: the positions a tile aims for along the last axis (rounded down to a multiple of the
# stride; None: 16 bytes of dX, one vector store per row; 0 turns tiles off), and the kernels'
# bounds on a tile's positions, windows (pooling_grad.glsl) and X footprint
# (max_pooling_grad.comp), which keep their arrays in registers.
TILE_WIDTH: Optional[int] = None
# The positions along the axis before the last (rounded down to a multiple of the stride;
# None: twice the stride where windows overlap along it and the tile fits, else the stride).
TILE_HEIGHT: Optional[int] = None
TILE_MAX_CELLS = 16
TILE_MAX_WINDOWS = 32
TILE_MAX_FOOTPRINT = 64


def spacing(operator: str, values: object, field: str, count: int, least: int) -> Tuple[int, ...]:
    """A UINT[DimensionCount] field: `count` integers, each at least `least`."""
    values = as_uint_tuple(values, operator, field)
    if len(values) != count:
        fail(operator, field, "must have one entry per spatial dimension (DimensionCount, the "
             "tensors' rank - 2)", count, len(values))
    for d, v in enumerate(values):
        if v < least:
            fail(operator, f"{field}[{d}]", "must be at least 1", ">= 1", v)
        if v >= 2**32:  # (a window of one cell leaves a dilation otherwise unbounded)
            fail(operator, f"{field}[{d}]", "must fit DirectML's UINT", "< 2^32", v)
    return values


class PoolingGradRules(OperatorDesc):
    """The checks, independent axes and plan both pooling grads derive from their fields
    (input_gradient_tensor, output_gradient_tensor, strides, window_size, start_padding,
    end_padding) and `dilation_values()`. Each declares its own dataclass fields in DirectML's
    order, its OPERATOR, KERNEL and bindings (`kernel_bindings`, `kernel_constants`)."""

    INDEPENDENT_AXES: ClassVar[str] = "the batch and channel axes (N, C)"
    KERNEL: ClassVar[str] = ""

    def check_geometry(self, dilations: object = None) -> Tuple[int, ...]:
        """Validate the tensors and spacing fields (normalising them to tuples of ints);
        return the dilations, validated (None: average pooling's, 1 per axis)."""
        op = self.OPERATOR
        dy = check_desc(op, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(op, "OutputGradientTensor", self.output_gradient_tensor)
        check_rank(op, "OutputGradientTensor", dx, 4, 5)
        if dy.rank != dx.rank:
            fail(op, "InputGradientTensor.DimensionCount",
                 "must equal OutputGradientTensor.DimensionCount", dx.rank, dy.rank)
        check_float_type(op, "OutputGradientTensor", dx)
        check_same(op, "data_type", ("OutputGradientTensor", dx), ("InputGradientTensor", dy))
        check_output(op, "OutputGradientTensor", dx)
        if dy.sizes[:2] != dx.sizes[:2]:
            fail(op, "InputGradientTensor.Sizes", "must have OutputGradientTensor's N and C",
                 dx.sizes[:2], dy.sizes[:2])
        for field, t in (("InputGradientTensor", dy), ("OutputGradientTensor", dx)):
            if t.element_count > MAX_COUNT:
                fail(op, f"{field}.Sizes", "hold too many elements for pyvkgrad's kernels",
                     f"<= {MAX_COUNT}", t.element_count)
        k = dx.rank - 2
        strides = spacing(op, self.strides, "Strides", k, 1)
        window = spacing(op, self.window_size, "WindowSize", k, 1)
        start = spacing(op, self.start_padding, "StartPadding", k, 0)
        end = spacing(op, self.end_padding, "EndPadding", k, 0)
        dilations = (1,) * k if dilations is None else spacing(op, dilations, "Dilations", k, 1)
        for d in range(k):
            size, out = dx.sizes[2 + d], dy.sizes[2 + d]
            extent = size + start[d] + end[d]
            if extent >= MAX_EXTENT or strides[d] >= MAX_EXTENT:
                fail(op, f"StartPadding[{d}] + EndPadding[{d}] + the input size, Strides[{d}]",
                     "must be below 2^30 (pyvkgrad's 32-bit indexing)", f"< {MAX_EXTENT}",
                     (extent, strides[d]))
            effective = (window[d] - 1) * dilations[d] + 1
            if effective > extent:
                fail(op, f"WindowSize[{d}]", "must fit the padded input: (WindowSize - 1) * "
                     "Dilations + 1 <= size + StartPadding + EndPadding", f"<= {extent}",
                     effective)
            floor_rule = (extent - effective) // strides[d] + 1
            ceil_rule = -(-(extent - effective) // strides[d]) + 1
            if out not in (floor_rule, ceil_rule):
                fail(op, f"InputGradientTensor.Sizes[{2 + d}]", "must follow the pooling's "
                     "floor or ceil rule", " or ".join(sorted({str(floor_rule),
                                                               str(ceil_rule)})), out)
        for field, values in (("strides", strides), ("window_size", window),
                              ("start_padding", start), ("end_padding", end)):
            object.__setattr__(self, field, values)
        return dilations

    def check_window_cells(self, maximum: int, rule: str) -> None:
        """WindowSize's positions, prod(WindowSize), at most `maximum` (the operator's kernel's
        own bound; `rule` says why)."""
        cells = math.prod(self.window_size)
        if cells > maximum:
            fail(self.OPERATOR, "WindowSize", rule, f"<= {maximum}", cells)

    def dilation_values(self) -> Tuple[int, ...]:
        raise NotImplementedError

    def independent_axes(self) -> Tuple[int, ...]:
        """N and C: each (n, c) slice of dX depends only on the same slice of dY (and X)."""
        return (0, 1)

    # -- the plan --

    def loops_per_window(self) -> int:
        """Loop iterations one window costs an invocation (its kernel's loops, counted as
        grid_slices counts them: iterations plus the test that ends each loop)."""
        raise NotImplementedError

    def kernel_bindings(self) -> Dict[str, str]:
        raise NotImplementedError

    def kernel_constants(self, pad: int) -> Dict[str, object]:
        raise NotImplementedError

    def own_pass(self, geometry: Optional[Dict[str, Tuple[int, ...]]], limits: Limits,
                 constants: Dict[str, object], bindings: Dict[str, str]
                 ) -> Tuple[Tuple[Dispatch, ...], Tuple[Scratch, ...], Dict[str, object]]:
        """The kernel's pass of its own, dispatched before the gather or the tiles where the
        plan runs one (max pooling's winners): (its dispatches, the scratch buffers the kernel
        binds beside the accumulator, the constants that change for the gather's or tiles'
        dispatches). Average pooling has none."""
        return (), (), {}

    def windows_per_element(self) -> int:
        """At most how many windows contain one dX element: per axis the outputs whose window
        span, Weff long, reaches an index, at most floor((Weff - 1) / S) + 1 and Out."""
        dy = self.input_gradient_tensor
        return math.prod(min(dy.sizes[2 + d], (w - 1) * dil // s + 1)
                         for d, (w, s, dil) in enumerate(zip(self.window_size, self.strides,
                                                             self.dilation_values())))

    def tile_geometry(self) -> Optional[Dict[str, Tuple[int, ...]]]:
        """The tiles' constants (TILE, TILES, WINDOWS, WINDOWS_BEHIND per kernel axis, the
        leading one padded), or None where tiles do not fit the kernels' bounds. Along each
        axis a tile covers TILE = V S positions: V = 1, but along the last axis TILE_WIDTH // S
        (16 bytes of dX where S divides them) and along the one before it 2 where windows
        overlap there ((W - 1) D >= S: the rows' windows and X's footprint are shared by
        twice the positions) and the tile stays within the bounds (TILE_HEIGHT // S where
        set). Tile t's windows are t V + w for w from ceil((P0 - (W - 1) D) / S) (at most
        0: P0 <= (W - 1) D) to floor((TILE - 1 + P0) / S)."""
        dx = self.output_gradient_tensor
        width = 16 // dx.data_type.element_size if TILE_WIDTH is None else TILE_WIDTH
        pad = SPATIAL - (dx.rank - 2)
        axes = [(1, 1, 0, 1, 1)] * pad + list(zip(
            dx.sizes[2:], self.strides, self.start_padding, self.window_size,
            self.dilation_values()))
        if width < 1 or any(start > (window - 1) * dilation
                            for _, _, start, window, dilation in axes):
            return None
        _, stride, _, window, dilation = axes[-2]
        rows = [max(1, TILE_HEIGHT // stride)] if TILE_HEIGHT is not None else \
            [2, 1] if (window - 1) * dilation >= stride else [1]
        for v in rows:
            steps = (1,) * (SPATIAL - 2) + (v, max(1, width // axes[-1][1]))
            geometry = self.tiles_of(axes, steps)
            if geometry:
                return geometry
        return None

    @staticmethod
    def tiles_of(axes, steps) -> Optional[Dict[str, Tuple[int, ...]]]:
        """`tile_geometry` for the windows' steps V per axis (axes: size, S, P0, W, D)."""
        geometry: Dict[str, list] = dict(TILE=[], TILES=[], WINDOWS=[], WINDOWS_BEHIND=[])
        footprint = 1
        for (size, stride, start, window, dilation), v in zip(axes, steps):
            span = (window - 1) * dilation
            tile = v * stride
            behind = (span - start) // stride  # -ceil((P0 - span) / S)
            windows = (tile - 1 + start) // stride + behind + 1
            footprint *= (windows - 1) * stride + span + 1
            for name, value in (("TILE", tile), ("TILES", -(-size // tile)),
                                ("WINDOWS", windows), ("WINDOWS_BEHIND", behind)):
                geometry[name].append(value)
        if (math.prod(geometry["TILE"]) > TILE_MAX_CELLS or footprint > TILE_MAX_FOOTPRINT
                or math.prod(geometry["WINDOWS"]) > TILE_MAX_WINDOWS):
            return None
        return {name: tuple(values) for name, values in geometry.items()}

    def tile_loops(self, geometry: Dict[str, Tuple[int, ...]]) -> int:
        """Loop iterations one tile costs an invocation at most, counted as grid_slices counts
        them (where the driver does not unroll the kernel's constant loops): the grid loop's
        one; the footprint's keys (max); per window its own loops; per position, its windows;
        per row, its stores (a vector's 4 words or each position)."""
        cells, windows = math.prod(geometry["TILE"]), math.prod(geometry["WINDOWS"])
        rows = cells // geometry["TILE"][-1]
        return (1 + TILE_MAX_FOOTPRINT + 1 + windows * self.loops_per_window() + 1
                + cells * (windows + 1) + 1 + rows * (geometry["TILE"][-1] + 1 + 5) + 1)

    def plan(self, limits: Limits) -> Plan:
        dx, dy = self.output_gradient_tensor, self.input_gradient_tensor
        wg, count = limits.local_size, dx.element_count
        pad = SPATIAL - (dx.rank - 2)
        geometry = self.tile_geometry()
        budget = limits.max_loop_iterations - LOOP_MARGIN
        if geometry and limits.max_loop_iterations and self.tile_loops(geometry) > budget:
            geometry = None  # the tile's loops alone pass the driver's limit

        def spatial(values, fill):
            return (fill,) * pad + tuple(values)

        def five(t: Sequence[int], fill):  # N, C, then the spatial axes padded to SPATIAL
            return tuple(t[:2]) + (fill,) * pad + tuple(t[2:])

        constants = dict(
            WG=wg, IS_F16=dx.data_type.element_size == 2, SIZES=five(dx.sizes, 1),
            OUT=spatial(dy.sizes[2:], 1), WINDOW=spatial(self.window_size, 1),
            STRIDES=spatial(self.strides, 1), START_PADDING=spatial(self.start_padding, 0),
            END_PADDING=spatial(self.end_padding, 0), DILATIONS=spatial(self.dilation_values(), 1),
            DY_STRIDES=five(dy.element_strides, 0), DX_STRIDES=five(dx.element_strides, 0),
            TILED=geometry is not None,
            **(geometry or dict(TILE=(1,) * SPATIAL, TILES=(1,) * SPATIAL,
                                WINDOWS=(1,) * SPATIAL, WINDOWS_BEHIND=(0,) * SPATIAL)),
            **self.kernel_constants(pad))
        bindings = dict(self.kernel_bindings(), accumulator="accumulator")
        tensors = tuple(n for n, _ in self.tensor_fields())
        before, own_scratch, changed = self.own_pass(geometry, limits, constants, bindings)
        constants = dict(constants, **changed)
        if geometry:
            tiles = dx.sizes[0] * dx.sizes[1] * math.prod(geometry["TILES"])
            dispatches = before + tuple(
                Dispatch(self.KERNEL, bindings, workgroups, constants=constants,
                         push=dict(count=end, first=first, window_first=0,
                                   window_end=ALL_WINDOWS, stage=STORE))
                for first, end, workgroups in grid_slices(tiles, wg, limits,
                                                          self.tile_loops(geometry)))
            return Plan(dispatches, (Scratch("accumulator", 16),) + own_scratch,
                        tensors=tensors)
        # Each element: the grid loop's iteration, the windows loop's end, and per window its
        # loops; runs of at most `run` windows per dispatch where the driver ends long loops.
        per_window, windows = self.loops_per_window(), self.windows_per_element()
        runs = [(0, ALL_WINDOWS, STORE)]
        run = windows
        if limits.max_loop_iterations and 2 + windows * per_window > budget:
            run = (budget - 2) // per_window
            if run < 1:
                fail(self.OPERATOR, "WindowSize", "needs more loop iterations per window than "
                     f"the device allows ({limits.max_loop_iterations})",
                     f"windows of at most {budget - 4} positions", self.window_size,
                     RuntimeError)
            starts = range(0, windows, run)
            runs = [(t, t + run if t + run < windows else ALL_WINDOWS,
                     (CONTINUE if t else 0) | (STORE if t + run >= windows else 0))
                    for t in starts]
        scratch = Scratch("accumulator", 4 * count if len(runs) > 1 else 16)
        dispatches = before + tuple(
            Dispatch(self.KERNEL, bindings, workgroups, constants=constants,
                     push=dict(count=end, first=first, window_first=window_first,
                               window_end=window_end, stage=stage))
            for window_first, window_end, stage in runs
            for first, end, workgroups in grid_slices(count, wg, limits, 2 + run * per_window))
        return Plan(dispatches, (scratch,) + own_scratch, tensors=tensors)


def element_bytes(desc: PoolingGradRules, device) -> int:
    """Bytes per dX element counted against the buffer limit: 4 where the plan sums windows
    through the float32 accumulator (a driver's loop limit), else dX's own."""
    dx = desc.output_gradient_tensor
    if any(s.name == "accumulator" and s.nbytes > 16 for s in desc.plan(device.limits).scratch):
        return 4
    return dx.data_type.element_size


def run(operator: str, device, params: tuple, arrays: Dict[str, np.ndarray],
        make: Callable[[Dict[str, TensorDesc], Tuple[int, ...]], PoolingGradRules],
        sizes: Callable[[Dict[str, TensorDesc]], Sequence[int]],
        again: Callable[..., np.ndarray]) -> np.ndarray:
    """The one-call body of both: `make(descs, dx_sizes)` builds the descriptor, `sizes(descs)`
    gives dX's sizes; `again(device, dx_sizes, **pieces)` runs a piece cut along N and C."""
    whole = []

    def describe(d, dev):
        dx_sizes = as_uint_tuple(sizes(d), operator, "output_gradient_sizes")
        if min(dx_sizes, default=1) == 0:
            fail(operator, "OutputGradientTensor.Sizes", "must all be at least 1", ">= 1",
                 dx_sizes)
        desc = make(d, dx_sizes)
        whole[:] = [desc]
        return desc, {"output_gradient": (dx_sizes, element_bytes(desc, dev))}

    def rerun(dev, **pieces):
        piece = next(iter(pieces.values()))
        dx_sizes = tuple(piece.shape[:2]) + whole[0].output_gradient_tensor.sizes[2:]
        return (again(dev, dx_sizes, **pieces),)

    (dx,) = _one_call.run(operator, device, params, arrays, describe, rerun)
    return dx
