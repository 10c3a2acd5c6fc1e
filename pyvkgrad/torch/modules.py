"""Drop-in modules and model conversion.

`ReLU`, `Hardtanh`, `ReLU6`, `BatchNorm1d/2d/3d`, `Upsample`, `AvgPool2d/3d`, `MaxPool2d/3d`
and `LocalResponseNorm` subclass their torch.nn counterparts: the same constructor arguments,
parameters, buffers, state dict keys and repr; only the backward runs on the Vulkan device.
`Sequential` (an nn.Sequential) runs each run of consecutive bridged modules as one chain: one
autograd node whose backward is one submission, intermediate gradients kept on the device.
`convert(model)` swaps them into an existing model.
"""

from __future__ import annotations

from typing import Any, List, TypeVar, cast

import torch
from torch import nn

from . import functional as bf
from ._batch_norm import BatchNormStep
from ._chain import (DATA_TYPES, ClipStep, InterpolateStep, ReluStep,
                     apply_chain, data_type_of, needs_grad)
from ._pooling import PoolStep, check_pool_options
from ._resample_map import SUPPORTED_MODES


class ReLU(nn.ReLU):
    """torch.nn.ReLU with its backward on the Vulkan device (ACTIVATION_RELU_GRAD)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf.relu(input, inplace=self.inplace)

    def _bridge_step(self):
        return ReluStep(self.inplace), []


class Hardtanh(nn.Hardtanh):
    """torch.nn.Hardtanh with its backward on the Vulkan device (ELEMENT_WISE_CLIP_GRAD)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def _bridge_step(self):
        return ClipStep(self.min_val, self.max_val, self.inplace), []


class ReLU6(nn.ReLU6):
    """torch.nn.ReLU6 with its backward on the Vulkan device (ELEMENT_WISE_CLIP_GRAD, 0 and
    6)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf.relu6(input, self.inplace)

    def _bridge_step(self):
        return ClipStep(0.0, 6.0, self.inplace, "relu6"), []


class LocalResponseNorm(nn.LocalResponseNorm):
    """torch.nn.LocalResponseNorm with its backward on the Vulkan device
    (LOCAL_RESPONSE_NORMALIZATION_GRAD). Not chained: in `Sequential` it runs on its own, its
    backward a submission of its own."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf.local_response_norm(input, self.size, self.alpha, self.beta, self.k)


class _BatchNormBridge:
    """The forward of torch.nn.modules.batchnorm._BatchNorm, with bridged batch_norm."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        step, params = self._bridge_step()
        if not needs_grad(input, *params[:2]):
            return torch.nn.functional.batch_norm(input, params[2], params[3], params[0],
                                                  params[1], step.training, step.momentum,
                                                  step.eps)
        data_type_of(input, "batch_norm")
        return apply_chain([step], input, params)

    def _bridge_step(self):
        # As _BatchNorm.forward: count batches, cumulative average when momentum is None.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        training = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        params = [self.weight, self.bias, self.running_mean if track else None,
                  self.running_var if track else None]
        return BatchNormStep(training, factor, self.eps), params


class BatchNorm1d(_BatchNormBridge, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d with its backward on the Vulkan device."""


class BatchNorm2d(_BatchNormBridge, nn.BatchNorm2d):
    """torch.nn.BatchNorm2d with its backward on the Vulkan device."""


class BatchNorm3d(_BatchNormBridge, nn.BatchNorm3d):
    """torch.nn.BatchNorm3d with its backward on the Vulkan device."""


