"""The exact per-channel sums that BATCH_NORMALIZATION_TRAINING and both BatchNorm grads share
(docs/semantics.md §18): stage 1, `batch_normalization_training_sums` (with GRAD for the grads),
sums chunk groups of each channel into digits in the `partials` scratch buffer; stage 2, one
workgroup per channel, adds a channel's groups exactly and rounds once
(`batch_normalization_training_finalize`, `batch_normalization_grad_finalize`).

A channel's n elements, in row-major order over the reduced dimensions, fall in canonical
chunks of CHUNK elements interleaved by INTERLEAVE; each chunk is summed in one fixed float32
tree and the chunk sums are added as integers, so the results are the same bits on every
device, whatever its subgroup size, the workgroup width or the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ..plan import LOOP_MARGIN, Dispatch, Limits, grid_slices, right_align
from ..tensor import TensorDesc, coalesce, fail
from ._batch_normalization_axes import Axes, pow2_ceil

# The canonical chunks (the kernels' comments): 16 elements, interleaved by 32 in blocks of 512.
CHUNK, INTERLEAVE = 16, 32
# Stage 1: chunks a lane takes per work item at most, and about how many work items the plan
# makes (fewer, longer items where there are more chunks): on an H200, 512 against 2048 took
# float32 [32,64,112,112] from 125 to 101 us and float16 from 105 to 81 us; 4 chunks per
# lane loaded as vectors did not help (benchmarks/results/h200-2026-11-28-bn-training).
CHUNKS_PER_LANE_MAX = 16
TARGET_ITEMS = 512
# Channel slots per workgroup at most (each keeps SUMS x 24 digits in shared memory).
SLOTS_MAX = 16
# Channel slots per workgroup where the innermost reduced run is short (below SHORT_RUN
# elements) and the channels are not innermost: a workgroup then reads SHORT_RUN_SLOTS
# neighbouring channels' runs at once (an investigation knob; 1 = as many as the chunks need).
SHORT_RUN, SHORT_RUN_SLOTS = 1024, 1
# Stage 2 reads each channel's partials with one workgroup of this width at most.
FINALIZE_WG_MAX = 64
# Words per (channel, chunk group, sum) in `partials`: 24 digits, flags, the shift
# (shaders/include/batch_normalization_training.glsl).
PARTIAL_WORDS = 26
# Stage 2's loop iterations per channel besides the groups' words: normalising and rounding
# (3 x 24), the clears, and finish's correctly rounded arithmetic.
FINALIZE_FIXED_LOOPS = 3 * 24 + 200
# A digit takes at most 2^16 per group (stage 1 normalises them): 32768 groups stay below 2^31.
GROUPS_MAX = 32768


def chunk_count(n: int) -> int:
    """Non-empty canonical chunks of a channel of n elements: 32 per whole block of 512, and
    one per element of the last block up to 32."""
    block = CHUNK * INTERLEAVE
    return INTERLEAVE * (n // block) + min(INTERLEAVE, n % block)


@dataclass(frozen=True)
class Sums:
    """Stage 1's dispatches over `groups` chunk groups per channel, and the `partials` scratch
    buffer's bytes."""

    dispatches: Tuple[Dispatch, ...]
    groups: int
    partials_bytes: int


