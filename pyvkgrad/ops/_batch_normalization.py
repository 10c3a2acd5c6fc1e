"""What BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD share: validation of the
eight tensors, the reduction-axis analysis, the kernel plan and the one-call driver.

Reduction axes (docs/semantics.md §4, §6.7): R = {d : MeanTensor.Sizes[d] == 1} (reduced) and
K = the other dimensions (kept, the "channels"). Dimensions of size 1 everywhere play no part.
Channel k is the row-major index over K; element (k, r) has reduced index r, row-major over R.
Both sets are ordered by InputTensor stride, outermost first, so the innermost dimension in
memory is last (coalesced reads whatever the layout: NCHW, NHWC by strides, scattered axes).

Plans (all kernels float32 inside; float16 tensors are read and written packed two per word):

* few elements per channel (N_R <= DIRECT_MAX_REDUCED, "no reduction" included):
  `batch_normalization_grad_direct`, one invocation per channel, everything in one pass;
* otherwise a reduction in two stages plus an element-wise pass:
  1. `batch_normalization_grad_partials`: per (channel, chunk of ITERS * lanes elements) the
     sums (dY, X - Mean, dY * (X - Mean)) into the `partials` scratch buffer, spread over as
     many workgroups as there are chunks, so a few large channels still fill a large GPU; a
     lane keeps LOAD_BYTES_AHEAD bytes of loads in flight (AHEAD). Where the innermost reduced
     run is contiguous it reads vectors of up to 16 bytes: aligned ones, or (SPAN) a few
     adjacent channels' runs, end to end in memory, as one row of whole aligned vectors, or
     (MASKED) the aligned vectors that hold an unaligned run, other runs' elements masked out;
  2. `batch_normalization_grad_finalize`: per channel the fixed-order sum of its partials, the
     scale and bias gradients, and the training grad's coefficients (`coefficients` scratch);
     where there are ONE_PASS_MIN_GROUPS channel groups or more (enough to fill the device
     without splitting channels), stage 1 takes each group whole and finishes it itself
     (FINISH), and there is no stage 2;
  3. OutputGradient, element-wise: `batch_normalization_grad_output[_packed]` (constant
     statistics; it needs no reduction, so it sits between stages 1 and 2 with no barrier
     before it; none where stage 1 stores dX as it reads dY: WRITE_DX) or
     `batch_normalization_training_grad_output[_packed]` (after stage 2; the packed one starts
     from the end, where stage 1 read last: L2_ORDER).

The shared kernels are named after BATCH_NORMALIZATION_GRAD (`batch_normalization_grad_*`),
and every kernel's first lines name the operators it serves, so `grep -l
batch_normalization_training_grad shaders/*.comp` lists all of the training grad's kernels.

Every sum runs in a fixed order (per invocation at most 16 elements, or 4 pairwise-added
vectors of up to 16 bytes where the reduced run is contiguous, or up to ONE_PASS_MAX_ITERS of
either in the one-pass plan; then subgroupAdd, shared memory, and the partials in order):
results are bitwise identical run to run, and the error stays near float32 rounding for large
reductions (a tree, not one long running sum).
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..plan import (LOOP_MARGIN, READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, Scratch, grid,
                    grid_slices, right_align)
from ..tensor import (TensorDesc, check_desc, check_float, check_output, check_rank, check_same,
                      coalesce, fail)
from . import _one_call

BatchNormalizationGradResult = namedtuple(
    "BatchNormalizationGradResult", "output_gradient output_scale_gradient output_bias_gradient")

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
INPUT_SHAPED = ("InputGradientTensor", "OutputGradientTensor")
STATISTICS_SHAPED = ("VarianceTensor", "ScaleTensor", "OutputScaleGradientTensor",
                     "OutputBiasGradientTensor")

DIRECT_MAX_REDUCED = 32  # elements per channel up to which one invocation does a channel
ITERS_MAX = 16  # elements one invocation adds in sequence per chunk
ITERS_MAX_VECTORS = 4  # the same in vectors (up to 16 float32 or 32 float16 elements)
K_FAST_MAX = 64  # channels side by side in a workgroup when a kept dimension is innermost
# Channel groups (workgroup-sized work items) from which stage 1 takes every group whole and
# finishes it (FINISH): about two per SM of the H100 (132), where the finalize dispatch's fixed
# 5-6 us was 7-16% of BATCH_NORMALIZATION_GRAD's time (benchmarks/RESULTS.md), so long as a lane
# adds at most ONE_PASS_MAX_ITERS terms (or vectors) in sequence (the sums' accuracy).
ONE_PASS_MIN_GROUPS = 256
ONE_PASS_MAX_ITERS = 64
# Its workgroups are widened (up to ONE_PASS_MAX_WG and the device's max_local_size) until
# they hold ONE_PASS_INVOCATIONS in all, about 1000 per H100 SM: [256,256,14,14] ran at 94.9% of
# copy 512 wide against 84.5% 256 wide and 90.9% 1024 wide; [256,512,7,7] best at 256
# (benchmarks/bn_grad_parts.py --one-pass, benchmarks/RESULTS.md).
ONE_PASS_INVOCATIONS = 2**17
ONE_PASS_MAX_WG = 512
# The training grad's L2 order: stage 1 walks the chunks of all channels at once (CHUNK_MAJOR;
# the one-pass plan does so anyway) and the packed dX pass starts from the last vector
# (REVERSE), so that the X and dY that stage 1 read last are read again while still in L2.
# Same bits either way; on the H100, with L2 flushed before each call, 1.7-5% faster (97.3 ->
# 94.2 us float32, 61.2 -> 58.1 float16 at [256,256,14,14]; 185.5 -> 182.3 us at
# [32,64,112,112]), except where X and dY fit in L2 anyway (float16 [256,512,7,7]: 0.3 us
# slower; benchmarks/RESULTS.md).
L2_ORDER = True
# Bytes of X (and as many of dY) a stage-1 lane has in flight: it loads AHEAD = this / bytes per
# load vectors before adding the first. The one-pass plan has one workgroup per channel group
# (too few invocations to hide latency with 8-byte or smaller loads), and two-stage plans
# with single elements gain too: on the H100, float16
# [256,256,14,14] (8-byte loads, AHEAD 2) 85.5 -> 91.9% of copy, float32 [256,512,7,7] (single
# elements, AHEAD 4, before MASKED vectors took such rows) 73.5 -> 92.1%; 16-byte loads gain
# nothing from more, masked ones included (benchmarks/RESULTS.md).
LOAD_BYTES_AHEAD = 16
# MASKED: where the innermost reduced run is contiguous but its vectors are not aligned (its
# length, or another stride, not a multiple of any vector width: 7x7 rows, padded rows), stage 1
# reads it as the aligned vectors that hold it, masking the elements of neighbouring runs and
# padding, so long as those vectors hold at most this many times the run's elements. 1.25 lets
# every measured shape take 16-byte vectors (7x7 float16: 56 slots for 49) and leaves runs of 3
# on single elements (not measured). On the H100, against single elements: float16
# [256,512,7,7] 30.2 -> 26.1 us, [128,256,13,13] 32.3 -> 16.4 us; narrower vectors than the
# widest allowed won some float16 BATCH_NORMALIZATION_GRAD rows and lost most training grad rows
# (benchmarks/RESULTS.md).
MASKED_MAX_SLOTS = 1.25
# SPAN: where the channels' runs lie end to end (NCHW with 7x7 rows), stage 1 reads SPAN adjacent
# channels as one row of whole aligned vectors instead (no masks, no atomics, no vector read
# twice), with vectors of these widths in order of preference (elements; float32 takes 4 only),
# so long as the one-pass plan remains; 2 float16 elements only where stage 1 stores dX, whose
# MASKED edge words need atomics. On the H100, against MASKED: float16 BATCH_NORMALIZATION_GRAD
# [256,512,7,7] 25.9 -> 18.7 us (2 elements), [128,2048,7,7] 54.3 -> 36.6 us (4; 45.6 with 8),
# float32 73.6 -> 61.4 us, the training grad 97.7 -> 91.6 and 55.6 -> 51.1 us; narrower vectors
# than MASKED's without dX to store were slower (training [256,512,7,7] float16 27.4 -> 29.4 us
# with 2 elements), and so was SPAN in two stages where MASKED has one pass
# (benchmarks/RESULTS.md).
SPAN_WIDTHS = (4, 8)


# ---- validation ---------------------------------------------------------------------------------

def validate(desc) -> float:
    """docs/semantics.md §8 for the eight tensors, and Epsilon; returns Epsilon as a float.

    Epsilon must be finite and >= 0 (also in float32). 0 is allowed, as in DirectML: then a
    zero variance gives infinite or NaN results, as in float64 arithmetic.
    """
    op = desc.OPERATOR
    descs = {dml: check_desc(op, dml, getattr(desc, name)) for name, dml, _ in FIELDS}
    x = descs["InputTensor"]
    check_rank(op, "InputTensor", x, 1, 8)
    others = [(dml, d) for dml, d in descs.items() if dml != "InputTensor"]
    check_same(op, "data_type", ("InputTensor", x), *others)
    for dml, d in others:
        if d.rank != x.rank:
            fail(op, f"{dml}.DimensionCount", "must equal InputTensor.DimensionCount", x.rank,
                 d.rank)
    check_same(op, "sizes", ("InputTensor", x), *[(n, descs[n]) for n in INPUT_SHAPED])
    mean = descs["MeanTensor"]
    for d, (m, s) in enumerate(zip(mean.sizes, x.sizes)):
        if m not in (1, s):
            fail(op, f"MeanTensor.Sizes[{d}]", f"must be 1 or InputTensor.Sizes[{d}]",
                 f"1 or {s}", m)
    check_same(op, "sizes", ("MeanTensor", mean), *[(n, descs[n]) for n in STATISTICS_SHAPED])
    for name, dml, access in FIELDS:
        if access == WRITE:
            check_output(op, dml, descs[dml])
    return check_epsilon(op, desc.epsilon)


def check_epsilon(op: str, epsilon) -> float:
    return check_float(op, "Epsilon", epsilon, non_negative=True)


def tensor_fields(desc):
    return tuple((name, (getattr(desc, name), access)) for name, _, access in FIELDS)


# ---- reduction axes -----------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchNormalizationGradFields(OperatorDesc):
    """The eight tensor fields (DirectML's order) and Epsilon both BatchNorm grad descriptors
    share, with their validation and plan; each operator file subclasses it with its
    `OPERATOR` and `TRAINING`."""

    input_tensor: object
    input_gradient_tensor: object
    mean_tensor: object
    variance_tensor: object
    scale_tensor: object
    output_gradient_tensor: object
    output_scale_gradient_tensor: object
    output_bias_gradient_tensor: object
    epsilon: float
    OPERATOR: ClassVar[str] = ""
    TRAINING: ClassVar[bool] = False
    # dX may be X's or dY's tensor (identical descriptors): every kernel reads an element's
    # X and dY before it writes that element's dX, and reductions finish before dX is written.
    IN_PLACE: ClassVar[dict] = {"output_gradient_tensor": ("input_tensor",
                                                           "input_gradient_tensor")}
    # Along which axes the one-call function may cut a problem too large for one buffer.
    INDEPENDENT_AXES: ClassVar[str] = ("only the channel axes (where the statistics' sizes are "
                                       "not 1), never those they reduce over")

    def __post_init__(self):
        object.__setattr__(self, "epsilon", validate(self))

    def tensor_fields(self):
        return tensor_fields(self)

    def independent_axes(self):
        """Axes along which outputs depend only on the same slice of the inputs: the kept
        (channel) axes, where the statistics' sizes are not 1."""
        return tuple(a for a, n in enumerate(self.mean_tensor.sizes) if n != 1)

    def plan(self, limits: Limits) -> Plan:
        return plan(self, limits, training=self.TRAINING)


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


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


# ---- the plan -----------------------------------------------------------------------------------

def _bind(*names):
    """Bindings of a kernel: each kernel name to its tensor field, or to the scratch buffer of
    that name."""
    return {name: FIELD_OF.get(name, name) for name in names}


def plan(desc, limits: Limits, training: bool) -> Plan:
    x = desc.input_tensor
    axes = Axes(desc)
    is_f16 = x.data_type.element_size == 2
    eps = desc.epsilon
    wg = limits.local_size
    channels, n = axes.channels, axes.reduced_count
    t = {name: getattr(desc, name) for name, _, _ in FIELDS}
    tensors = tuple(t)

    if n <= DIRECT_MAX_REDUCED:
        ksizes, kstrides = axes.over(axes.kept, *t.values())
        rsizes, (rx, rdy, rdx) = axes.over(axes.reduced, t["input_tensor"],
                                           t["input_gradient_tensor"],
                                           t["output_gradient_tensor"])
        kx, kdy, km, kv, ks, kdx, kds, kdb = kstrides  # FIELDS order
        constants = dict(WG=wg, IS_F16=is_f16, TRAINING=training, EPSILON=eps, N_R=float(n),
                         K_SIZES=ksizes, K_X_STRIDES=kx, K_DY_STRIDES=kdy, K_DX_STRIDES=kdx,
                         K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv, K_SCALE_STRIDES=ks,
                         K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb, R_SIZES=rsizes,
                         R_X_STRIDES=rx, R_DY_STRIDES=rdy, R_DX_STRIDES=rdx)
        # A channel runs the loop over its elements, the training grad's twice.
        slices = grid_slices(channels, wg, limits, 1 + (n + 1) * (2 if training else 1))
        return Plan(tuple(Dispatch("batch_normalization_grad_direct",
                                   _bind(*KERNEL_NAMES.values()), workgroups,
                                   constants=constants,
                                   push=dict(channels=end, reduced=n, first=first))
                          for first, end, workgroups in slices), tensors=tensors)

    # Stage 1: partial sums per (channel group, chunk); LK channels by LR lanes per workgroup.
    ksizes, (kx, kdy, km, kv, kdx, ks, kds, kdb) = axes.over(
        axes.kept, t["input_tensor"], t["input_gradient_tensor"], t["mean_tensor"],
        t["variance_tensor"], t["output_gradient_tensor"], t["scale_tensor"],
        t["output_scale_gradient_tensor"], t["output_bias_gradient_tensor"])
    rsizes, (rx, rdy, rdx) = axes.over(axes.reduced, t["input_tensor"],
                                       t["input_gradient_tensor"], t["output_gradient_tensor"])
    # BATCH_NORMALIZATION_GRAD's dX needs no reduction: stage 1 can store it as it reads dY (dY
    # is read once) where dX has dY's strides, so its vectors line up with dY's.
    dx_like_dy = not training and rdx == rdy and kdx == kdy
    r_unpadded = rsizes

    def layout(try_span):
        """(VEC, run, slots, SPAN, MASKED, R sizes): run is the innermost reduced run's length
        for MASKED or SPAN (0: neither), slots n or with MASKED n padded, SPAN 0 when off."""
        if axes.kept_innermost:
            return 1, 0, n, 0, False, r_unpadded
        widths = (8, 4, 2) if is_f16 else (4, 2)
        args = ksizes, (kx, kdy), r_unpadded, (rx, rdy)
        vec = next((w for w in widths if _vector_width(w, *args) == w), 1)
        if vec > 1:
            return vec, 0, n, 0, False, r_unpadded
        run = r_unpadded[-1]
        if try_span:
            vec, span = _span_width(widths, wg, is_f16 and dx_like_dy, *args)
            if span:
                return vec, run, n, span, False, r_unpadded
        vec = _masked_width(widths, *args)
        if vec == 1:
            return 1, 0, n, 0, False, r_unpadded
        padded = list(r_unpadded[:-1]) + [_padded_run(run, vec)]
        return vec, run, n // run * padded[-1], 0, True, padded

    def lanes(width):
        """(LK, LR, channel groups, ITERS of one chunk per channel) at workgroup `width`; with
        SPAN, LR counts span rows (`width` // SV) and ITERS rows per lane."""
        if span:
            lr = width // (span * run // vec)
            return span, lr, channels // span, -(-(n // run) // lr)
        if axes.kept_innermost:
            k = min(_pow2_floor(width), K_FAST_MAX, _pow2_ceil(channels))
        else:
            k = max(1, _pow2_floor(width) // _pow2_ceil(-(-slots // vec)))
        return k, width // k, -(-channels // k), -(-slots // (width // k * vec))

    def chunks_of(iters, lr):
        """Chunks per channel group of `iters` terms (or vectors, or SPAN's rows) per lane."""
        return -(-(n // run if span else slots // vec) // (iters * lr))

    def one_pass(width):  # whether stage 1 at `width` may finish every channel
        _, _, g, it = lanes(width)
        return (g >= ONE_PASS_MIN_GROUPS and it <= ONE_PASS_MAX_ITERS
                and _within_loop_limit(limits, channels, g, 1, it, finish=True, wg=width))

    def one_pass_width():
        """The one-pass plan's workgroup width, or 0 where stage 1 cannot finish every
        channel: wider than the plans' where the groups alone would leave the device short of
        invocations (and a lane then adds fewer terms)."""
        wide = max(wg, min(limits.max_local_size, ONE_PASS_MAX_WG,
                           _pow2_ceil(-(-ONE_PASS_INVOCATIONS // lanes(wg)[2]))))
        return next((w for w in (wide, wg) if one_pass(w)), 0)

    # SPAN only where stage 1 then finishes every channel in one pass (in two stages it was
    # slower than MASKED in one: benchmarks/RESULTS.md).
    vec, run, slots, span, masked, rsizes = layout(try_span=True)
    finish_wg = one_pass_width()
    if span and not finish_wg:
        vec, run, slots, span, masked, rsizes = layout(try_span=False)
        finish_wg = one_pass_width()
    finish = finish_wg > 0
    wg = finish_wg or wg
    lk, lr, groups, whole = lanes(wg)
    # Float16 single elements would need atomics: there the element-wise kernel stores dX.
    write_dx = dx_like_dy and (vec > 1 or not is_f16)
    iters = whole if finish else min(ITERS_MAX if vec == 1 else ITERS_MAX_VECTORS, whole)
    # Where the driver ends long loops (lavapipe), an invocation must stay below the limit in
    # both stages: fewer, longer chunks until it does (only narrow workgroups get there).
    while not _within_loop_limit(limits, channels, groups, chunks_of(iters, lr), iters, finish,
                                 wg):
        if iters >= whole:  # one chunk per channel group: longer chunks cannot help
            fail(desc.OPERATOR, "InputTensor.Sizes",
                 f"needs fewer loop iterations per invocation than the device allows "
                 f"({limits.max_loop_iterations} with {limits.max_workgroups} workgroups)",
                 "a smaller problem", x.sizes, kind=RuntimeError)
        iters = min(2 * iters, whole)
    chunks = chunks_of(iters, lr)
    partials = Dispatch(
        "batch_normalization_grad_partials",
        _bind("x", "dy", "mean", "variance", "scale", "dx", "partials", "dscale", "dbias",
              "coefficients"),
        max(1, min(groups * chunks, limits.max_workgroups)),
        constants=dict(WG=wg, IS_F16=is_f16, K_SIZES=ksizes, K_X_STRIDES=kx, K_DY_STRIDES=kdy,
                       K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv, K_DX_STRIDES=kdx,
                       K_SCALE_STRIDES=ks, R_SIZES=rsizes, R_X_STRIDES=rx, R_DY_STRIDES=rdy,
                       R_DX_STRIDES=rdx, K_FAST=axes.kept_innermost, LK=lk, ITERS=iters,
                       VEC=vec, TRAINING=training, EPSILON=eps, WRITE_DX=write_dx,
                       FINISH=finish, N_R=float(n), K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb,
                       CHUNK_MAJOR=training and L2_ORDER,
                       AHEAD=_ahead(vec * x.data_type.element_size), MASKED=masked,
                       RUN=max(run, 1), SPAN=span),
        push=dict(channels=channels, reduced=slots, chunks=chunks, groups=groups))
    scratch = (Scratch("partials", 16 if finish else channels * chunks * 16),
               Scratch("coefficients", channels * 32))
    output = ()  # its dispatches
    if not write_dx:
        output = (_training_output if training else _grad_output)(desc, axes, limits, is_f16,
                                                                   eps)
    if finish:
        return Plan((partials,) + output, scratch, tensors=tensors)

    # Stage 2: per channel, the partials in order, the scale/bias gradients, the coefficients;
    # LK channels by LR lanes again, a lane adding every LR-th partial of its channel.
    lk, lr = _finalize_lanes(wg, chunks)
    ksizes, (km, kv, ks, kds, kdb) = axes.over(
        axes.kept, t["mean_tensor"], t["variance_tensor"], t["scale_tensor"],
        t["output_scale_gradient_tensor"], t["output_bias_gradient_tensor"])
    finalize = Dispatch(
        "batch_normalization_grad_finalize",
        _bind("partials", "mean", "variance", "scale", "dscale", "dbias", "coefficients"),
        grid(channels, lk, limits),
        constants=dict(WG=wg, IS_F16=is_f16, TRAINING=training, LK=lk, EPSILON=eps,
                       N_R=float(n), K_SIZES=ksizes,
                       K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv, K_SCALE_STRIDES=ks,
                       K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb),
        push=dict(channels=channels, chunks=chunks))

    if write_dx:
        return Plan((partials, finalize), scratch, tensors=tensors)
    order = ((partials, finalize) + output if training
             else (partials,) + output + (finalize,))
    return Plan(order, scratch, tensors=tensors)


def _ahead(load_bytes: int) -> int:
    """Stage 1's AHEAD: the loads of LOAD_BYTES_AHEAD bytes (at least one)."""
    return max(1, LOAD_BYTES_AHEAD // load_bytes)


def _finalize_lanes(wg: int, chunks: int):
    """(LK, LR) of the finalize stage: LR lanes per channel, as many as there are partials."""
    lr = min(_pow2_floor(wg), _pow2_ceil(chunks))
    return max(1, wg // lr), lr


def _within_loop_limit(limits: Limits, channels: int, groups: int, chunks: int,
                       iters: int, finish: bool = False, wg: int = 0) -> bool:
    """Whether every invocation of both reduction stages (with `finish`, of stage 1 only)
    runs fewer loop iterations than `limits.max_loop_iterations` (0: no limit): per work item,
    ITERS terms (stage 1) or chunks / LR partials (stage 2), plus at most WG for the workgroup
    sums (stage 1 at workgroup width `wg`, by default the plans' local size)."""
    limit = limits.max_loop_iterations
    if not limit:
        return True
    wg = wg or limits.local_size
    items1 = -(-groups * chunks // max(1, min(groups * chunks, limits.max_workgroups)))
    lk, lr = _finalize_lanes(wg, chunks)
    work2 = -(-channels // lk)  # finalize's work items: LK channels each
    items2 = -(-work2 // grid(channels, lk, limits))
    return (items1 * (iters + wg + 4) <= limit - LOOP_MARGIN
            and (finish or items2 * (-(-chunks // lr) + wg + 4) <= limit - LOOP_MARGIN))


def _vector_width(width, ksizes, kstrides, rsizes, rstrides) -> int:
    """`width` when X and dY walk the innermost reduced dimension contiguously and every
    vector of `width` elements along it is aligned and inside one run (its size and all other
    strides are multiples of `width`), else 1."""
    if rsizes[-1] % width or any(s[-1] != 1 for s in rstrides):
        return 1
    others = _outer_strides(ksizes, kstrides, rsizes, rstrides)
    return width if all(st % width == 0 for dim in others for st in dim) else 1


def _outer_strides(ksizes, kstrides, rsizes, rstrides):
    """Every dimension but the innermost reduced one (the run), of size > 1: its strides in
    each tensor, as a tuple."""
    return [tuple(s[d] for s in strides)
            for sizes, strides, last in ((ksizes, kstrides, 8), (rsizes, rstrides, 7))
            for d, n in enumerate(sizes[:last]) if n > 1]


def _padded_run(run: int, width: int) -> int:
    """Elements in the aligned vectors of `width` a run of `run` elements can touch, wherever it
    starts (MASKED)."""
    return width * ((run + 2 * width - 2) // width)


def _masked_width(widths, ksizes, kstrides, rsizes, rstrides) -> int:
    """MASKED's VEC: the widest of `widths` whose aligned vectors hold every run (the innermost
    reduced dimension, contiguous in X and dY) in at most MASKED_MAX_SLOTS times its elements,
    where X and dY agree in every stride modulo the width (a run starts at the same place in a
    vector in both); else 1."""
    run = rsizes[-1]
    if any(s[-1] != 1 for s in rstrides):
        return 1
    others = _outer_strides(ksizes, kstrides, rsizes, rstrides)
    for w in widths:
        if (_padded_run(run, w) <= MASKED_MAX_SLOTS * run
                and all(len({st % w for st in dim}) == 1 for dim in others)):
            return w
    return 1


def _span_width(widths, wg, f16_dx, ksizes, kstrides, rsizes, rstrides):
    """SPAN's (VEC, SPAN), or (1, 0): where the innermost reduced run (contiguous in X and dY)
    is no multiple of a vector width but the innermost kept dimension steps exactly one run in
    both (the channels' runs end to end: NCHW), SPAN = VEC / gcd(run, VEC) adjacent channels
    make one row of run / gcd(run, VEC) whole aligned vectors. It needs run >= VEC (a vector
    then holds at most two channels), SPAN dividing the innermost kept size, a row no wider
    than the workgroup (`wg`), every other stride a multiple of VEC, and ONE_PASS_MIN_GROUPS
    span groups. The first of SPAN_WIDTHS that fits; 2 elements only with `f16_dx` (stage 1
    stores float16 dX)."""
    run = rsizes[-1]
    if (any(s[-1] != 1 for s in rstrides) or ksizes[-1] == 1
            or any(s[-1] != run for s in kstrides)):
        return 1, 0
    others = _outer_strides(list(ksizes[:-1]) + [1], kstrides, rsizes, rstrides)
    for w in SPAN_WIDTHS + ((2,) if f16_dx else ()):
        span = w // math.gcd(run, w)
        if (w in widths and run >= w and ksizes[-1] % span == 0 and run // math.gcd(run, w) <= wg
                and math.prod(ksizes) // span >= ONE_PASS_MIN_GROUPS
                and all(st % w == 0 for dim in others for st in dim)):
            return w, span
    return 1, 0


def _elementwise_dims(axes, desc, *tensors, extra=()):
    """Sizes and strides over every dimension for an element-wise kernel, ordered so that the
    output's innermost dimension is last, then coalesced (`extra`: more stride lists)."""
    dx = desc.output_gradient_tensor.element_strides
    live = [d for d in range(len(axes.sizes)) if axes.sizes[d] > 1]
    order = sorted(live, key=lambda d: dx[d], reverse=True)
    lists = [[t.element_strides[d] for d in order] for t in tensors]
    lists += [[e[d] for d in order] for e in extra]
    return coalesce([axes.sizes[d] for d in order], *lists)


def _packed_dims(axes, *stride_lists):
    """Row-major sizes with per-dimension strides (statistics or channel index) coalesced,
    for the packed kernels; `same`: every aligned vector of width 4 (float32) or 8 (float16)
    lies in one channel."""
    sizes, strides = coalesce(list(axes.sizes), *stride_lists)
    inner_reduced = all(s[-1] == 0 for s in strides)

    def same(width):
        return inner_reduced and (sizes[-1] % width == 0 or len(sizes) == 1)
    return right_align(sizes, 8, 1), [right_align(s, 8, 0) for s in strides], same


def _stat_strides(axes, stat: TensorDesc):
    """A statistic's strides seen from the input: its own on kept dimensions, 0 on reduced."""
    return [s if d in axes.kept else 0 for d, s in enumerate(stat.element_strides)]


def _grad_output(desc, axes, limits, is_f16, eps):
    dy, dx = desc.input_gradient_tensor, desc.output_gradient_tensor
    ss = _stat_strides(axes, desc.scale_tensor)
    vs = _stat_strides(axes, desc.variance_tensor)
    wg, count = limits.local_size, dy.element_count
    bindings = _bind("dy", "scale", "variance", "dx")
    if dy.is_packed and dx.is_packed:
        sizes, (s1, s2), same = _packed_dims(axes, ss, vs)
        width = 8 if is_f16 else 4
        return _packed_output("batch_normalization_grad_output_packed", bindings,
                              dict(WG=wg, IS_F16=is_f16, SAME=same(width), EPSILON=eps,
                                   SIZES=sizes, SCALE_STRIDES=s1, VARIANCE_STRIDES=s2),
                              count, width, limits)
    sizes, strides = _elementwise_dims(axes, desc, dy, dx, extra=(ss, vs))
    sdy, sdx, s1, s2 = (right_align(s, 8, 0) for s in strides)
    return _strided_output("batch_normalization_grad_output", bindings,
                           dict(WG=wg, IS_F16=is_f16, EPSILON=eps,
                                SIZES=right_align(sizes, 8, 1), DY_STRIDES=sdy,
                                DX_STRIDES=sdx, SCALE_STRIDES=s1, VARIANCE_STRIDES=s2),
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


def _training_output(desc, axes, limits, is_f16, eps):
    x, dy, dx = desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor
    wg, count = limits.local_size, x.element_count
    bindings = _bind("x", "dy", "coefficients", "dx")
    if x.is_packed and dy.is_packed and dx.is_packed:
        sizes, (ts,), same = _packed_dims(axes, axes.channel_strides)
        width = 8 if is_f16 else 4
        return _packed_output("batch_normalization_training_grad_output_packed", bindings,
                              dict(WG=wg, IS_F16=is_f16, SAME=same(width), SIZES=sizes,
                                   CHANNEL_STRIDES=ts, REVERSE=L2_ORDER),
                              count, width, limits)
    sizes, strides = _elementwise_dims(axes, desc, x, dy, dx, extra=(axes.channel_strides,))
    sx, sdy, sdx, sc = (right_align(s, 8, 0) for s in strides)
    return _strided_output("batch_normalization_training_grad_output", bindings,
                           dict(WG=wg, IS_F16=is_f16, SIZES=right_align(sizes, 8, 1),
                                X_STRIDES=sx, DY_STRIDES=sdy, DX_STRIDES=sdx,
                                CHANNEL_STRIDES=sc),
                           count, limits)


# ---- the one-call functions ---------------------------------------------------------------------

def run(desc_cls, input, input_gradient, mean, variance, scale, epsilon, device):
    """Describe the arrays, build the descriptor (packed outputs), run, read three outputs."""

    def describe(d, dev):
        x, m = d["input"], d["mean"]
        desc = desc_cls(x, d["input_gradient"], m, d["variance"], d["scale"], x.with_sizes(x.sizes),
                        m.with_sizes(m.sizes), m.with_sizes(m.sizes), epsilon)
        item = x.data_type.element_size
        # Each statistic (channel) index is a problem of its own; reduced axes are not cut.
        return desc, {"output_gradient": (np.shape(input), item),
                      "output_scale_gradient": (np.shape(mean), item),
                      "output_bias_gradient": (np.shape(mean), item)}

    return BatchNormalizationGradResult(*_one_call.run(
        desc_cls.OPERATOR, device, (epsilon,),
        {"input": input, "input_gradient": input_gradient, "mean": mean, "variance": variance,
         "scale": scale}, describe,
        lambda dev, **p: run(desc_cls, epsilon=epsilon, device=dev, **p)))