class Upsample(nn.Upsample):
    """torch.nn.Upsample with its backward on the Vulkan device (RESAMPLE_GRAD). Modes
    DirectML cannot express (bicubic, area, ...) raise ValueError at construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        bf.check_interpolate_mode(self.mode)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                              recompute_scale_factor=self.recompute_scale_factor)

    def _bridge_step(self):
        return InterpolateStep(self.size, self.scale_factor, self.mode, self.align_corners,
                               self.recompute_scale_factor), []


class _PoolBridge:
    """The forward of nn.AvgPool2d/3d or nn.MaxPool2d/3d (KIND "avg" or "max", K spatial axes)
    with the bridged pooling, its backward AVERAGE_POOLING_GRAD or MAX_POOLING_GRAD; what
    DirectML cannot express (divisor_override, return_indices=True) raises ValueError at
    construction, and at each call where it was set since."""

    KIND = "avg"
    K = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pool_parameters()

    def _pool_parameters(self) -> tuple:
        """PyTorch's fields in PoolStep's order: kernel_size, stride, padding, ceil_mode,
        count_include_pad (True, unused, for max pooling), dilation (1 for average pooling);
        fields DirectML cannot express raise."""
        what, avg = f"{self.KIND}_pool{self.K}d", self.KIND == "avg"
        if avg:
            check_pool_options(what, self.divisor_override)
        else:
            check_pool_options(what, return_indices=self.return_indices)
        return (self.kernel_size, self.stride, self.padding, self.ceil_mode,
                self.count_include_pad if avg else True, 1 if avg else self.dilation)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return bf._pool(self.KIND, self.K, input, *self._pool_parameters())

    def _bridge_step(self):
        return PoolStep(self.KIND, self.K, *self._pool_parameters()), []


class AvgPool2d(_PoolBridge, nn.AvgPool2d):
    """torch.nn.AvgPool2d with its backward on the Vulkan device."""


class AvgPool3d(_PoolBridge, nn.AvgPool3d):
    """torch.nn.AvgPool3d with its backward on the Vulkan device."""

    K = 3


class MaxPool2d(_PoolBridge, nn.MaxPool2d):
    """torch.nn.MaxPool2d with its backward on the Vulkan device."""

    KIND = "max"


class MaxPool3d(_PoolBridge, nn.MaxPool3d):
    """torch.nn.MaxPool3d with its backward on the Vulkan device."""

    KIND = "max"
    K = 3


BRIDGED = (ReLU, Hardtanh, ReLU6, BatchNorm1d, BatchNorm2d, BatchNorm3d, Upsample,
           AvgPool2d, AvgPool3d, MaxPool2d, MaxPool3d)


def _has_hooks(module: nn.Module) -> bool:
    from torch.nn.modules import module as m
    return bool(module._forward_hooks or module._forward_pre_hooks
                or getattr(module, "_backward_hooks", None)
                or getattr(module, "_backward_pre_hooks", None)
                or m._global_forward_hooks or m._global_forward_pre_hooks
                or m._global_backward_hooks or getattr(m, "_global_backward_pre_hooks", None))


def _chainable(module: nn.Module) -> bool:
    # An in-place Hardtanh / ReLU6 runs on its own: in a chain it would clamp the output an
    # earlier ReLU step keeps for its gradient.
    return (isinstance(module, BRIDGED) and not _has_hooks(module)
            and not (isinstance(module, (Hardtanh, ReLU6)) and module.inplace))


class Sequential(nn.Sequential):
    """torch.nn.Sequential whose runs of consecutive bridged modules (ReLU, Hardtanh, ReLU6,
    BatchNorm, Upsample, without hooks; Hardtanh and ReLU6 not in place) run as one chain: the
    backward of the whole run is one submission on the Vulkan device and its intermediate gradients
    never come back to the host. The same children, state dict and results as nn.Sequential."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            run = _run_at(modules, i, input)
            if len(run) < 2:
                input = modules[i](input)
                i += 1
                continue
            steps, params = [], []
            for module in run:
                if isinstance(module, _BatchNormBridge):
                    module._check_input_dim(input)  # every step keeps the rank
                step, p = module._bridge_step()
                steps.append(step)
                params.extend(p)
            input = apply_chain(steps, input, params)
            i += len(run)
        return input


def _run_at(modules, i, input) -> List[nn.Module]:
    """The run of chainable modules starting at i (a chain needs a float tensor that needs a
    gradient, and a first step that does not modify the chain's input in place)."""
    if not isinstance(input, torch.Tensor) or input.dtype not in DATA_TYPES:
        return []
    run = []
    for m in modules[i:]:
        if not _chainable(m) or (not run and isinstance(m, ReLU) and m.inplace):
            break
        run.append(m)
    if not needs_grad(input, *[p for m in run for p in m.parameters(recurse=False)]):
        return []
    return run


_UPSAMPLES = (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)
_BATCH_NORMS = {nn.BatchNorm1d: BatchNorm1d, nn.BatchNorm2d: BatchNorm2d,
                nn.BatchNorm3d: BatchNorm3d}
