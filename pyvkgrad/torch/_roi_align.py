"""pyvkgrad.torch.roi_align's pieces: torchvision.ops.roi_align's arguments as ROI_ALIGN_GRAD's
regions and parameters, the forward in PyTorch operations (ROI_ALIGN1's samples,
docs/semantics.md §16) and the autograd Function whose backward runs ROI_ALIGN_GRAD on the
device. torchvision is not needed: its forward is reimplemented here, so that forward and
backward differentiate the same samples.
"""

from __future__ import annotations

import operator
from typing import List, Sequence, Tuple, Union

import numpy as np
import torch

from ..defaults import ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES
from ..ops.roi_align_grad import roi_align_grad
from . import _runtime
from ._chain import single_backward

NAME = "pyvkgrad.torch.roi_align"
Boxes = Union[torch.Tensor, Sequence[torch.Tensor]]


def output_size_pair(output_size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    """torchvision's output_size: an int or (height, width), each at least 1 (any integer
    type: a NumPy integer, a 0-d integer tensor)."""
    try:
        pair: Tuple[int, ...] = (operator.index(output_size),) * 2  # type: ignore[arg-type]
    except TypeError:
        try:
            pair = tuple(operator.index(v) for v in output_size)  # type: ignore[union-attr]
        except TypeError:
            pair = ()
    if len(pair) != 2 or not all(v >= 1 for v in pair):
        raise ValueError(f"{NAME}: output_size must be an int or a pair of ints of at least 1, "
                         f"got {output_size!r}")
    return pair[0], pair[1]


def regions(input: torch.Tensor, boxes: Boxes, spatial_scale: float, aligned: bool
            ) -> Tuple[np.ndarray, np.ndarray]:
    """(ROI {K, 4} float32 [x1, y1, x2, y2] already scaled, batch indices uint32 {K}) from
    torchvision's boxes: a Tensor[K, 5] (batch index first) or a list of Tensor[L, 4], one per
    image. Not aligned, torchvision enlarges a region narrower than one scaled pixel to one
    (its length max(x2 - x1, 1), y alike), which ROI_ALIGN_GRAD does not: the regions passed
    are enlarged so, x2 the float32 nearest x1 + 1 whose length x2 - x1 is not above 1 (where
    x1 + 1 rounds up, a length of 1 + 2^-23 took two samples where torchvision takes one).
    Corners must be finite (ValueError)."""
    if isinstance(boxes, torch.Tensor):
        if boxes.dim() != 2 or boxes.shape[1] != 5:
            raise ValueError(f"{NAME}: boxes must be a Tensor[K, 5] (batch index, x1, y1, x2, "
                             f"y2) or a list of Tensor[L, 4], got shape {tuple(boxes.shape)}")
        rois = boxes.detach().cpu().double().numpy()
    else:
        parts: List[np.ndarray] = []
        for i, b in enumerate(boxes):
            if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.shape[1] != 4:
                raise ValueError(f"{NAME}: boxes[{i}] must be a Tensor[L, 4] (x1, y1, x2, y2)")
            parts.append(np.concatenate([np.full((b.shape[0], 1), i),
                                         b.detach().cpu().double().numpy()], 1))
        rois = np.concatenate(parts) if parts else np.zeros((0, 5))
    batch = rois[:, 0]
    if np.any((batch < 0) | (batch >= input.shape[0]) | (batch != np.floor(batch))):
        raise ValueError(f"{NAME}: the boxes' batch indices must be integers in [0, "
                         f"{input.shape[0]})")
    f = np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (rois[:, 1:].astype(f) * f(spatial_scale)).astype(f)
    if not np.isfinite(scaled).all():
        raise ValueError(f"{NAME}: the boxes' coordinates (times spatial_scale) must be finite "
                         f"float32 values")
    if not aligned:
        for lo, hi in ((0, 2), (1, 3)):
            narrow = (scaled[:, hi] - scaled[:, lo]) < 1
            widened = scaled[narrow, lo] + f(1)
            over = (widened - scaled[narrow, lo]) > f(1)
            widened[over] = np.nextafter(widened[over], f(-np.inf))
            scaled[narrow, hi] = widened
    return scaled, batch.astype(np.uint32)


def grad_parameters(sampling_ratio: int, aligned: bool) -> dict:
    """ROI_ALIGN_GRAD's parameters for torchvision's (the regions already scaled): LINEAR
    AVERAGE, OutputPixelOffset -0.5, InputPixelOffset 0.5 if aligned else 0, sampling_ratio s > 0
    as Minimum = Maximum = s, else as many samples as the region asks."""
    fixed = sampling_ratio > 0
    return dict(input_pixel_offset=0.5 if aligned else 0.0, output_pixel_offset=-0.5,
                minimum_samples_per_output=sampling_ratio if fixed else 1,
                maximum_samples_per_output=sampling_ratio if fixed else 2**32 - 1)


def unsampled(rois: np.ndarray, sampling_ratio: int) -> np.ndarray:
    """{K} bool: the regions torchvision samples nothing of. With sampling_ratio <= 0 its
    sample count along an axis is ceil(length / output), none where the length is 0 or
    negative (an empty or reversed box, aligned: not aligned it widens every box to a pixel
    first), so their output is 0 and they pass on no gradient; DirectML takes at least one
    sample of such a region, at |length|'s count."""
    if sampling_ratio > 0:
        return np.zeros(len(rois), bool)
    return (rois[:, 2] <= rois[:, 0]) | (rois[:, 3] <= rois[:, 1])


def _axis(lo: torch.Tensor, hi: torch.Tensor, out: int, size: int, params: dict):
    """One region's samples along one axis as ROI_ALIGN1 takes them (float32, in the order of
    docs/semantics.md §16.1): (S, in-image mask, lower and upper taps, weight l of the upper)."""
    length = hi - lo
    q = float(torch.abs(length) / out)
    s = min(max(int(np.ceil(q)), params["minimum_samples_per_output"]),
            params["maximum_samples_per_output"], max(1, ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out))
    n = out * s
    k = torch.arange(n, dtype=torch.float32)
    c = ((k - params["output_pixel_offset"]) * (length / n) + lo) - params["input_pixel_offset"]
    inside = (c >= -1) & (c <= size)
    clamped = torch.clamp(c, 0, size - 1)
    low = torch.floor(clamped)
    return s, inside, low.long(), torch.clamp(low.long() + 1, max=size - 1), clamped - low


# The forward's samples at a time (channels x sample rows x sample columns): a region's
# samples are gathered in slabs of at most this many, so that a box far larger than its bins
# (a 2000 x 2000 box took about 2 GB at once) costs bounded memory.
FORWARD_SLAB_SAMPLES = 2**22


def forward(input: torch.Tensor, rois: np.ndarray, batch: np.ndarray, out_h: int, out_w: int,
            params: dict, skip: np.ndarray) -> torch.Tensor:
    """ROI_ALIGN1 with bilinear averaging, in float32 PyTorch operations, one region at a time,
    in slabs of at most FORWARD_SLAB_SAMPLES samples (each tap gathered per sample, never
    whole image rows): {K, C, OH, OW} in input's dtype; 0 for the regions in `skip`
    (`unsampled`). Each bin sums its samples along x, then those sums along y, and divides by
    the count."""
    x = input.detach().float()
    _, channels, height, width = x.shape
    out = torch.zeros((len(rois), channels, out_h, out_w), dtype=torch.float32, device=x.device)
    corners = torch.from_numpy(rois)
    for r in np.flatnonzero(~skip):
        sy, in_y, y0, y1, ly = _axis(corners[r, 1], corners[r, 3], out_h, height, params)
        sx, in_x, x0, x1, lx = _axis(corners[r, 0], corners[r, 2], out_w, width, params)
        axes = [(t.to(x.device), b.to(x.device), lerp.to(x.device), inside.to(x.device),
                 (torch.arange(len(t)) // s).to(x.device))
                for t, b, lerp, inside, s in ((y0, y1, ly, in_y, sy), (x0, x1, lx, in_x, sx))]
        step_x = min(out_w * sx, FORWARD_SLAB_SAMPLES)
        step_c = max(1, min(channels, FORWARD_SLAB_SAMPLES // step_x))
        step_y = max(1, FORWARD_SLAB_SAMPLES // (step_c * step_x))
        image = x[int(batch[r])]
        for c0 in range(0, channels, step_c):
            for i0 in range(0, out_h * sy, step_y):
                for j0 in range(0, out_w * sx, step_x):
                    _slab(image[c0:c0 + step_c], axes, slice(i0, i0 + step_y),
                          slice(j0, j0 + step_x), sx, out[r, c0:c0 + step_c])
        out[r] /= sy * sx
    return out.to(input.dtype)


def _slab(image: torch.Tensor, axes: list, rows: slice, cols: slice, sx: int,
          out: torch.Tensor) -> None:
    """Add the samples of sample rows `rows` and columns `cols` to their bins in out {C', OH,
    OW}: bilinear values of image {C', H, W}, 0 outside the image (the clamped edge pixel may
    be Inf or NaN), summed along x into bins, then along y."""
    (y0, y1, ly, in_y, ybins), (x0, x1, lx, in_x, xbins) = axes
    top, bottom, xa, xb = y0[rows, None], y1[rows, None], x0[None, cols], x1[None, cols]
    wy, wx = ly[rows, None], lx[None, cols]
    values = ((1 - wy) * ((1 - wx) * image[:, top, xa] + wx * image[:, top, xb])
              + wy * ((1 - wx) * image[:, bottom, xa] + wx * image[:, bottom, xb]))
    values = torch.where(in_y[rows, None] & in_x[None, cols], values,
                         torch.zeros((), dtype=values.dtype, device=values.device))
    bins = xbins[cols]
    first = int(bins[0])
    if cols.start == 0 and len(bins) == len(xbins):  # whole rows: each bin's sx samples
        sums = values.reshape(values.shape[0], values.shape[1], -1, sx).sum(3)
    else:
        sums = values.new_zeros((values.shape[0], values.shape[1], int(bins[-1]) - first + 1))
        sums.index_add_(2, bins - first, values)
    out[:, :, first:first + sums.shape[2]].index_add_(1, ybins[rows], sums)


class RoiAlign(torch.autograd.Function):
    """PyTorch's operations forward; ROI_ALIGN_GRAD's dX backward on the device, in float32
    whatever the input's dtype (the regions as the forward took them), rounded once to it. The
    boxes get no gradient (as torchvision's)."""

    @staticmethod
    def forward(ctx, input, rois, batch, out_h, out_w, params, skip):
        ctx.input = (tuple(input.shape), input.dtype, input.device)
        ctx.rois, ctx.batch, ctx.params, ctx.skip = rois, batch, params, skip
        return forward(input, rois, batch, out_h, out_w, params, skip)

    @staticmethod
    @single_backward
    def backward(ctx, grad_output):
        shape, dtype, device = ctx.input
        if len(ctx.rois) == 0:
            return (torch.zeros(shape, dtype=dtype, device=device),) + (None,) * 6
        dy = grad_output.detach().float().cpu().contiguous().numpy()
        if ctx.skip.any():
            dy = dy.copy()
            dy[ctx.skip] = 0  # regions torchvision samples nothing of: no gradient
        dx, _ = roi_align_grad(None, dy, ctx.rois, ctx.batch, shape,
                               device=_runtime.get_device(), **ctx.params)
        grad_input = torch.from_numpy(dx).to(dtype=dtype, device=device)
        return (grad_input,) + (None,) * 6
