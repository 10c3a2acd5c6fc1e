"""ROI_ALIGN_GRAD's parts of its operator-table record (operators.py): the case generator, the
descriptor of a case and its inverse, the magnitudes its tolerances are relative to, and its
parameters' examples for the descriptor fuzzing. Nothing here touches a device."""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np

from . import reference
from .operator_record import Case, packed
from .ops.roi_align_grad import RoiAlignGradDesc
from .tensor import TensorDesc

_REDUCTIONS = ("average", "max")
_MODES = ("linear", "nearest_neighbor")


def roi_align_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
    """X of `shape` as {B, C, H, W} (leading 1s for fewer dimensions), 1 to 5 regions with 1 to
    3 outputs a side; regions anywhere from 30% before to 30% past the image (so partly
    outside, mirrored where x1 > x2, sometimes empty), a batch index out of range now and then;
    every parameter drawn over what the descriptor allows (small sample counts); dROI asked for
    half the time (drawn last, so the other draws are those of the cases without it)."""
    b, c, h, w = (1,) * (4 - len(shape[:4])) + tuple(shape[:4])
    regions = int(rng.integers(1, 6))
    out_h, out_w = (int(v) for v in rng.integers(1, 4, 2))
    x = rng.standard_normal((b, c, h, w)).astype(dtype)
    dy = rng.standard_normal((regions, c, out_h, out_w)).astype(dtype)
    scale_x, scale_y = (float(np.float32(v)) for v in rng.uniform(0.5, 2.0, 2))
    roi = np.empty((regions, 4))
    roi[:, 0::2] = rng.uniform(-0.3 * w, 1.3 * w, (regions, 2)) / scale_x
    roi[:, 1::2] = rng.uniform(-0.3 * h, 1.3 * h, (regions, 2)) / scale_y
    empty = rng.random(regions) < 0.1
    roi[empty, 2] = roi[empty, 0]
    batch = rng.integers(0, b, regions)
    batch[rng.random(regions) < 0.15] = b  # outside [0, B): the region adds nothing
    offsets = ((0.5, -0.5), (0.0, 0.0), tuple(float(v) for v in rng.uniform(-1, 1, 2)))
    offset = offsets[int(rng.integers(3))]
    minimum = int(rng.integers(1, 3))
    kwargs = dict(reduction_function=_REDUCTIONS[int(rng.integers(2))],
                  interpolation_mode=_MODES[int(rng.integers(2))],
                  spatial_scale_x=scale_x, spatial_scale_y=scale_y,
                  input_pixel_offset=offset[0], output_pixel_offset=offset[1],
                  minimum_samples_per_output=minimum,
                  maximum_samples_per_output=(minimum, minimum + 2, 2**32 - 1)[
                      int(rng.integers(3))],
                  align_regions_to_corners=bool(rng.integers(2)))
    kwargs["roi_gradient"] = bool(rng.integers(2))
    label = (f"{kwargs['reduction_function']} {kwargs['interpolation_mode']} "
             f"{np.dtype(dtype).name} X {[b, c, h, w]}, {regions} regions -> {out_h}x{out_w}"
             + (", aligned" if kwargs["align_regions_to_corners"] else "")
             + (", dROI" if kwargs["roi_gradient"] else ""))
    return Case((x, dy, roi.astype(dtype), batch.astype(np.uint32), (b, c, h, w)), kwargs,
                label=label)


def roi_align_describe(case: Case) -> RoiAlignGradDesc:
    x, dy, roi, batch, sizes = case.args
    kwargs = dict(case.kwargs)
    droi = packed(roi) if kwargs.pop("roi_gradient", False) else None
    return RoiAlignGradDesc(packed(x), packed(dy), packed(roi), packed(batch),
                            TensorDesc(packed(dy).data_type, sizes), droi, **kwargs)


def roi_align_call(desc: RoiAlignGradDesc, values: Dict[str, np.ndarray]):
    args = (values.get("input_tensor"), values["input_gradient_tensor"], values["roi_tensor"],
            values["batch_indices_tensor"], desc.image.sizes)
    names = ("reduction_function", "interpolation_mode", "spatial_scale_x", "spatial_scale_y",
             "input_pixel_offset", "output_pixel_offset", "minimum_samples_per_output",
             "maximum_samples_per_output", "align_regions_to_corners")
    kwargs = {name: getattr(desc, name) for name in names}
    return args, dict(kwargs, roi_gradient=desc.output_roi_gradient_tensor is not None)


def roi_align_magnitude(args, kwargs):
    """Per output element the sum of its terms' absolute values (MAX's selections depend on X
    alone): dX, and dROI where asked for (reference.roi_align_grad_magnitude)."""
    return tuple(m for m in reference.roi_align_grad_magnitude(*args, **kwargs) if m is not None)


def roi_align_parameters(rank: int):
    return {"reduction_function": (["average", "max", 2, 7], ["sum", 1, 1.5]),
            "interpolation_mode": (["linear", "nearest_neighbor", 0, 1], ["cubic", 2, 1.0]),
            "spatial_scale_x": ([1.0, 0.5, 0.0, -2.0], [math.nan, math.inf, 1e39, "1"]),
            "spatial_scale_y": ([1.0, 3.0], [math.nan, True]),
            "input_pixel_offset": ([0.5, 0.0], [math.nan, None]),
            "output_pixel_offset": ([-0.5, 0.25], [math.inf]),
            "minimum_samples_per_output": ([1], [0, -1, 1.5, True, 2**32]),
            "maximum_samples_per_output": ([2**32 - 1, 8], [0, 2**32, 2.0]),
            "align_regions_to_corners": ([True, False], [1, "yes"])}
