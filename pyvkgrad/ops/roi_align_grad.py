"""DML_OPERATOR_ROI_ALIGN_GRAD: the gradient of ROI_ALIGN1 with respect to its input image
(docs/semantics.md §16).

Each region r (ROI[r] = [x1, y1, x2, y2], image b = BatchIndices[r]) has, per axis, N = O * S
samples, S = clamp(ceil(|L| / O), MinimumSamplesPerOutput, MaximumSamplesPerOutput), at float32
coordinates

    c(k) = ((k - OutputPixelOffset) * d + a) - InputPixelOffset,   d = L / N  (aligned: L / (N-1))

(a = x1 * SpatialScaleX, L = x2 * SpatialScaleX - a; y alike). Output (oy, ox) owns samples
[oy Sy, oy Sy + Sy) x [ox Sx, ox Sx + Sx). AVERAGE splits dY[r, c, oy, ox] equally over them, MAX
gives it to the first largest (MAX_POOLING_GRAD's rule); each sample that reads the image passes
its share to its bilinear (or nearest, half to even) taps. dX is a deterministic gather: one
invocation per dX element sums, in region, row-sample, column-sample order, every term that
reaches it (shaders/roi_align_grad.comp), with coordinates computed on the device in one fixed
float32 order with correctly rounded division, so the bits are the same on every device. MAX
first selects each output's sample (shaders/roi_align_grad_select.comp). The gather reads
what it would otherwise recompute per element: each region's axes (stored by the boxes pass)
and each output's share for 4 channels at a time (shaders/roi_align_grad_shares.comp, where
the table fits a buffer).

dROI (OutputROIGradientTensor, LINEAR; NEAREST gives 0) differentiates each sample's value with
the floor and ceil neighbours of its clamped coordinates; it is a deterministic gather in two
passes: per dY element the four sums of its samples' terms (shaders/roi_align_grad_roi_partials
.comp), then per dROI element their sum over channels and outputs in ascending order, times the
spatial scale (shaders/roi_align_grad_roi.comp: one workgroup per region, four invocations
adding while the others load).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..defaults import ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES
from ..plan import (LOOP_MARGIN, READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, Scratch,
                    grid_slices)
from ..tensor import (DataType, TensorDesc, as_uint_tuple, check_desc, check_float,
                      check_float_type, check_output, check_rank, check_same, enum_value, fail,
                      named_desc)
from . import _one_call
from ._resample_grad_tables import InterpolationMode
from ._roi_align_grad_windows import OPERATOR, UINT32_MAX, UNBOUNDED, check_windows, plan_windows

if TYPE_CHECKING:
    from ..device import DeviceLike

# Element counts the kernels index with 32-bit words (a MAX selection is 3 words per dY element).
MAX_COUNT = 2**31 - 1
# Loop iterations a region costs before its samples: 4 bisections of at most 25 steps (N <= 2^24)
# and the tests that end them.
SEARCH_LOOPS = 4 * 26
# The tiles' region lists (roi_align_grad_tiles.comp) take R words per tile: tiles of 8 x 8
# elements, larger where the lists would take more than this.
TILE_LIST_BYTES = 64 * 2**20


class ReduceFunction(enum.IntEnum):
    """The `DML_REDUCE_FUNCTION` values ROI_ALIGN_GRAD takes (DirectML's numbers)."""

    AVERAGE = 2
    MAX = 7


def _region_shape(operator: str, field: str, desc: TensorDesc, inner: Tuple[int, ...]) -> int:
    """R of a tensor shaped {R, *inner} with leading 1s (ROI: {R,4}, {1,R,4}, {1,1,R,4};
    BatchIndices: {R}, {1,R}, {1,1,R}, {1,1,1,R})."""
    sizes = desc.sizes
    lead = sizes[:len(sizes) - len(inner) - 1]
    if len(sizes) <= len(inner) or tuple(sizes[len(sizes) - len(inner):]) != inner or \
            any(s != 1 for s in lead):
        shapes = " or ".join(str((1,) * n + ("R",) + inner).replace("'", "")
                             for n in range(4 - len(inner)))
        fail(operator, f"{field}.Sizes", "must have the shape", shapes, sizes)
    return sizes[len(sizes) - len(inner) - 1]


@dataclass(frozen=True)
class RoiAlignGradDesc(OperatorDesc):
    """`DML_ROI_ALIGN_GRAD_OPERATOR_DESC`.

    input_tensor: X {B, C, H, W}, or None (AVERAGE only); input_gradient_tensor: dY {R, C, OH,
    OW}; roi_tensor: {R, 4}, {1, R, 4} or {1, 1, R, 4}, rows [x1, y1, x2, y2]; batch_indices_tensor:
    UINT32 {R} (or with leading 1s up to 4-D); output_gradient_tensor: dX {B, C, H, W}, or None;
    output_roi_gradient_tensor: dROI, ROI's sizes, or None (at least one output; dROI needs X).
    X, dY, ROI, dX and dROI: one data type, FLOAT32 or FLOAT16, any strides (outputs' may not
    overlap).
    reduction_function: "average" / "max" (ReduceFunction); interpolation_mode:
    "nearest_neighbor" / "linear"; spatial_scale_x/_y, input/output_pixel_offset: finite
    float32; minimum/maximum_samples_per_output: 1 <= Minimum <= Maximum <= 2^32 - 1, Minimum
    times OH and OW at most 2^24; align_regions_to_corners: bool.
    """

    input_tensor: Optional[TensorDesc]
    input_gradient_tensor: TensorDesc
    roi_tensor: TensorDesc
    batch_indices_tensor: TensorDesc
    output_gradient_tensor: Optional[TensorDesc]
    output_roi_gradient_tensor: Optional[TensorDesc]
    # The scalars' defaults are the one-call function's.
    reduction_function: Union[ReduceFunction, str, int] = "average"
    interpolation_mode: Union[InterpolationMode, str, int] = "linear"
    spatial_scale_x: float = 1.0
    spatial_scale_y: float = 1.0
    input_pixel_offset: float = 0.5
    output_pixel_offset: float = -0.5
    minimum_samples_per_output: int = 1
    maximum_samples_per_output: int = UINT32_MAX
    align_regions_to_corners: bool = False
    OPERATOR: ClassVar[str] = OPERATOR
    INDEPENDENT_AXES: ClassVar[str] = "no axis"

    def __post_init__(self) -> None:
        op = OPERATOR
        dy = check_desc(op, "InputGradientTensor", self.input_gradient_tensor)
        check_float_type(op, "InputGradientTensor", dy)
        check_rank(op, "InputGradientTensor", dy, 4, 4)
        roi = check_desc(op, "ROITensor", self.roi_tensor)
        check_same(op, "data_type", ("InputGradientTensor", dy), ("ROITensor", roi))
        check_rank(op, "ROITensor", roi, 2, 4)
        regions = _region_shape(op, "ROITensor", roi, (4,))
        batch = check_desc(op, "BatchIndicesTensor", self.batch_indices_tensor)
        if batch.data_type != DataType.UINT32:
            fail(op, "BatchIndicesTensor.DataType", "must be UINT32", "UINT32",
                 batch.data_type.name, TypeError)
        check_rank(op, "BatchIndicesTensor", batch, 1, 4)
        if _region_shape(op, "BatchIndicesTensor", batch, ()) != regions:
            fail(op, "BatchIndicesTensor.Sizes", "must hold one index per region (ROITensor's R)",
                 regions, batch.sizes)
        if dy.sizes[0] != regions:
            fail(op, "InputGradientTensor.Sizes[0]", "must equal the number of regions (R)",
                 regions, dy.sizes[0])
        if self.output_gradient_tensor is None and self.output_roi_gradient_tensor is None:
            fail(op, "OutputGradientTensor", "or OutputROIGradientTensor must be given (at least "
                 "one output)", "a TensorDesc", None, TypeError)
        if self.output_roi_gradient_tensor is not None:
            droi = check_desc(op, "OutputROIGradientTensor", self.output_roi_gradient_tensor)
            check_same(op, "data_type", ("InputGradientTensor", dy),
                       ("OutputROIGradientTensor", droi))
            check_same(op, "sizes", ("ROITensor", roi), ("OutputROIGradientTensor", droi))
            check_output(op, "OutputROIGradientTensor", droi)
            if self.input_tensor is None:
                fail(op, "InputTensor", "is required with OutputROIGradientTensor",
                     "a TensorDesc", None, TypeError)
        if self.output_gradient_tensor is not None:
            dx = check_desc(op, "OutputGradientTensor", self.output_gradient_tensor)
            check_same(op, "data_type", ("InputGradientTensor", dy), ("OutputGradientTensor", dx))
            check_rank(op, "OutputGradientTensor", dx, 4, 4)
            check_output(op, "OutputGradientTensor", dx)
            image, image_field = dx, "OutputGradientTensor"
        else:
            image = check_desc(op, "InputTensor", self.input_tensor)
            check_rank(op, "InputTensor", image, 4, 4)
            image_field = "InputTensor"
        if image.sizes[1] != dy.sizes[1]:
            fail(op, "InputGradientTensor.Sizes[1]", f"must equal {image_field}.Sizes[1] (C)",
                 image.sizes[1], dy.sizes[1])
        reduction = enum_value(op, ReduceFunction, self.reduction_function, "ReductionFunction",
                               "'average' or 'max' (ReduceFunction)")
        mode = enum_value(op, InterpolationMode, self.interpolation_mode, "InterpolationMode",
                          "'nearest_neighbor' or 'linear' (InterpolationMode)")
        if self.input_tensor is None:
            if reduction == ReduceFunction.MAX:
                fail(op, "InputTensor", "is required with ReductionFunction MAX", "a TensorDesc",
                     None, TypeError)
        else:
            x = check_desc(op, "InputTensor", self.input_tensor)
            check_same(op, "data_type", ("InputGradientTensor", dy), ("InputTensor", x))
            check_same(op, "sizes", (image_field, image), ("InputTensor", x))
        for name in ("spatial_scale_x", "spatial_scale_y", "input_pixel_offset",
                     "output_pixel_offset"):
            field = "".join(p.capitalize() for p in name.split("_"))
            object.__setattr__(self, name, check_float(op, field, getattr(self, name)))
        counts = []
        for name, field in (("minimum_samples_per_output", "MinimumSamplesPerOutput"),
                            ("maximum_samples_per_output", "MaximumSamplesPerOutput")):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                fail(op, field, "must be an integer", "int", type(value).__name__, TypeError)
            if not 1 <= int(value) <= UINT32_MAX:
                fail(op, field, "is out of range", f"1 to {UINT32_MAX}", int(value))
            counts.append(int(value))
        if counts[0] > counts[1]:
            fail(op, "MinimumSamplesPerOutput", "must not exceed MaximumSamplesPerOutput",
                 f"<= {counts[1]}", counts[0])
        if counts[0] * max(dy.sizes[2], dy.sizes[3]) > ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES:
            fail(op, "MinimumSamplesPerOutput", "times the output's height and width must not "
                 "exceed pyvkgrad's 2^24 samples per axis", f"<= {ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES}",
                 counts[0] * max(dy.sizes[2], dy.sizes[3]))
        if not isinstance(self.align_regions_to_corners, (bool, np.bool_)):
            fail(op, "AlignRegionsToCorners", "must be a bool", "bool",
                 type(self.align_regions_to_corners).__name__, TypeError)
        for field, t, most in ((image_field, image, MAX_COUNT),
                               ("InputGradientTensor", dy, MAX_COUNT // 3)):
            if t.element_count > most:
                fail(op, f"{field}.Sizes", "hold too many elements for pyvkgrad's kernels",
                     f"<= {most}", t.element_count)
        object.__setattr__(self, "reduction_function", reduction)
        object.__setattr__(self, "interpolation_mode", mode)
        object.__setattr__(self, "minimum_samples_per_output", counts[0])
        object.__setattr__(self, "maximum_samples_per_output", counts[1])
        object.__setattr__(self, "align_regions_to_corners", bool(self.align_regions_to_corners))

    def tensor_fields(self):
        fields = [("input_tensor", (self.input_tensor, READ)),
                  ("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                  ("roi_tensor", (self.roi_tensor, READ)),
                  ("batch_indices_tensor", (self.batch_indices_tensor, READ)),
                  ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)),
                  ("output_roi_gradient_tensor", (self.output_roi_gradient_tensor, WRITE))]
        return tuple((name, f) for name, f in fields if f[0] is not None)

    @property
    def is_max(self) -> bool:
        return self.reduction_function == ReduceFunction.MAX

    @property
    def image(self) -> TensorDesc:
        """X's (and dX's) description, {B, C, H, W}: dX's, or X's where dX is not asked for."""
        return (self.output_gradient_tensor if self.output_gradient_tensor is not None
                else self.input_tensor)

    def _samples_bound(self, out_size: int, size: int, in_cell: bool) -> int:
        """At most how many samples of one region along one axis a kernel visits per item:
        those reading one pixel (the gather) or those of one output inside the image (MAX's
        selection). Where S = Minimum, all N = O * Minimum (or S) of them may; where S exceeds
        Minimum the spacing is over 1/2 pixel, so at most 5 fall within the 2 pixels a tap
        reaches (8 with rounding to spare), and at most 2 (size + 1) + 1 inside the image."""
        cap = max(1, ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out_size)
        low = min(self.minimum_samples_per_output, cap)
        if in_cell:
            return min(cap, self.maximum_samples_per_output, max(low, 2 * size + 6))
        return min(cap * out_size, max(low * out_size, 8))

    def plan(self, limits: Limits) -> Plan:
        dy, dx, x = self.input_gradient_tensor, self.output_gradient_tensor, self.input_tensor
        roi, batch = self.roi_tensor, self.batch_indices_tensor
        droi = self.output_roi_gradient_tensor
        _, _, out_h, out_w = dy.sizes
        _, _, height, width = self.image.sizes
        wg = limits.local_size
        linear = self.interpolation_mode == InterpolationMode.LINEAR
        constants = dict(
            WG=wg, IS_F16=dy.data_type == DataType.FLOAT16, IS_LINEAR=linear, IS_MAX=self.is_max,
            ALIGNED=self.align_regions_to_corners, SPATIAL_SCALE_X=self.spatial_scale_x,
            SPATIAL_SCALE_Y=self.spatial_scale_y, INPUT_PIXEL_OFFSET=self.input_pixel_offset,
            OUTPUT_PIXEL_OFFSET=self.output_pixel_offset,
            MINIMUM=self.minimum_samples_per_output, MAXIMUM=self.maximum_samples_per_output,
            CAP_Y=max(1, ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out_h),
            CAP_X=max(1, ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out_w),
            ROI_REGION_STRIDE=roi.element_strides[-2],
            ROI_COORDINATE_STRIDE=roi.element_strides[-1],
            # DY_SIZES[0], R, unused (0): kernels take it as a push constant, `regions`, so
            # that operators of every region count share their pipelines.
            BATCH_STRIDE=batch.element_strides[-1], X_SIZES=self.image.sizes,
            DY_SIZES=(0, *dy.sizes[1:]),
            X_STRIDES=x.element_strides if x is not None else (0, 0, 0, 0),
            DY_STRIDES=dy.element_strides, TILE=self._tile(),
            # The regions' axes for dX's gather (else it computes them), where they fit a buffer.
            STORED_AXES=48 * dy.sizes[0] <= limits.max_storage_buffer_range)
        inputs = dict(roi="roi_tensor", batch_indices="batch_indices_tensor",
                      dy="input_gradient_tensor", x="input_tensor" if x is not None else "no_input")
        scratch = [] if x is not None else [Scratch("no_input", 16)]
        dispatches: List[Dispatch] = []
        budget = limits.max_loop_iterations - LOOP_MARGIN if limits.max_loop_iterations else 0
        # Each output's in-image samples (MAX's selection, AVERAGE's dROI terms): the bound on
        # their rows and columns the windows cover.
        cell_rows = self._samples_bound(out_h, height, True)
        cell_cols = self._samples_bound(out_w, width, True)
        cell_limits = dict(row_limit=cell_rows if budget else UNBOUNDED,
                           col_limit=cell_cols if budget else UNBOUNDED)
        selected = "selected" if self.is_max else "no_selection"
        if self.is_max:
            scratch.append(Scratch("selected", 12 * dy.element_count))
            windows = plan_windows(1, cell_rows, cell_cols, budget, 3 + SEARCH_LOOPS)
            for k, (_, _, (rb, re), (cb, ce), cost) in enumerate(windows):
                for first, end, groups in grid_slices(dy.element_count, wg, limits, cost + 1):
                    dispatches.append(Dispatch(
                        "roi_align_grad_select", dict(inputs, selected="selected"), groups,
                        constants=constants,
                        push=dict(count=end, first=first, row_begin=rb, row_end=re,
                                  col_begin=cb, col_end=ce, first_window=int(k == 0),
                                  **cell_limits)))
        else:
            scratch.append(Scratch("no_selection", 16))
        if dx is not None:
            dispatches += self._gather_dx(limits, budget, constants, inputs, selected, scratch)
        if droi is not None:
            # Per dY element its samples' four sums: AVERAGE loops over the output's samples
            # (windows as MAX's selection), MAX takes its selected one, NEAREST writes 0.
            scratch.append(Scratch("partials", 16 * dy.element_count))
            if linear and not self.is_max:
                windows = plan_windows(1, cell_rows, cell_cols, budget, 3 + SEARCH_LOOPS)
            else:
                windows = [(0, 1, (0, UNBOUNDED), (0, UNBOUNDED), 3)]
            for k, (_, _, (rb, re), (cb, ce), cost) in enumerate(windows):
                for first, end, groups in grid_slices(dy.element_count, wg, limits, cost + 1):
                    dispatches.append(Dispatch(
                        "roi_align_grad_roi_partials",
                        dict(inputs, selected=selected, partials="partials"), groups,
                        constants=constants,
                        push=dict(count=end, first=first, row_begin=rb, row_end=re,
                                  col_begin=cb, col_end=ce, first_window=int(k == 0),
                                  **cell_limits)))
            # Per dROI element the sum of its region's partials, in windows of them: one
            # workgroup per region (an invocation per coordinate adds, the others load; one
            # subgroup on a CPU device, where barriers cost). A window of n items costs at
            # most n + 2 ceil(n / width) + 3 iterations: the adds, two per pass, the loops'
            # ends.
            items = dy.sizes[1] * out_h * out_w
            narrow = limits.narrow_reductions and limits.subgroup_size < wg
            roi_wg = limits.subgroup_size if narrow else wg
            step = max(1, (budget - 8) * roi_wg // (roi_wg + 2)) if budget else items
            spans = [(i, min(i + step, items)) for i in range(0, items, step)]
            regions = dy.sizes[0]
            scratch.append(Scratch("roi_accumulator", 16 * regions if len(spans) > 1 else 16))
            for k, (begin, end_item) in enumerate(spans):
                n = end_item - begin
                loops = n + 2 * -(-n // roi_wg) + 3
                for first, end, groups in grid_slices(regions, 1, limits, loops):
                    dispatches.append(Dispatch(
                        "roi_align_grad_roi",
                        dict(inputs, partials="partials", accumulator="roi_accumulator",
                             droi="output_roi_gradient_tensor"), groups,
                        constants=dict(constants, WG=roi_wg,
                                       DROI_REGION_STRIDE=droi.element_strides[-2],
                                       DROI_COORDINATE_STRIDE=droi.element_strides[-1]),
                        push=dict(count=end, first=first, item_begin=begin, item_end=end_item,
                                  first_window=int(k == 0),
                                  last_window=int(k == len(spans) - 1))))
        check_windows(len(dispatches))
        return Plan(tuple(dispatches), tuple(scratch),
                    tensors=tuple(n for n, _ in self.tensor_fields()))

    def _tile(self) -> int:
        """The side of the tiles whose region lists dX's gather visits."""
        batch, _, height, width = self.image.sizes
        regions, tile = self.input_gradient_tensor.sizes[0], 8
        while tile < max(height, width) and \
                4 * batch * -(-height // tile) * -(-width // tile) * regions > TILE_LIST_BYTES:
            tile *= 2
        return tile

    def _gather_dx(self, limits: Limits, budget: int, constants: dict, inputs: dict,
                   selected: str, scratch: list) -> List[Dispatch]:
        """dX's gather: each region's box of reachable indices first, then the gather in windows
        of regions, rows or columns in summation order."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        _, _, out_h, out_w = dy.sizes
        _, _, height, width = dx.sizes
        regions = dy.sizes[0]
        rows = self._samples_bound(out_h, height, False)
        cols = self._samples_bound(out_w, width, False)
        windows = plan_windows(regions, rows, cols, budget, 2 + SEARCH_LOOPS)
        scratch.append(Scratch("accumulator", 4 * dx.element_count if len(windows) > 1 else 16))
        # Each region's box of reached indices, then per tile its list of the regions of its
        # image whose box meets it (in windows of regions under a loop limit).
        tile = constants["TILE"]
        tiles = dx.sizes[0] * -(-height // tile) * -(-width // tile)
        if tiles * (regions + 1) > UINT32_MAX:
            fail(OPERATOR, "InputGradientTensor.Sizes[0]", "times the tiles of dX's images is "
                 "too large for pyvkgrad's region lists", f"<= {UINT32_MAX}",
                 tiles * (regions + 1))
        scratch += [Scratch("boxes", 16 * regions),
                    Scratch("axes", 48 * regions if constants["STORED_AXES"] else 16),
                    Scratch("tile_regions", 4 * tiles * (regions + 1))]
        dispatches = [Dispatch("roi_align_grad_boxes", dict(inputs, boxes="boxes", axes="axes"),
                               groups, constants=constants, push=dict(count=end, first=first))
                      for first, end, groups in grid_slices(regions, limits.local_size, limits,
                                                            SEARCH_LOOPS + 3)]
        # Each output's g for 4 channels at a time (AVERAGE's division done once), where the
        # table fits one buffer; else the gather computes g per term from dY.
        shares = regions * out_h * out_w * -(-dy.sizes[1] // 4)
        use_shares = 16 * shares <= limits.max_storage_buffer_range
        scratch.append(Scratch("shares", 16 * shares if use_shares else 16))
        if use_shares:
            dispatches += [Dispatch("roi_align_grad_shares", dict(inputs, shares="shares"),
                                    groups, constants=constants,
                                    push=dict(count=end, first=first))
                           for first, end, groups in grid_slices(shares, limits.local_size,
                                                                 limits, 2)]
        step = max(1, budget - 8) if budget else regions
        for r0 in range(0, regions, step):
            r1 = min(r0 + step, regions)
            dispatches += [Dispatch("roi_align_grad_tiles",
                                    dict(inputs, boxes="boxes", tile_regions="tile_regions"),
                                    groups, constants=constants,
                                    push=dict(count=end, first=first, roi_begin=r0, roi_end=r1,
                                              first_window=int(r0 == 0), regions=regions))
                           for first, end, groups in grid_slices(tiles, limits.local_size,
                                                                 limits, r1 - r0 + 2)]
        # The gather's items: 4 channels of one dX position each (the geometry shared).
        items = dx.sizes[0] * -(-dx.sizes[1] // 4) * height * width
        for k, (r0, r1, (rb, re), (cb, ce), cost) in enumerate(windows):
            for first, end, groups in grid_slices(items, limits.local_size, limits, cost + 1):
                dispatches.append(Dispatch(
                    "roi_align_grad",
                    dict(inputs, selected=selected, accumulator="accumulator",
                         dx="output_gradient_tensor", boxes="boxes",
                         tile_regions="tile_regions", axes="axes", shares="shares"), groups,
                    constants=dict(constants, DX_STRIDES=dx.element_strides,
                                   SHARES=use_shares),
                    push=dict(count=end, first=first, roi_begin=r0, roi_end=r1, row_begin=rb,
                              row_end=re, col_begin=cb, col_end=ce,
                              row_limit=rows if budget else UNBOUNDED,
                              col_limit=cols if budget else UNBOUNDED,
                              first_window=int(k == 0), last_window=int(k == len(windows) - 1),
                              regions=regions)))
        return dispatches


def roi_align_grad(input: Optional[np.ndarray], input_gradient: np.ndarray, roi: np.ndarray,
                   batch_indices: np.ndarray, output_gradient_sizes: Sequence[int], *,
                   reduction_function: Union[str, ReduceFunction] = "average",
                   interpolation_mode: Union[str, InterpolationMode] = "linear",
                   spatial_scale_x: float = 1.0, spatial_scale_y: float = 1.0,
                   input_pixel_offset: float = 0.5, output_pixel_offset: float = -0.5,
                   minimum_samples_per_output: int = 1,
                   maximum_samples_per_output: int = 2**32 - 1,
                   align_regions_to_corners: bool = False, roi_gradient: bool = False,
                   device: DeviceLike = None) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(dX, dROI or None) of a ROI_ALIGN1 whose input had `output_gradient_sizes` {B, C, H, W},
    on the device: new packed arrays of input_gradient's dtype, dROI (with roi_gradient) in
    roi's shape. input: X (required for MAX and for dROI; None is allowed otherwise);
    input_gradient: dY {R, C, OH, OW}; roi: {R, 4} (or {1, R, 4}, {1, 1, R, 4}), rows [x1, y1,
    x2, y2] in input_gradient's dtype; batch_indices: uint32 {R}. Defaults: DML_ROI_ALIGN's
    sampling (offsets 0.5 / -0.5), bilinear averaging, S as the region asks."""
    if not isinstance(roi_gradient, (bool, np.bool_)):
        fail(OPERATOR, "roi_gradient", "must be a bool", "bool", type(roi_gradient).__name__,
             TypeError)
    roi_gradient = bool(roi_gradient)
    params = (tuple(output_gradient_sizes) if hasattr(output_gradient_sizes, "__iter__")
              else output_gradient_sizes, reduction_function, interpolation_mode,
              spatial_scale_x, spatial_scale_y, input_pixel_offset, output_pixel_offset,
              minimum_samples_per_output, maximum_samples_per_output, align_regions_to_corners,
              roi_gradient)

    def describe(d, dev):
        # params' copy: an iterator given as the sizes is read once, here as for the key.
        sizes = as_uint_tuple(params[0], OPERATOR, "output_gradient_sizes")
        if len(sizes) != 4 or min(sizes) == 0:
            fail(OPERATOR, "OutputGradientTensor.Sizes", "must be 4 sizes of at least 1",
                 "{B, C, H, W}", sizes)
        dy = d["input_gradient"]
        droi = (named_desc(OPERATOR, "OutputRoiGradientTensor", dy.data_type, d["roi"].sizes)
                if roi_gradient else None)
        desc = RoiAlignGradDesc(d.get("input"), dy, d["roi"], d["batch_indices"],
                                named_desc(OPERATOR, "OutputGradientTensor", dy.data_type, sizes),
                                droi, *params[1:-1])
        outputs = {"output_gradient": (sizes, dy.data_type.element_size)}
        if roi_gradient:
            outputs["output_roi_gradient"] = (np.shape(roi), dy.data_type.element_size)
        return desc, outputs

    arrays = dict(input=input, input_gradient=input_gradient, roi=roi,
                  batch_indices=batch_indices)
    if input is None:
        del arrays["input"]
    outputs = _one_call.run(OPERATOR, device, params, arrays, describe, None,
                            data_types={"batch_indices": (DataType.UINT32,)})
    return outputs[0], (outputs[1] if roi_gradient else None)
