"""The bridge's pooling steps: avg_pool2d/3d and max_pool2d/3d, forward in PyTorch, backward
DirectML's AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD (docs/torch.md).

PyTorch's parameters map one to one: kernel_size -> WindowSize, stride (default the kernel)
-> Strides, padding p (symmetric) -> StartPadding = EndPadding = p, dilation -> Dilations,
count_include_pad -> IncludePadding; ceil_mode needs nothing: PyTorch's output sizes follow
the floor or the ceil rule, which the descriptors accept as they come, except where the
window is larger than the padded input (`geometry`). PyTorch's divisor is
DirectML's count (positions inside the padded extent, or real ones), and both backward passes
add each output's term in ascending output order from +0, so float32 gradients are PyTorch's
bits. PyTorch's max pooling gives a NaN window's gradient to its last NaN, DirectML (and
pyvkgrad) to the first. divisor_override and return_indices=True have no DirectML equivalent
and raise. A pooling step works in the logical order (N, C, spatial): a channels_last input
runs its chain on a contiguous copy and gets its gradient back in channels_last strides.
"""

from __future__ import annotations

import operator
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from ..ops.average_pooling_grad import AveragePoolingGradDesc
from ..ops.max_pooling_grad import MaxPoolingGradDesc
from ._chain import Step

Size = Union[int, Sequence[int]]


def _tuple(value: Size, k: int, what: str, name: str) -> Tuple[int, ...]:
    """PyTorch's int-or-tuple argument as k ints (a single-element tuple repeats; an int may
    be any integer PyTorch takes: a NumPy integer, a 0-d integer tensor)."""
    try:
        values = (operator.index(value),) * k  # type: ignore[arg-type]
    except TypeError:
        values = tuple(int(v) for v in value)  # type: ignore[union-attr]
    if len(values) == 1:
        values *= k
    if len(values) != k:
        raise ValueError(f"pyvkgrad.torch.{what}: {name} must be an int or {k} ints, got "
                         f"{value!r}")
    return values


def check_pool_options(what: str, divisor_override: Optional[int] = None,
                       return_indices: bool = False) -> None:
    """Raise for what DirectML's pooling grads cannot express (no silent fallback)."""
    if divisor_override is not None:
        raise ValueError(f"pyvkgrad.torch.{what}: divisor_override={divisor_override!r} has no "
                         f"DirectML equivalent: AVERAGE_POOLING_GRAD divides by the window's "
                         f"count (IncludePadding); use torch.nn.functional.{what}")
    if return_indices:
        raise ValueError(f"pyvkgrad.torch.{what}: return_indices=True has no DirectML "
                         f"equivalent: MAX_POOLING_GRAD recomputes each window's maximum from "
                         f"the input; use torch.nn.functional.{what}")


class PoolStep(Step):
    """avg_poolNd or max_poolNd (`kind` "avg" or "max", k = N spatial axes) with PyTorch's
    parameters; its backward is AVERAGE_POOLING_GRAD or MAX_POOLING_GRAD."""

    def __init__(self, kind: str, k: int, kernel_size: Size, stride: Optional[Size],
                 padding: Size, ceil_mode: bool, count_include_pad: bool = True,
                 dilation: Size = 1):
        self.kind, self.k, self.what = kind, k, f"{kind}_pool{k}d"
        self.kernel = _tuple(kernel_size, k, self.what, "kernel_size")
        self.stride = self.kernel if stride is None or (isinstance(stride, (tuple, list)) and
                                                        len(stride) == 0) \
            else _tuple(stride, k, self.what, "stride")
        self.padding = _tuple(padding, k, self.what, "padding")
        self.dilation = _tuple(dilation, k, self.what, "dilation")
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def fits(self, perm, x_shape, y_shape) -> bool:
        # The descriptors take N and C first, and the bridge's tensors are packed.
        return tuple(perm) == tuple(range(len(perm)))

    def forward(self, x, params):
        if self.kind == "avg":
            pool = F.avg_pool2d if self.k == 2 else F.avg_pool3d
            return pool(x, self.kernel, self.stride, self.padding, self.ceil_mode,
                        self.count_include_pad), {}
        pool = F.max_pool2d if self.k == 2 else F.max_pool3d
        return pool(x, self.kernel, self.stride, self.padding, self.dilation,
                    self.ceil_mode), {"x": x}

    def geometry(self, x_sizes: Tuple[int, ...]) -> Tuple[Tuple[int, ...], ...]:
        """The descriptor's Strides, WindowSize, StartPadding and EndPadding. With ceil_mode
        PyTorch takes a window larger than the padded input (one output along that axis, the
        window cut at the input's end); DirectML asks the window to fit. The same window then:
        max pooling pads the end further (padding never wins), average pooling (no dilation)
        cuts the window to the padded extent, whose count (real positions, or padded ones)
        is PyTorch's divisor."""
        window, end = list(self.kernel), list(self.padding)
        for d in range(self.k):
            extent = x_sizes[2 + d] + 2 * self.padding[d]
            effective = (self.kernel[d] - 1) * self.dilation[d] + 1
            if effective > extent:
                if self.kind == "avg":
                    window[d] = extent
                else:
                    end[d] += effective - extent
        return self.stride, tuple(window), self.padding, tuple(end)

    def backward(self, b, k, dy, x_shape, y_shape, saved):
        # An unbatched input (C, spatial...) is one batch of it.
        x_sizes = (1,) * (self.k + 2 - len(x_shape)) + tuple(x_shape)
        y_sizes = (1,) * (self.k + 2 - len(y_shape)) + tuple(y_shape)
        geometry = self.geometry(x_sizes)
        if self.kind == "avg":
            desc = AveragePoolingGradDesc(b.desc(y_sizes), b.desc(x_sizes), *geometry,
                                          self.count_include_pad)
            b.op(desc, input_gradient_tensor=dy, output_gradient_tensor=f"dx{k}")
        else:
            b.tensor(f"x{k}", saved["x"])
            x = b.desc(x_sizes)
            desc = MaxPoolingGradDesc(x, b.desc(y_sizes), x, *geometry, self.dilation)
            b.op(desc, input_tensor=f"x{k}", input_gradient_tensor=dy,
                 output_gradient_tensor=f"dx{k}")
        return f"dx{k}"


def pool_input(input: torch.Tensor, k: int, what: str) -> None:
    """PyTorch's rank rule, before the bridge: (N, C, spatial) or unbatched (C, spatial)."""
    if input.dim() not in (k + 1, k + 2):
        raise ValueError(f"pyvkgrad.torch.{what}: expected {k + 1}-D or {k + 2}-D input, got "
                         f"{input.dim()}-D")
