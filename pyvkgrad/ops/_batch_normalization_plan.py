"""The kernel plan BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD share, over the
axes of `_batch_normalization_axes.py` (K, the kept "channel" dimensions, and R, the reduced
ones), with the OutputGradient dispatches of `_batch_normalization_output.py`.

Plans (all kernels float32 inside; float16 tensors are read and written packed two per word):

* few elements per channel (N_R <= DIRECT_MAX_REDUCED, "no reduction" included):
  `batch_normalization_grad_direct`, one invocation per channel, everything in one pass, its
  sums in the channel's element order;
* otherwise the exact sums BATCH_NORMALIZATION_TRAINING uses (`_batch_normalization_sums.py`,
  docs/semantics.md §18), then an element-wise pass:
  1. `batch_normalization_training_sums` with GRAD: per channel the exact sums of dY,
     a = X - shift and dY a, each rounded once, and from them the scale and bias gradients
     and the training grad's coefficients (`coefficients` scratch); for
     BATCH_NORMALIZATION_GRAD in float32 with dX laid out as dY, it also stores dX as it reads
     dY (WRITE_DX), so dY is read once;
  2. OutputGradient, element-wise: `batch_normalization_training_grad_output[_packed]` from
     the coefficients (BATCH_NORMALIZATION_GRAD: CONSTANT_STATISTICS, dY times the channel's
     correctly rounded factor; none with WRITE_DX); the packed one starts from the end, where
     the sums read last: L2_ORDER.

Every sum's value is fixed by the problem (the chunk sums are added exactly), and every other
operation rounds once the same way on every device (`precise`, correctly rounded division and
square root): the results are the same bits on every device, subgroup size, workgroup width
and plan (docs/semantics.md §17).

The shared kernels are named after BATCH_NORMALIZATION_GRAD (`batch_normalization_grad_*`),
and every kernel's first lines name the operators it serves, so `grep -l
batch_normalization_training_grad shaders/*.comp` lists all of the training grad's kernels.
"""

from __future__ import annotations

from ..plan import Dispatch, Limits, Plan, grid_slices
from ._batch_normalization_axes import FIELDS, KERNEL_NAMES, Axes, bind
from ._batch_normalization_output import training_output
from ._batch_normalization_sums import sums_and_finish

DIRECT_MAX_REDUCED = 32  # elements per channel up to which one invocation does a channel
assert DIRECT_MAX_REDUCED < 1 << 16  # the direct kernel takes `reduced >> 16` as a zero
# The training grad's L2 order: the packed dX pass starts from the last vector (REVERSE), so
# that the X and dY that the sums read last are read again while still in L2. Same bits either
# way.
L2_ORDER = True


def plan(desc, limits: Limits, training: bool) -> Plan:
    """Either operator's dispatches and scratch buffers (`training`: the training grad's)."""
    axes = Axes(desc)
    if axes.reduced_count <= DIRECT_MAX_REDUCED:
        return _direct(desc, axes, limits, training)
    x, dy, dx = desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor
    is_f16 = x.data_type.element_size == 2
    eps = desc.epsilon
    tensors = tuple(name for name, _, _ in FIELDS)
    # BATCH_NORMALIZATION_GRAD's dX needs no reduction: the sums kernel stores it as it reads
    # dY where dX has dY's strides (float16 pairs would need atomics: there the element-wise
    # pass does).
    live = [d for d in range(x.rank) if x.sizes[d] > 1]
    write_dx = (not training and not is_f16
                and all(dx.element_strides[d] == dy.element_strides[d] for d in live))
    ksizes, (kx, kdy, km, kv, ks, kds, kdb) = axes.over(
        axes.kept, x, dy, desc.mean_tensor, desc.variance_tensor, desc.scale_tensor,
        desc.output_scale_gradient_tensor, desc.output_bias_gradient_tensor)
    bindings = bind("x", "dy", "mean", "variance", "scale", "dscale", "dbias")
    # The forward's bindings, which the grads never touch: Bias read, the statistics written
    # (to the coefficients scratch, never to a tensor of the caller's).
    bindings.update(dx="output_gradient_tensor" if write_dx else "partials",
                    bias="scale_tensor", output_mean="coefficients",
                    output_variance="coefficients")
    sums = sums_and_finish(desc.OPERATOR, axes, x, limits, 3, bindings,
                           dict(K_SIZES=ksizes, K_X_STRIDES=kx, K_DY_STRIDES=kdy,
                                K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv, K_SCALE_STRIDES=ks,
                                K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb, GRAD=True,
                                TRAINING=training, EPSILON=eps, WRITE_DX=write_dx),
                           coefficients=2, dy=dy)
    output = () if write_dx else training_output(desc, axes, limits, is_f16, reverse=L2_ORDER,
                                                 constant_statistics=not training)
    return Plan(sums.dispatches + output, sums.scratch, tensors=tensors)


def _direct(desc, axes, limits: Limits, training: bool) -> Plan:
    """Few elements per channel (N_R <= DIRECT_MAX_REDUCED, "no reduction" included):
    `batch_normalization_grad_direct`, one invocation per channel, in one pass."""
    is_f16 = desc.input_tensor.data_type.element_size == 2
    wg, channels, n = limits.local_size, axes.channels, axes.reduced_count
    t = {name: getattr(desc, name) for name, _, _ in FIELDS}
    ksizes, kstrides = axes.over(axes.kept, *t.values())
    # The channel's elements in logical (row-major) order: an order fixed by the problem.
    rsizes, (rx, rdy, rdx) = axes.over(axes.reduced_logical, t["input_tensor"],
                                       t["input_gradient_tensor"], t["output_gradient_tensor"])
    kx, kdy, km, kv, ks, kdx, kds, kdb = kstrides  # FIELDS order
    constants = dict(WG=wg, IS_F16=is_f16, TRAINING=training, EPSILON=desc.epsilon,
                     N_R=float(n), K_SIZES=ksizes, K_X_STRIDES=kx, K_DY_STRIDES=kdy,
                     K_DX_STRIDES=kdx, K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv,
                     K_SCALE_STRIDES=ks, K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb,
                     R_SIZES=rsizes, R_X_STRIDES=rx, R_DY_STRIDES=rdy, R_DX_STRIDES=rdx)
    # A channel runs the loop over its elements, the training grad's twice.
    slices = grid_slices(channels, wg, limits, 1 + (n + 1) * (2 if training else 1))
    return Plan(tuple(Dispatch("batch_normalization_grad_direct",
                               bind(*KERNEL_NAMES.values()), workgroups, constants=constants,
                               push=dict(channels=end, reduced=n, first=first))
                      for first, end, workgroups in slices), tensors=tuple(t))