_AVG_POOLS = {nn.AvgPool2d: AvgPool2d, nn.AvgPool3d: AvgPool3d}
_MAX_POOLS = {nn.MaxPool2d: MaxPool2d, nn.MaxPool3d: MaxPool3d}


# A swapped module is an instance of a subclass of the original's class, so `convert` returns
# what it was given, as far as types go.
_Module = TypeVar("_Module", bound=nn.Module)


def convert(module: _Module, sequential: bool = True) -> _Module:
    """Swap torch.nn.ReLU, Hardtanh, ReLU6, BatchNorm1d/2d/3d, Upsample (and UpsamplingNearest2d
    / UpsamplingBilinear2d), AvgPool2d/3d, MaxPool2d/3d and LocalResponseNorm in `module`,
    recursively, for their pyvkgrad.torch counterparts; with `sequential`, also nn.Sequential
    containers for pyvkgrad.torch.Sequential (chained backward).
    Returns the converted module (a new one where `module` itself is swapped), in the spirit of
    torch.nn.SyncBatchNorm.convert_sync_batchnorm: the new modules take the old ones' parameters and
    buffers (the same tensors, so an optimizer built before still holds them), training flag and
    forward and backward hooks; state dicts load both ways. A module used at several places (a
    Sequential repeating an activation or a weight-tied layer) becomes one new module used at the
    same places. Only these exact classes are swapped, never subclasses (which may change
    behaviour); an Upsample in a mode DirectML cannot express (bicubic, area), an AvgPool with
    divisor_override and a MaxPool with return_indices are left as they are."""
    return cast(_Module, _convert(module, sequential, {}))


def _convert(module: nn.Module, sequential: bool, done: dict) -> nn.Module:
    """convert(), with `done`: id(original) -> (original, converted) of the modules seen so
    far (the original is kept so that its id stays its own while converting)."""
    if id(module) in done:
        return done[id(module)][1]
    out = module
    cls = type(module)
    if cls is nn.ReLU:
        out = ReLU(module.inplace)
    elif cls is nn.Hardtanh:
        out = Hardtanh(module.min_val, module.max_val, module.inplace)
    elif cls is nn.ReLU6:
        out = ReLU6(module.inplace)
    elif cls in _BATCH_NORMS:
        out = _BATCH_NORMS[cls](module.num_features, module.eps, module.momentum,
                                module.affine, module.track_running_stats)
        if module.affine:
            out.weight, out.bias = module.weight, module.bias
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            setattr(out, name, getattr(module, name))
    elif cls is nn.LocalResponseNorm:
        out = LocalResponseNorm(module.size, module.alpha, module.beta, module.k)
    elif cls in _UPSAMPLES and module.mode in SUPPORTED_MODES:
        out = Upsample(module.size, module.scale_factor, module.mode, module.align_corners,
                       module.recompute_scale_factor)
    elif cls in _AVG_POOLS and module.divisor_override is None:
        out = _AVG_POOLS[cls](module.kernel_size, module.stride, module.padding,
                              module.ceil_mode, module.count_include_pad)
    elif cls in _MAX_POOLS and not module.return_indices:
        out = _MAX_POOLS[cls](module.kernel_size, module.stride, module.padding,
                              module.dilation, module.return_indices, module.ceil_mode)
    elif sequential and cls is nn.Sequential:
        out = Sequential()
    if out is not module:
        out.train(module.training)
        _carry_hooks(module, out)
    done[id(module)] = (module, out)
    # Every slot, repeats included (named_children() yields each module once).
    for name, child in list(module._modules.items()):
        out.add_module(name, None if child is None else _convert(child, sequential, done))
    return out


# Module attributes holding forward and backward hooks (some only in newer torch versions).
_HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
               "_backward_pre_hooks", "_is_full_backward_hook")


def _carry_hooks(old: nn.Module, new: nn.Module) -> None:
    """Give `new` the forward and backward hooks of `old`: the same dictionaries, so that the
    handles their register_*_hook calls returned still remove them. State-dict hooks stay
    behind (they may hold the old module)."""
    for name in _HOOK_DICTS:
        if hasattr(old, name):
            setattr(new, name, getattr(old, name))