def stage_one(operator: str, axes: Axes, x: TensorDesc, limits: Limits, sums: int,
              bindings: Dict[str, str], constants: dict,
              dy: Optional[TensorDesc] = None) -> Sums:
    """Stage 1 over `x` (and with `dy` the grads' dY), `sums` sums per channel (2: the
    forward's; 3: the grads'); `bindings` and `constants` complete the kernel's own (the
    K strides, GRAD's)."""
    channels, n = axes.channels, axes.reduced_count
    wg = limits.local_size
    # The reduced dimensions in their logical (row-major) order: the canonical order.
    reduced = axes.reduced_logical
    walked = (x,) if dy is None else (x, dy)
    rsizes, rstrides = coalesce([x.sizes[d] for d in reduced],
                                *[[t.element_strides[d] for d in reduced] for t in walked])
    rstrides = [right_align(s, 8, 0) for s in rstrides]
    chunks = chunk_count(n)
    if axes.kept_innermost:
        # Channels side by side (K_FAST), as many slots as fit: consecutive invocations read
        # consecutive channels' elements, SLOTS_MAX of them in one memory segment.
        lr = max(wg // min(SLOTS_MAX, pow2_ceil(channels)), 1)
    else:
        lr = min(wg, max(pow2_ceil(chunks), wg // SLOTS_MAX, 1))
        if rsizes[-1] < SHORT_RUN:
            lr = min(lr, max(wg // SHORT_RUN_SLOTS, 1))
    lk = wg // lr
    channel_groups = -(-channels // lk)
    per_lane = max(1, min(CHUNKS_PER_LANE_MAX,
                          -(-chunks * channel_groups // (lr * TARGET_ITEMS))))
    per_lane = max(per_lane, -(-chunks // (lr * GROUPS_MAX)))
    # A channel's partials (sums * PARTIAL_WORDS words a group) no larger than its elements,
    # so that the scratch buffer is no larger than X (a one-call problem cut to fit a buffer
    # limit fits with it): short channels over few lanes (channels side by side, a narrow
    # workgroup) take more chunks per lane, one group where a group is larger than X's share.
    max_groups = max(1, n * x.data_type.element_size // (sums * PARTIAL_WORDS * 4))
    if limits.max_loop_iterations:
        # Stage 2 adds a channel's groups in one work item: its loop over their words must
        # stay below a driver's loop limit (lavapipe's 65535), however narrow the workgroup.
        budget = limits.max_loop_iterations - LOOP_MARGIN - FINALIZE_FIXED_LOOPS
        fwg = min(FINALIZE_WG_MAX, wg)
        max_groups = min(max_groups, max(1, budget * fwg // (sums * PARTIAL_WORDS)))
    per_lane = max(per_lane, -(-chunks // (lr * max_groups)))
    # A slot's digits take a flush per chunk sum at most, and one per lane at the end.
    if lr * (per_lane + 1) > GROUPS_MAX:
        fail(operator, "InputTensor.Sizes", "must give at most 2^33 elements per channel",
             "fewer elements per channel", n, RuntimeError)
    groups = -(-chunks // (lr * per_lane))
    items = channel_groups * groups
    # An item's loops: per chunk its element and tree loops (16 + 15 iterations, 6 tests), the
    # shift's chunk once, the flushes' pieces, the digits' clear, normalisation and stores.
    loops = 1 + (per_lane + 1) * 40 + 4 * 7 + 4 * 25 + sums * SLOTS_MAX * PARTIAL_WORDS
    if limits.max_loop_iterations and loops > limits.max_loop_iterations - LOOP_MARGIN:
        fail(operator, "InputTensor.Sizes", f"needs fewer loop iterations per invocation than "
             f"the device allows ({limits.max_loop_iterations})", "fewer elements per channel",
             n, RuntimeError)
    # The forward passes none of the grads' constants: theirs stay off (`constants` may set
    # them).
    unused = right_align([], 8, 0)
    common = dict(WG=wg, IS_F16=x.data_type.element_size == 2, LK=lk,
                  K_FAST=axes.kept_innermost, CHUNKS_PER_LANE=per_lane,
                  R_SIZES=right_align(rsizes, 8, 1), R_X_STRIDES=rstrides[0],
                  R_DY_STRIDES=rstrides[1] if dy is not None else unused, GRAD=False,
                  TRAINING=False, EPSILON=0.0, WRITE_DX=False, K_DY_STRIDES=unused,
                  K_MEAN_STRIDES=unused, K_VARIANCE_STRIDES=unused, K_SCALE_STRIDES=unused)
    dispatches = tuple(
        Dispatch("batch_normalization_training_sums", bindings, workgroups,
                 constants=dict(common, **constants),
                 push=dict(channels=channels, reduced=n, groups=groups, end=end, first=first))
        for first, end, workgroups in grid_slices(items, 1, limits, loops))
    # One group per channel: stage 1 stores the rounded sums and the shift (sums + 1 words).
    words = sums + 1 if groups == 1 else groups * sums * PARTIAL_WORDS
    return Sums(dispatches, groups, channels * words * 4)


def stage_two(kernel: str, axes: Axes, limits: Limits, sums: int, groups: int,
              bindings: Dict[str, str], constants: dict, push: dict) -> Tuple[Dispatch, ...]:
    """Stage 2, `kernel` with one workgroup per channel over `groups` chunk groups of `sums`
    sums each; `constants` and `push` complete its own."""
    fwg = min(FINALIZE_WG_MAX, limits.local_size)
    loops = 1 + -(-groups * sums * PARTIAL_WORDS // fwg) + FINALIZE_FIXED_LOOPS
    return tuple(
        Dispatch(kernel, bindings, workgroups, constants=dict(WG=fwg, **constants),
                 push=dict(push, end=end, first=first, groups=groups))
        for first, end, workgroups in grid_slices(axes.channels, 1, limits, loops))
