"""BatchNorm grad's eight tensor fields (DirectML's order, their names in the kernels) and
reduction axes (docs/semantics.md §4, §6.7): which dimensions a channel keeps
and which it reduces over, in memory order, and the sizes and strides the kernels walk.

R = {d : MeanTensor.Sizes[d] == 1} (reduced) and K = the other dimensions (kept, the
"channels"). Dimensions of size 1 everywhere play no part. Channel k is the row-major index
over K; element (k, r) has reduced index r, row-major over R. Both sets are ordered by
InputTensor stride, outermost first, so the innermost dimension in memory is last (coalesced
reads whatever the layout: NCHW, NHWC by strides, scattered axes).
"""

from __future__ import annotations

import math

from ..plan import READ, WRITE, right_align
from ..tensor import coalesce


# (descriptor field, DirectML field, access), in DirectML's order.
FIELDS = (("input_tensor", "InputTensor", READ),
          ("input_gradient_tensor", "InputGradientTensor", READ),
          ("mean_tensor", "MeanTensor", READ),
          ("variance_tensor", "VarianceTensor", READ),
          ("scale_tensor", "ScaleTensor", READ),
          ("output_gradient_tensor", "OutputGradientTensor", WRITE),
          ("output_scale_gradient_tensor", "OutputScaleGradientTensor", WRITE),
          ("output_bias_gradient_tensor", "OutputBiasGradientTensor", WRITE))
# Each tensor's name in the kernels (shaders/include/common.glsl), and back.
KERNEL_NAMES = dict(input_tensor="x", input_gradient_tensor="dy", mean_tensor="mean",
                    variance_tensor="variance", scale_tensor="scale", output_gradient_tensor="dx",
                    output_scale_gradient_tensor="dscale", output_bias_gradient_tensor="dbias")
FIELD_OF = {kernel: field for field, kernel in KERNEL_NAMES.items()}

def bind(*names):
    """Bindings of a kernel: each kernel name to its tensor field, or to the scratch buffer of
    that name."""
    return {name: FIELD_OF.get(name, name) for name in names}



class Axes:
    """The kept (K) and reduced (R) dimensions of a descriptor, innermost in memory last."""

    def __init__(self, desc):
        x = desc.input_tensor
        xs, dys = x.element_strides, desc.input_gradient_tensor.element_strides
        means = desc.mean_tensor.sizes
        live = [d for d in range(x.rank) if x.sizes[d] > 1]
        order = sorted(live, key=lambda d: (_memory_key(xs[d], dys[d])), reverse=True)
        self.sizes = x.sizes
        self.kept = tuple(d for d in order if means[d] > 1)
        self.reduced = tuple(d for d in order if means[d] == 1)
        # The same in logical (row-major) order: the exact sums' canonical order.
        self.reduced_logical = tuple(d for d in live if means[d] == 1)
        self.channels = math.prod(x.sizes[d] for d in self.kept)
        self.reduced_count = math.prod(x.sizes[d] for d in self.reduced)
        # Table strides: channel k's stride along each dimension (0 where reduced).
        self.channel_strides = [0] * x.rank
        step = 1
        for d in reversed(self.kept):
            self.channel_strides[d] = step
            step *= x.sizes[d]
        # Does a kept dimension lie innermost in memory (NHWC-like)?
        inner = order[-1] if order else None
        self.kept_innermost = inner is not None and inner in self.kept

    def over(self, dims, *tensors):
        """Coalesced (sizes, strides per tensor) over `dims` (K or R), right-aligned to 8."""
        sizes, strides = coalesce([self.sizes[d] for d in dims],
                                  *[[t.element_strides[d] for d in dims] for t in tensors])
        return right_align(sizes, 8, 1), [right_align(s, 8, 0) for s in strides]


def _memory_key(*strides):
    """Smallest nonzero stride of a dimension (a broadcast dimension walks no memory)."""
    nonzero = [s for s in strides if s > 0]
    return min(nonzero) if nonzero else 0


def pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def outer_strides(ksizes, kstrides, rsizes, rstrides):
    """Every dimension but the innermost reduced one (the run), of size > 1: its strides in
    each tensor, as a tuple."""
    return [tuple(s[d] for s in strides)
            for sizes, strides, last in ((ksizes, kstrides, 8), (rsizes, rstrides, 7))
            for d, n in enumerate(sizes[:last]) if n > 1]


def elementwise_dims(axes, desc, *tensors, extra=()):
    """Sizes and strides over every dimension for an element-wise kernel, ordered so that the
    output's innermost dimension is last, then coalesced (`extra`: more stride lists)."""
    dx = desc.output_gradient_tensor.element_strides
    live = [d for d in range(len(axes.sizes)) if axes.sizes[d] > 1]
    order = sorted(live, key=lambda d: dx[d], reverse=True)
    lists = [[t.element_strides[d] for d in order] for t in tensors]
    lists += [[e[d] for d in order] for e in extra]
    return coalesce([axes.sizes[d] for d in order], *lists)


def packed_dims(axes, *stride_lists):
    """Row-major sizes with per-dimension strides (statistics or channel index) coalesced,
    for the packed kernels; `same`: every aligned vector of width 4 (float32) or 8 (float16)
    lies in one channel; `run`: the vector kernels' RUN (channel_run) at a width, over the
    first stride list, which must then be the channel index's."""
    sizes, strides = coalesce(list(axes.sizes), *stride_lists)
    inner_reduced = all(s[-1] == 0 for s in strides)

    def same(width):
        return inner_reduced and (sizes[-1] % width == 0 or len(sizes) == 1)

    def run(width):
        return channel_run(sizes, strides[0], width)
    return right_align(sizes, 8, 1), [right_align(s, 8, 0) for s in strides], same, run


# The vector kernels' RUN (channel_run); False: each element's channel found alone, as before
# 2026-12-04 (benchmarks/investigations/bn_sums_ablation.py's A/B).
VECTOR_RUNS = True


def channel_run(sizes, channel_strides, width):
    """The vector kernels' RUN: how many consecutive elements of the row-major order over
    `sizes` share a channel, run after run (the trailing dimensions' size product, where the
    channel index has stride 0), where that is at least a vector's `width` elements, so a
    vector's elements lie in at most two channels; else 0."""
    run = 1
    for n, c in zip(reversed(sizes), reversed(channel_strides)):
        if c:
            break
        run *= n
    return run if VECTOR_RUNS and run >= width else 0
