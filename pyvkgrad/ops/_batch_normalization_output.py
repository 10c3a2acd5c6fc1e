"""BatchNorm grad's OutputGradient dispatches, element-wise over dX: with constant statistics
(`batch_normalization_grad_output[_packed]`, BATCH_NORMALIZATION_GRAD) or from the training
grad's per-channel coefficients (`batch_normalization_training_grad_output[_packed]`); the
packed kernels where every tensor they walk is packed, else the strided ones. The plan
(`_batch_normalization_plan.py`) places them among the reduction's dispatches.
"""

from __future__ import annotations

from ..plan import Dispatch, grid_slices, right_align
from ._batch_normalization_axes import bind, elementwise_dims, packed_dims, stat_strides


def grad_output(desc, axes, limits, is_f16, eps):
    """BATCH_NORMALIZATION_GRAD's dX = dY * Scale / sqrt(Variance + Epsilon)."""
    dy, dx = desc.input_gradient_tensor, desc.output_gradient_tensor
    ss = stat_strides(axes, desc.scale_tensor)
    vs = stat_strides(axes, desc.variance_tensor)
    wg, count = limits.local_size, dy.element_count
    bindings = bind("dy", "scale", "variance", "dx")
    if dy.is_packed and dx.is_packed:
        sizes, (s1, s2), same = packed_dims(axes, ss, vs)
        width = 8 if is_f16 else 4
        return _packed_output("batch_normalization_grad_output_packed", bindings,
                              dict(WG=wg, IS_F16=is_f16, SAME=same(width), EPSILON=eps,
                                   SIZES=sizes, SCALE_STRIDES=s1, VARIANCE_STRIDES=s2),
                              count, width, limits)
    sizes, strides = elementwise_dims(axes, desc, dy, dx, extra=(ss, vs))
    sdy, sdx, s1, s2 = (right_align(s, 8, 0) for s in strides)
    return _strided_output("batch_normalization_grad_output", bindings,
                           dict(WG=wg, IS_F16=is_f16, EPSILON=eps,
                                SIZES=right_align(sizes, 8, 1), DY_STRIDES=sdy,
                                DX_STRIDES=sdx, SCALE_STRIDES=s1, VARIANCE_STRIDES=s2),
                           count, limits)


def training_output(desc, axes, limits, is_f16, reverse):
    """The training grad's dX from X, dY and the `coefficients` stage 2 wrote; `reverse`: the
    packed kernel starts from the last vector (REVERSE, the plan's L2_ORDER)."""
    x, dy, dx = desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor
    wg, count = limits.local_size, x.element_count
    bindings = bind("x", "dy", "coefficients", "dx")
    if x.is_packed and dy.is_packed and dx.is_packed:
        sizes, (ts,), same = packed_dims(axes, axes.channel_strides)
        width = 8 if is_f16 else 4
        return _packed_output("batch_normalization_training_grad_output_packed", bindings,
                              dict(WG=wg, IS_F16=is_f16, SAME=same(width), SIZES=sizes,
                                   CHANNEL_STRIDES=ts, REVERSE=reverse),
                              count, width, limits)
    sizes, strides = elementwise_dims(axes, desc, x, dy, dx, extra=(axes.channel_strides,))
    sx, sdy, sdx, sc = (right_align(s, 8, 0) for s in strides)
    return _strided_output("batch_normalization_training_grad_output", bindings,
                           dict(WG=wg, IS_F16=is_f16, SIZES=right_align(sizes, 8, 1),
                                X_STRIDES=sx, DY_STRIDES=sdy, DX_STRIDES=sdx,
                                CHANNEL_STRIDES=sc),
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
