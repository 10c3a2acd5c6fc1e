"""The kernel plan BATCH_NORMALIZATION_GRAD and BATCH_NORMALIZATION_TRAINING_GRAD share: stage
one's choices (`StageOne`, `choose_stage_one`), the finalize stage, the loop-limit checks and
the order of the dispatches; over the axes of `_batch_normalization_axes.py` (K, the kept
"channel" dimensions, and R, the reduced ones), with the OutputGradient dispatches of
`_batch_normalization_output.py`. Tests and benchmarks/investigations patch this module's
constants and `ahead`, `masked_width` and `span_width` to try other plans.

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
from typing import Sequence

from ..plan import LOOP_MARGIN, Dispatch, Limits, Plan, Scratch, grid, grid_slices
from ..tensor import fail
from ._batch_normalization_axes import (FIELDS, KERNEL_NAMES, Axes, bind, outer_strides, pow2_ceil,
                                       pow2_floor)
from ._batch_normalization_output import grad_output, training_output

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
# (benchmarks/investigations/bn_grad_parts.py --one-pass, benchmarks/RESULTS.md).
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


# ---- the plan -----------------------------------------------------------------------------------

def plan(desc, limits: Limits, training: bool) -> Plan:
    """Either operator's dispatches and scratch buffers (`training`: the training grad's)."""
    axes = Axes(desc)
    if axes.reduced_count <= DIRECT_MAX_REDUCED:
        return _direct(desc, axes, limits, training)
    is_f16 = desc.input_tensor.data_type.element_size == 2
    eps = desc.epsilon
    channels, n = axes.channels, axes.reduced_count
    t = {name: getattr(desc, name) for name, _, _ in FIELDS}
    tensors = tuple(t)

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
    s1 = choose_stage_one(desc, axes, limits, (ksizes, (kx, kdy), rsizes, (rx, rdy)),
                          dx_like_dy)
    reads = s1.reads
    partials = Dispatch(
        "batch_normalization_grad_partials",
        bind("x", "dy", "mean", "variance", "scale", "dx", "partials", "dscale", "dbias",
             "coefficients"),
        max(1, min(s1.groups * s1.chunks, limits.max_workgroups)),
        constants=dict(WG=s1.wg, IS_F16=is_f16, K_SIZES=ksizes, K_X_STRIDES=kx,
                       K_DY_STRIDES=kdy, K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv,
                       K_DX_STRIDES=kdx, K_SCALE_STRIDES=ks, R_SIZES=reads.rsizes,
                       R_X_STRIDES=rx, R_DY_STRIDES=rdy, R_DX_STRIDES=rdx,
                       K_FAST=axes.kept_innermost, LK=s1.lk, ITERS=s1.iters, VEC=reads.vec,
                       TRAINING=training, EPSILON=eps, WRITE_DX=s1.write_dx, FINISH=s1.finish,
                       N_R=float(n), K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb,
                       CHUNK_MAJOR=training and L2_ORDER, AHEAD=s1.ahead, MASKED=reads.masked,
                       RUN=max(reads.run, 1), SPAN=reads.span),
        push=dict(channels=channels, reduced=reads.slots, chunks=s1.chunks, groups=s1.groups))
    scratch = (Scratch("partials", 16 if s1.finish else channels * s1.chunks * 16),
               Scratch("coefficients", channels * 32))
    output = ()  # its dispatches
    if not s1.write_dx:
        output = (training_output(desc, axes, limits, is_f16, reverse=L2_ORDER) if training
                  else grad_output(desc, axes, limits, is_f16, eps))
    if s1.finish:
        return Plan((partials,) + output, scratch, tensors=tensors)
    finalize = _finalize(desc, axes, limits, training, s1.wg, s1.chunks)
    if s1.write_dx:
        return Plan((partials, finalize), scratch, tensors=tensors)
    order = ((partials, finalize) + output if training
             else (partials,) + output + (finalize,))
    return Plan(order, scratch, tensors=tensors)


def _direct(desc, axes, limits: Limits, training: bool) -> Plan:
    """Few elements per channel (N_R <= DIRECT_MAX_REDUCED, "no reduction" included):
    `batch_normalization_grad_direct`, one invocation per channel, in one pass."""
    is_f16 = desc.input_tensor.data_type.element_size == 2
    wg, channels, n = limits.local_size, axes.channels, axes.reduced_count
    t = {name: getattr(desc, name) for name, _, _ in FIELDS}
    ksizes, kstrides = axes.over(axes.kept, *t.values())
    rsizes, (rx, rdy, rdx) = axes.over(axes.reduced, t["input_tensor"],
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


def _finalize(desc, axes, limits: Limits, training: bool, wg: int, chunks: int) -> Dispatch:
    """Stage 2: per channel, the partials in order, the scale/bias gradients, the coefficients;
    LK channels by LR lanes again, a lane adding every LR-th partial of its channel."""
    lk, lr = _finalize_lanes(wg, chunks)
    ksizes, (km, kv, ks, kds, kdb) = axes.over(
        axes.kept, desc.mean_tensor, desc.variance_tensor, desc.scale_tensor,
        desc.output_scale_gradient_tensor, desc.output_bias_gradient_tensor)
    return Dispatch(
        "batch_normalization_grad_finalize",
        bind("partials", "mean", "variance", "scale", "dscale", "dbias", "coefficients"),
        grid(axes.channels, lk, limits),
        constants=dict(WG=wg, IS_F16=desc.input_tensor.data_type.element_size == 2,
                       TRAINING=training, LK=lk, EPSILON=desc.epsilon,
                       N_R=float(axes.reduced_count), K_SIZES=ksizes,
                       K_MEAN_STRIDES=km, K_VARIANCE_STRIDES=kv, K_SCALE_STRIDES=ks,
                       K_DSCALE_STRIDES=kds, K_DBIAS_STRIDES=kdb),
        push=dict(channels=axes.channels, chunks=chunks))


# ---- stage one's choices ------------------------------------------------------------------------

# A stage-1 workgroup: LK channels by LR lanes, over `groups` channel groups, a lane adding
# `whole` terms (elements, vectors or SPAN's rows) where one chunk takes a whole channel group.
Lanes = namedtuple("Lanes", "lk lr groups whole")


@dataclass(frozen=True)
class Reads:
    """How stage 1 reads a channel's elements: `vec` a load (VEC; 1: single elements); `run`,
    the innermost reduced run's length with MASKED or SPAN (0: neither); `slots`, the terms
    per channel (with MASKED, the runs padded to whole vectors); `span`, SPAN's channels per
    row (0: no SPAN); `masked` (MASKED); `rsizes`, R_SIZES (with MASKED, the run padded)."""

    vec: int = 1
    run: int = 0
    slots: int = 0
    span: int = 0
    masked: bool = False
    rsizes: Sequence[int] = ()

    def terms(self) -> int:
        """What a lane adds one at a time over a channel: SPAN's rows, vectors or elements."""
        return self.slots // self.run if self.span else self.slots // self.vec

    def lanes(self, width: int, axes) -> Lanes:
        """The lanes at workgroup `width`; with SPAN, LR counts span rows (`width` // SV) and
        `whole` rows per lane."""
        if self.span:
            lr = width // (self.span * self.run // self.vec)
            return Lanes(self.span, lr, axes.channels // self.span, -(-self.terms() // lr))
        if axes.kept_innermost:
            k = min(pow2_floor(width), K_FAST_MAX, pow2_ceil(axes.channels))
        else:
            k = max(1, pow2_floor(width) // pow2_ceil(-(-self.slots // self.vec)))
        return Lanes(k, width // k, -(-axes.channels // k),
                     -(-self.slots // (width // k * self.vec)))

    def chunks(self, iters: int, lr: int) -> int:
        """Chunks per channel group of `iters` terms per lane, LR lanes."""
        return -(-self.terms() // (iters * lr))


@dataclass(frozen=True)
class StageOne:
    """Stage 1's choices (`choose_stage_one`): its `reads`; its workgroup width (WG); whether
    it finishes every channel itself (FINISH); LK channels by LR lanes per workgroup over
    `groups` channel groups, ITERS terms per lane in each of `chunks` chunks per group;
    whether it stores dX as it reads dY (WRITE_DX); the loads each lane has ahead (AHEAD)."""

    reads: Reads
    wg: int
    finish: bool
    lk: int
    lr: int
    groups: int
    iters: int
    chunks: int
    write_dx: bool
    ahead: int


def choose_stage_one(desc, axes, limits: Limits, walk, dx_like_dy: bool) -> StageOne:
    """Stage 1's reads (`choose_reads`), then one pass where it fits (`one_pass_width`), its
    lanes, and the chunk length (`iters_within_loop_limit`). `walk`: X's and dY's (K sizes,
    (K strides), R sizes, (R strides)); `dx_like_dy`: dX may be stored as dY is read."""
    x = desc.input_tensor
    is_f16 = x.data_type.element_size == 2
    wg = limits.local_size
    # SPAN only where stage 1 then finishes every channel in one pass (in two stages it was
    # slower than MASKED in one: benchmarks/RESULTS.md).
    reads = choose_reads(axes, walk, is_f16, wg, is_f16 and dx_like_dy, try_span=True)
    finish_wg = one_pass_width(reads, axes, limits)
    if reads.span and not finish_wg:
        reads = choose_reads(axes, walk, is_f16, wg, is_f16 and dx_like_dy, try_span=False)
        finish_wg = one_pass_width(reads, axes, limits)
    finish = finish_wg > 0
    wg = finish_wg or wg
    lanes = reads.lanes(wg, axes)
    # Float16 single elements would need atomics: there the element-wise kernel stores dX.
    write_dx = dx_like_dy and (reads.vec > 1 or not is_f16)
    iters = (lanes.whole if finish
             else min(ITERS_MAX if reads.vec == 1 else ITERS_MAX_VECTORS, lanes.whole))
    iters = iters_within_loop_limit(desc, axes, limits, reads, lanes, iters, finish, wg)
    return StageOne(reads, wg, finish, lanes.lk, lanes.lr, lanes.groups, iters,
                    reads.chunks(iters, lanes.lr), write_dx,
                    ahead(reads.vec * x.data_type.element_size))


def choose_reads(axes, walk, is_f16: bool, wg: int, f16_dx: bool, try_span: bool) -> Reads:
    """Aligned vectors where X's and dY's runs allow them, else SPAN (with `try_span`) or
    MASKED where their rules take the run, else single elements (always where a kept
    dimension is innermost in memory: K_FAST)."""
    n, rsizes = axes.reduced_count, walk[2]
    if axes.kept_innermost:
        return Reads(slots=n, rsizes=rsizes)
    widths = (8, 4, 2) if is_f16 else (4, 2)
    vec = next((w for w in widths if vector_width(w, *walk) == w), 1)
    if vec > 1:
        return Reads(vec, slots=n, rsizes=rsizes)
    run = rsizes[-1]
    if try_span:
        vec, span = span_width(widths, wg, f16_dx, *walk)
        if span:
            return Reads(vec, run, n, span, rsizes=rsizes)
    vec = masked_width(widths, *walk)
    if vec == 1:
        return Reads(slots=n, rsizes=rsizes)
    padded = list(rsizes[:-1]) + [padded_run(run, vec)]
    return Reads(vec, run, n // run * padded[-1], masked=True, rsizes=padded)


def one_pass_width(reads: Reads, axes, limits: Limits) -> int:
    """The one-pass plan's workgroup width, or 0 where stage 1 cannot finish every channel:
    wider than the plans' where the groups alone would leave the device short of invocations
    (and a lane then adds fewer terms)."""
    wg = limits.local_size
    wide = max(wg, min(limits.max_local_size, ONE_PASS_MAX_WG,
                       pow2_ceil(-(-ONE_PASS_INVOCATIONS // reads.lanes(wg, axes).groups))))
    return next((w for w in (wide, wg) if finishes(reads, axes, limits, w)), 0)


def finishes(reads: Reads, axes, limits: Limits, width: int) -> bool:
    """Whether stage 1 at workgroup `width` may finish every channel: ONE_PASS_MIN_GROUPS
    channel groups or more, each lane adding at most ONE_PASS_MAX_ITERS terms, within the
    loop limit."""
    lanes = reads.lanes(width, axes)
    return (lanes.groups >= ONE_PASS_MIN_GROUPS and lanes.whole <= ONE_PASS_MAX_ITERS
            and within_loop_limit(limits, axes.channels, lanes.groups, 1, lanes.whole,
                                  finish=True, wg=width))


def iters_within_loop_limit(desc, axes, limits: Limits, reads: Reads, lanes: Lanes, iters: int,
                            finish: bool, wg: int) -> int:
    """ITERS from `iters` up: where the driver ends long loops (lavapipe), an invocation must
    stay below the limit in both stages: fewer, longer chunks until it does (only narrow
    workgroups get there); a RuntimeError naming the operator where none fits."""
    while not within_loop_limit(limits, axes.channels, lanes.groups,
                                reads.chunks(iters, lanes.lr), iters, finish, wg):
        if iters >= lanes.whole:  # one chunk per channel group: longer chunks cannot help
            fail(desc.OPERATOR, "InputTensor.Sizes",
                 f"needs fewer loop iterations per invocation than the device allows "
                 f"({limits.max_loop_iterations} with {limits.max_workgroups} workgroups)",
                 "a smaller problem", desc.input_tensor.sizes, kind=RuntimeError)
        iters = min(2 * iters, lanes.whole)
    return iters


def ahead(load_bytes: int) -> int:
    """Stage 1's AHEAD: the loads of LOAD_BYTES_AHEAD bytes (at least one)."""
    return max(1, LOAD_BYTES_AHEAD // load_bytes)


def vector_width(width, ksizes, kstrides, rsizes, rstrides) -> int:
    """`width` when X and dY walk the innermost reduced dimension contiguously and every
    vector of `width` elements along it is aligned and inside one run (its size and all other
    strides are multiples of `width`), else 1."""
    if rsizes[-1] % width or any(s[-1] != 1 for s in rstrides):
        return 1
    others = outer_strides(ksizes, kstrides, rsizes, rstrides)
    return width if all(st % width == 0 for dim in others for st in dim) else 1


def padded_run(run: int, width: int) -> int:
    """Elements in the aligned vectors of `width` a run of `run` elements can touch, wherever it
    starts (MASKED)."""
    return width * ((run + 2 * width - 2) // width)


def masked_width(widths, ksizes, kstrides, rsizes, rstrides) -> int:
    """MASKED's VEC: the widest of `widths` whose aligned vectors hold every run (the innermost
    reduced dimension, contiguous in X and dY) in at most MASKED_MAX_SLOTS times its elements,
    where X and dY agree in every stride modulo the width (a run starts at the same place in a
    vector in both); else 1."""
    run = rsizes[-1]
    if any(s[-1] != 1 for s in rstrides):
        return 1
    others = outer_strides(ksizes, kstrides, rsizes, rstrides)
    for w in widths:
        if (padded_run(run, w) <= MASKED_MAX_SLOTS * run
                and all(len({st % w for st in dim}) == 1 for dim in others)):
            return w
    return 1


def span_width(widths, wg, f16_dx, ksizes, kstrides, rsizes, rstrides):
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
    others = outer_strides(list(ksizes[:-1]) + [1], kstrides, rsizes, rstrides)
    for w in SPAN_WIDTHS + ((2,) if f16_dx else ()):
        span = w // math.gcd(run, w)
        if (w in widths and run >= w and ksizes[-1] % span == 0 and run // math.gcd(run, w) <= wg
                and math.prod(ksizes) // span >= ONE_PASS_MIN_GROUPS
                and all(st % w == 0 for dim in others for st in dim)):
            return w, span
    return 1, 0


# ---- the loop limit -----------------------------------------------------------------------------

def _finalize_lanes(wg: int, chunks: int):
    """(LK, LR) of the finalize stage: LR lanes per channel, as many as there are partials."""
    lr = min(pow2_floor(wg), pow2_ceil(chunks))
    return max(1, wg // lr), lr


def within_loop_limit(limits: Limits, channels: int, groups: int, chunks: int,
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
