"""Autograd functions whose forward runs in PyTorch and whose backward runs on a Vulkan device:
each call is a chain of one step (`_chain.py`), except local_response_norm and roi_align,
whose backward is one submission of their own (`single_backward`).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from ..ops.local_response_normalization_grad import local_response_normalization_grad
from . import _resample_map as rmap
from ._pooling import PoolStep, Size, check_pool_options, pool_input
from . import _roi_align
from . import _runtime
from ._batch_norm import BatchNormStep
from ._chain import (ClipStep, InterpolateStep, ReluStep, apply_chain,
                     data_type_of, needs_grad, single_backward)


def relu(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.relu whose backward is DirectML's ACTIVATION_RELU_GRAD on the output
    (dX = Y > 0 ? dY : 0; a NaN input gets gradient 0 where PyTorch passes dY)."""
    if not needs_grad(input):
        return F.relu(input, inplace=inplace)
    data_type_of(input, "relu")
    return apply_chain([ReluStep(inplace)], input, [])


def threshold(input: torch.Tensor, threshold: float, value: float,
              inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.threshold (y = x if x > threshold else value) whose backward is
    ACTIVATION_RELU_GRAD of x - threshold (the difference taken in float32, as PyTorch compares)."""
    if not needs_grad(input):
        return F.threshold(input, threshold, value, inplace)
    data_type_of(input, "threshold")
    return apply_chain([ReluStep(inplace, threshold, value)], input, [])


def hardtanh(input: torch.Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.hardtanh whose backward is DirectML's ELEMENT_WISE_CLIP_GRAD
    (dX = (x <= min_val or x >= max_val) ? 0 : dY, the bounds as float32; a NaN input passes
    dY, as PyTorch's scalar path does and its vectorized path does not)."""
    if not needs_grad(input):
        return F.hardtanh(input, min_val, max_val, inplace)
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")  # as nn.Hardtanh
    data_type_of(input, "hardtanh")
    return apply_chain([ClipStep(min_val, max_val, inplace)], input, [])


def relu6(input: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """torch.nn.functional.relu6 (hardtanh between 0 and 6) whose backward is
    ELEMENT_WISE_CLIP_GRAD with Min 0 and Max 6."""
    if not needs_grad(input):
        return F.relu6(input, inplace)
    data_type_of(input, "relu6")
    return apply_chain([ClipStep(0.0, 6.0, inplace, "relu6")], input, [])


def batch_norm(input: torch.Tensor, running_mean: Optional[torch.Tensor],
               running_var: Optional[torch.Tensor], weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.batch_norm (2-D to 5-D input, channels on axis 1). Training (batch
    statistics): the forward is BATCH_NORMALIZATION_TRAINING and the backward
    BATCH_NORMALIZATION_TRAINING_GRAD, both on the device; the running statistics are updated
    as PyTorch does (unbiased variance, momentum). Evaluation (the running statistics as
    constants): PyTorch's forward, BATCH_NORMALIZATION_GRAD's backward."""
    if not needs_grad(input, weight, bias):
        return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                            eps)
    data_type_of(input, "batch_norm")
    return apply_chain([BatchNormStep(training, momentum, eps)], input,
                       [weight, bias, running_mean, running_var])


def check_interpolate_mode(mode: str, antialias: bool = False) -> None:
    """Raise for what DirectML's ResampleGrad cannot express (no silent fallback)."""
    if antialias:
        raise ValueError(f"pyvkgrad.torch.interpolate: antialias=True (mode={mode!r}) has no "
                         f"DirectML ResampleGrad equivalent: DirectML resamples with nearest or "
                         f"linear taps only; use torch.nn.functional.interpolate")
    if mode not in rmap.SUPPORTED_MODES:
        raise ValueError(f"pyvkgrad.torch.interpolate: mode={mode!r} has no DirectML "
                         f"ResampleGrad equivalent (DML_INTERPOLATION_MODE is nearest neighbor "
                         f"or linear); supported: {', '.join(rmap.SUPPORTED_MODES)}; use "
                         f"torch.nn.functional.interpolate for {mode!r}")


def interpolate(input: torch.Tensor, size: Union[None, int, Sequence[int]] = None,
                scale_factor: Union[None, float, Sequence[float]] = None, mode: str = "nearest",
                align_corners: Optional[bool] = None,
                recompute_scale_factor: Optional[bool] = None,
                antialias: bool = False) -> torch.Tensor:
    """torch.nn.functional.interpolate in modes nearest, nearest-exact, linear, bilinear,
    trilinear, whose backward is DirectML's RESAMPLE_GRAD with the parameters of docs/torch.md
    (5-D input folds N and C into one axis). Other modes and antialias raise ValueError."""
    check_interpolate_mode(mode, antialias)
    if not needs_grad(input):
        return F.interpolate(input, size=size, scale_factor=scale_factor, mode=mode,
                             align_corners=align_corners,
                             recompute_scale_factor=recompute_scale_factor)
    data_type_of(input, "interpolate")
    return apply_chain([InterpolateStep(size, scale_factor, mode, align_corners,
                                         recompute_scale_factor)], input, [])


def _pool(kind: str, k: int, input: torch.Tensor, kernel_size, stride, padding, ceil_mode,
          count_include_pad=True, dilation=1) -> torch.Tensor:
    """The bridged avg_poolNd / max_poolNd: PyTorch's forward, DirectML's backward."""
    what = f"{kind}_pool{k}d"
    if not needs_grad(input):
        if kind == "avg":
            pool = F.avg_pool2d if k == 2 else F.avg_pool3d
            return pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad)
        pool = F.max_pool2d if k == 2 else F.max_pool3d
        return pool(input, kernel_size, stride, padding, dilation, ceil_mode)
    data_type_of(input, what)
    pool_input(input, k, what)
    return apply_chain([PoolStep(kind, k, kernel_size, stride, padding, ceil_mode,
                                 count_include_pad, dilation)], input, [])


def avg_pool2d(input: torch.Tensor, kernel_size: Size, stride: Optional[Size] = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> torch.Tensor:
    """torch.nn.functional.avg_pool2d whose backward is DirectML's AVERAGE_POOLING_GRAD
    (padding p -> StartPadding = EndPadding = p, count_include_pad -> IncludePadding);
    divisor_override raises ValueError."""
    check_pool_options("avg_pool2d", divisor_override)
    return _pool("avg", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool3d(input: torch.Tensor, kernel_size: Size, stride: Optional[Size] = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> torch.Tensor:
    """torch.nn.functional.avg_pool3d whose backward is AVERAGE_POOLING_GRAD (as
    avg_pool2d)."""
    check_pool_options("avg_pool3d", divisor_override)
    return _pool("avg", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad)


def max_pool2d(input: torch.Tensor, kernel_size: Size, stride: Optional[Size] = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> torch.Tensor:
    """torch.nn.functional.max_pool2d whose backward is DirectML's MAX_POOLING_GRAD (the
    argmax recomputed from the input, ties to the first; a NaN window's gradient goes to its
    first NaN where PyTorch's goes to the last); return_indices=True raises ValueError."""
    check_pool_options("max_pool2d", return_indices=return_indices)
    return _pool("max", 2, input, kernel_size, stride, padding, ceil_mode, dilation=dilation)


def max_pool3d(input: torch.Tensor, kernel_size: Size, stride: Optional[Size] = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> torch.Tensor:
    """torch.nn.functional.max_pool3d whose backward is MAX_POOLING_GRAD (as max_pool2d)."""
    check_pool_options("max_pool3d", return_indices=return_indices)
    return _pool("max", 3, input, kernel_size, stride, padding, ceil_mode, dilation=dilation)
def local_response_norm(input: torch.Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> torch.Tensor:
    """torch.nn.functional.local_response_norm (input (N, C, ...), a window along C) whose
    backward is DirectML's LOCAL_RESPONSE_NORMALIZATION_GRAD with CrossChannel, LocalSize =
    size, Alpha = alpha, Beta = beta, Bias = k (both divide alpha by size). For an even size
    PyTorch's window is the mirror image of DirectML's ([c - size/2, c + size/2 - 1] against
    [c - size/2 + 1, c + size/2]), so the backward runs on the channels reversed, which makes
    them the same. Not chained: each call is a submission of its own."""
    if not needs_grad(input):
        return F.local_response_norm(input, size, alpha, beta, k)
    data_type_of(input, "local_response_norm")
    return _LocalResponseNorm.apply(input, size, alpha, beta, k)


class _LocalResponseNorm(torch.autograd.Function):
    """PyTorch's forward; the backward on the device, the input folded to 4-D {N, C, rest, 1}
    (the window runs along C only)."""

    @staticmethod
    def forward(ctx, input, size, alpha, beta, k):
        ctx.save_for_backward(input)
        ctx.parameters = (size, alpha, beta, k)
        return F.local_response_norm(input, size, alpha, beta, k)

    @staticmethod
    @single_backward
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        size, alpha, beta, k = ctx.parameters
        folded = (x.shape[0], x.shape[1], math.prod(x.shape[2:]), 1)
        # An even size: DirectML's window on the reversed channels is PyTorch's.
        channels = slice(None, None, -1) if size % 2 == 0 else slice(None)

        def host(t):
            return t.detach().to(x.dtype).cpu().reshape(folded).numpy()[:, channels]

        dx = local_response_normalization_grad(host(x), host(grad_output), True, size, alpha,
                                               beta, k, device=_runtime.get_device())
        grad_input = torch.empty_like(x)  # the input's layout, dtype and device
        # (a copy: with one channel, ascontiguousarray keeps the reversed view's negative
        # stride, which torch.from_numpy refuses)
        grad_input.copy_(torch.from_numpy(dx[:, channels].copy()).reshape(x.shape))
        return grad_input, None, None, None, None


def roi_align(input: torch.Tensor, boxes: _roi_align.Boxes,
              output_size: Union[int, Sequence[int]], spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> torch.Tensor:
    """torchvision.ops.roi_align (input {N, C, H, W}; boxes a Tensor[K, 5] with the batch index
    first, or a list of Tensor[L, 4] per image; bilinear averaging) whose backward is DirectML's
    ROI_ALIGN_GRAD (dX; the boxes get no gradient, as torchvision's). The forward is computed
    with PyTorch operations (torchvision is not needed), as ROI_ALIGN1 samples: the regions
    scaled by spatial_scale, InputPixelOffset 0.5 if aligned else 0, sampling_ratio > 0 samples
    per output a side, else as many as the region asks; not aligned, regions narrower than one
    pixel are widened to one, as torchvision does. Not chained: each call is a submission."""
    data_type_of(input, "roi_align")
    if input.dim() != 4:
        raise ValueError(f"pyvkgrad.torch.roi_align: input must be 4-D (N, C, H, W), got "
                         f"{input.dim()}-D")
    out_h, out_w = _roi_align.output_size_pair(output_size)
    rois, batch = _roi_align.regions(input, boxes, spatial_scale, aligned)
    params = _roi_align.grad_parameters(sampling_ratio, aligned)
    skip = _roi_align.unsampled(rois, sampling_ratio)
    if not needs_grad(input):
        return _roi_align.forward(input, rois, batch, out_h, out_w, params, skip)
    return _roi_align.RoiAlign.apply(input, rois, batch, out_h, out_w, params, skip)
