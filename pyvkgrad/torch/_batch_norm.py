"""The bridge's batch_norm step (`_chain.Step`): training-mode forward on the device
(BATCH_NORMALIZATION_TRAINING, its statistics updating PyTorch's running ones), evaluation
mode's forward in PyTorch, and the backward BATCH_NORMALIZATION_TRAINING_GRAD or
BATCH_NORMALIZATION_GRAD in the chain's submission (docs/torch.md)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from ..ops.batch_normalization_grad import BatchNormalizationGradDesc
from ..ops.batch_normalization_training_grad import BatchNormalizationTrainingGradDesc
from . import _runtime
from ._chain import Step


def half_fits(what: str, values: np.ndarray, dtype: np.dtype) -> None:
    """Refuse a BatchNorm per-channel value that becomes infinite in `dtype` (float16 beyond
    65504): DirectML's float16 BatchNorm operators take every tensor in float16, and an
    infinite statistic turns the gradients into zeros or NaN without a word."""
    if np.dtype(dtype) != np.float16:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        overflows = np.isfinite(values) & ~np.isfinite(values.astype(np.float16))
    if overflows.any():
        raise ValueError(f"pyvkgrad.torch.batch_norm: {what} holds values beyond float16's "
                         f"range (65504), such as {values[overflows].flat[0]!r}: DirectML's "
                         f"float16 BatchNorm operators take it in float16; run this BatchNorm "
                         f"in float32")


def _training_forward(x: torch.Tensor, weight: Optional[torch.Tensor],
                      bias: Optional[torch.Tensor], eps: float):
    """(Output, Mean, Variance) of BATCH_NORMALIZATION_TRAINING on the Vulkan device, channels
    on axis 1; Mean and Variance of shape [C]. Weight and bias take x's dtype (PyTorch keeps
    float32 ones for a float16 x: one float16 rounding of each apart)."""
    from ..ops.batch_normalization_training import batch_normalization_training

    channels = int(x.shape[1])
    stat = [1] * x.dim()
    stat[1] = channels
    xn = x.detach().cpu().numpy()

    def host(p, fill, what):
        if p is None:
            return np.full(stat, fill, xn.dtype)
        values = p.detach().cpu().numpy()
        half_fits(what, values, xn.dtype)
        return values.astype(xn.dtype).reshape(stat)

    y, mean, var = batch_normalization_training(xn, host(weight, 1.0, "weight"),
                                                host(bias, 0.0, "bias"), eps,
                                                device=_runtime.get_device())
    # A float16 batch whose variance exceeds 65504 (a standard deviation above 256): an
    # infinite Variance beside a finite Mean (a non-finite X makes the Mean non-finite).
    if xn.dtype == np.float16 and (np.isinf(var) & np.isfinite(mean)).any():
        raise ValueError("pyvkgrad.torch.batch_norm: the batch's variance exceeds float16's "
                         "range (65504: a standard deviation above 256), which "
                         "BATCH_NORMALIZATION_TRAINING's float16 Variance cannot hold; run "
                         "this BatchNorm in float32")
    out = torch.from_numpy(y).to(x.device)
    # Output in x's memory format, as PyTorch's batch_norm gives it (a channels-last x
    # makes a channels-last Output, so a following convolution keeps its layout).
    for dims, fmt in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if x.dim() == dims and not x.is_contiguous() and x.is_contiguous(memory_format=fmt):
            out = out.contiguous(memory_format=fmt)
    return (out, torch.from_numpy(mean.reshape(-1)).to(x.device),
            torch.from_numpy(var.reshape(-1)).to(x.device))


class BatchNormStep(Step):
    """batch_norm: training (batch statistics: forward BATCH_NORMALIZATION_TRAINING, backward
    BATCH_NORMALIZATION_TRAINING_GRAD, both on the device) or evaluation (running statistics:
    PyTorch's forward, backward BATCH_NORMALIZATION_GRAD). Params: weight, bias,
    running_mean, running_var."""

    n_params = 4
    what = "batch_norm"

    def __init__(self, training: bool, momentum: float, eps: float):
        self.training, self.momentum, self.eps = bool(training), momentum, float(eps)

    def forward(self, x, params):
        weight, bias, running_mean, running_var = params
        if x.dim() < 2:
            raise ValueError(f"pyvkgrad.torch.batch_norm: expected 2-D to 5-D input, got "
                             f"{x.dim()}-D")
        # As ATen's batch_norm: every per-channel tensor holds one value per channel (the
        # device's kernels, and torch.native_batch_norm, index them by channel unchecked).
        channels = int(x.shape[1])
        for name, p in zip(("weight", "bias", "running_mean", "running_var"), params):
            if p is not None and p.numel() != channels:
                raise RuntimeError(f"{name} should contain {channels} elements not "
                                   f"{p.numel()}")
        # As F.batch_norm: weight, bias and the running statistics share one dtype, the
        # input's, or float32 beside a float16 input (mixed precision); training took any.
        kinds = {p.dtype for p in params if p is not None}
        if kinds and (len(kinds) > 1 or not (kinds == {x.dtype} or (
                x.dtype == torch.float16 and kinds == {torch.float32}))):
            raise RuntimeError(f"pyvkgrad.torch.batch_norm: weight, bias, running_mean and "
                               f"running_var must share one dtype, the input's ({x.dtype}) or "
                               f"float32 beside float16 input; got "
                               f"{sorted(str(k) for k in kinds)}")
        if self.momentum is None:
            # F.batch_norm's own refusal (the modules pass a float: 1 / batches tracked).
            raise TypeError("batch_norm(): argument 'momentum' must be float, not NoneType")
        if self.training and math.prod(x.shape[:1] + x.shape[2:]) == 1:
            # As F.batch_norm (_verify_batch_size): one value per channel has no variance.
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {x.size()}")
        # F.batch_norm's own refusals, with its messages (else a running_mean alone was
        # updated in training, and eval mode's torch.native_batch_norm read None: a crash).
        if (running_mean is None) != (running_var is None):
            raise ValueError("running_mean and running_var must either both be None or "
                             "neither be None")
        if not self.training and running_mean is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        if self.training and not self.eps > 0:
            raise ValueError(f"batch_norm eps must be positive during training, but got "
                             f"{self.eps}")
        momentum = self.momentum  # (a float: None is refused above)
        if self.training:
            # The forward on the device too: BATCH_NORMALIZATION_TRAINING's Output, Mean and
            # (biased) Variance, the same bits on every device; PyTorch's running statistics
            # take the unbiased variance, as F.batch_norm updates them.
            y, mean, var = _training_forward(x, weight, bias, self.eps)
            n = x.numel() // x.shape[1]
            with torch.no_grad():
                if running_mean is not None:
                    running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean))
                if running_var is not None:
                    running_var.mul_(1 - momentum).add_(
                        momentum * var.to(running_var) * (n / max(n - 1, 1)))
            return y, {"x": x, "mean": mean, "var": var, "weight": weight}
        y = torch.native_batch_norm(x, weight, bias, running_mean, running_var, False, momentum,
                                    self.eps)[0]
        return y, {"x": x, "mean": running_mean, "var": running_var, "weight": weight}

    def backward(self, b, k, dy, x_shape, y_shape, saved):
        perm = b.perm
        channels = int(x_shape[1])
        stat = [1] * len(perm)
        stat[perm.index(1)] = channels
        x = b.tensor(f"x{k}", saved["x"])
        weight = saved["weight"]
        scale = (np.ones(channels) if weight is None
                 else weight.detach().float().cpu().numpy())
        mean, var = (saved[k_].detach().float().cpu().numpy() for k_ in ("mean", "var"))
        for what, values in (("running_mean", mean), ("running_var", var), ("weight", scale)):
            half_fits(what, values, b.data_type.numpy_dtype)
        s = b.array(f"mean{k}", mean.reshape(stat))
        b.array(f"var{k}", var.reshape(stat))
        b.array(f"scale{k}", scale.reshape(stat))
        cls = (BatchNormalizationTrainingGradDesc if self.training
               else BatchNormalizationGradDesc)
        b.op(cls(x, x, s, s, s, x, s, s, self.eps), input_tensor=f"x{k}",
             input_gradient_tensor=dy, mean_tensor=f"mean{k}", variance_tensor=f"var{k}",
             scale_tensor=f"scale{k}", output_gradient_tensor=f"dx{k}",
             output_scale_gradient_tensor=f"dscale{k}", output_bias_gradient_tensor=f"dbias{k}")
        return f"dx{k}"

    def param_grads(self, k, params):
        return [f"dscale{k}", f"dbias{k}", None, None]
