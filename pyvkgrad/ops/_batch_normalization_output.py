"""BatchNorm grads' OutputGradient dispatches, element-wise over dX from the per-channel
coefficients the sums kernel wrote (`batch_normalization_training_grad_output[_packed]`,
with CONSTANT_STATISTICS for BATCH_NORMALIZATION_GRAD); the packed kernel where every tensor
it walks is packed, else the strided one. The plan (`_batch_normalization_plan.py`) places
them after the reduction.
"""

from __future__ import annotations

from ..plan import Dispatch, grid_slices, right_align
from ._batch_normalization_axes import bind, elementwise_dims, packed_dims


def training_output(desc, axes, limits, is_f16, reverse, constant_statistics=False):
    """The training grad's dX from X, dY and the `coefficients` the sums kernel wrote (with
    `constant_statistics`, BATCH_NORMALIZATION_GRAD's dY times its factor there); `reverse`:
    the packed kernel starts from the last vector (REVERSE, the plan's L2_ORDER)."""
    x, dy, dx = desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor
    wg, count = limits.local_size, x.element_count
    bindings = bind("x", "dy", "coefficients", "dx")
    if x.is_packed and dy.is_packed and dx.is_packed:
        sizes, (ts,), same, run = packed_dims(axes, axes.channel_strides)
        width = 8 if is_f16 else 4
        return _packed_output("batch_normalization_training_grad_output_packed", bindings,
                              dict(WG=wg, IS_F16=is_f16, SAME=same(width), RUN=run(width),
                                   SIZES=sizes, CHANNEL_STRIDES=ts, REVERSE=reverse,
                                   CONSTANT_STATISTICS=constant_statistics),
                              count, width, limits)
    sizes, strides = elementwise_dims(axes, desc, x, dy, dx, extra=(axes.channel_strides,))
    sx, sdy, sdx, sc = (right_align(s, 8, 0) for s in strides)
    return _strided_output("batch_normalization_training_grad_output", bindings,
                           dict(WG=wg, IS_F16=is_f16, SIZES=right_align(sizes, 8, 1),
                                X_STRIDES=sx, DY_STRIDES=sdy, DX_STRIDES=sdx,
                                CHANNEL_STRIDES=sc, CONSTANT_STATISTICS=constant_statistics),
                           count, limits)


def _packed_output(kernel, bindings, constants, count, width, limits):
    """The dispatches of a packed OutputGradient kernel over the vectors of `count` elements
    (`width` a vector): a vector may run a loop over its 4 words, the tail vector one over
    its up to 8 elements (STORE_VECTOR)."""
    return tuple(Dispatch(kernel, bindings, workgroups, constants=constants,
                          push=dict(vectors=end, count=count, first=first))
                 for first, end, workgroups in grid_slices(-(-count // width),
                                                           constants["WG"], limits,
                                                           1 + (4 + 1) + (8 + 1)))


def _strided_output(kernel, bindings, constants, count, limits):
    """The dispatches of a strided OutputGradient kernel over `count` elements."""
    return tuple(Dispatch(kernel, bindings, workgroups, constants=constants,
                          push=dict(count=end, first=first))
                 for first, end, workgroups in grid_slices(count, constants["WG"], limits))
