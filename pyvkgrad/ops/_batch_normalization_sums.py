"""The exact per-channel sums that BATCH_NORMALIZATION_TRAINING and both BatchNorm grads share
(docs/semantics.md §18), and each channel's results from them, in one kernel,
`batch_normalization_training_sums` (with GRAD for the grads): work items sum chunk groups of
a channel into digits; the item that completes a channel (the only one, or the last to count
itself in the `counters` scratch) adds the channel's groups exactly (the others' digits in
the `partials` scratch), rounds once and finishes the channel: the forward's statistics, the
grads' parameter gradients, and the coefficients (`coefficients` scratch) of the element-wise
pass that follows.

A channel's n elements, in row-major order over the reduced dimensions, fall in canonical
chunks of CHUNK elements interleaved by INTERLEAVE; each chunk is summed in one fixed float32
tree and the chunk sums are added as integers, so the results are the same bits on every
device, whatever its subgroup size, the workgroup width or the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import math

import numpy as np

from ..plan import LOOP_MARGIN, Dispatch, Limits, Scratch, grid_slices, right_align
from ..tensor import TensorDesc, coalesce, fail
from ._batch_normalization_axes import Axes, pow2_ceil

# The canonical chunks (the kernels' comments): 16 elements, interleaved by 32 in blocks of 512.
CHUNK, INTERLEAVE = 16, 32
# Chunks (or pairs of chunks, the kernel's PAIRED) a lane takes per work item at most, and
# about how many work items the plan makes (fewer, longer items where there are more
# chunks): on an H200, 512 against 2048 took float32 [32,64,112,112] from 125 to 101 us and
# float16 from 105 to 81 us; 4 chunks per lane loaded as vectors did not help
# (benchmarks/results/h200-2026-11-28-bn-training).
CHUNKS_PER_LANE_MAX = 16
TARGET_ITEMS = 512
# BATCH_NORMALIZATION_TRAINING's float16 chunks two at a time where the layout allows (the
# kernel's PAIRED): one word loaded gives an element of each. On an H200 5-10% faster where
# it applies; the grads' pairs (X and dY, four vectors of each) and float32's (8-byte
# loads) were slower (benchmarks/RESULTS.md, "2026-12-03").
PAIR_HALVES = True
# BATCH_NORMALIZATION_TRAINING's Output written by the sums kernel (OUTPUT_HERE) where every
# work item completes its channels (one chunk group per channel), each lane takes at most
# OUTPUT_HERE_UNITS_MAX chunks (or pairs), Output and FusedAdd are laid out as X and float16
# elements come in pairs (single halves would need atomics): the item reads its channels' X
# again from L2, and the element-wise pass with its dispatch and barrier goes. On an H200
# (benchmarks/RESULTS.md, "2026-12-03 (night 2)"), float32 [64,1024,7,7] and [32,2048,7,7] at
# 2 chunks a lane went from 27.4-27.9 to 21.5-21.8 us and [16,512,14,14] at 1 from 18.9 to
# 15.9 (float16 pairs 19.5 to 17.4); at 4 a lane ([128,1024,7,7], [256,512,7,7]) it was 2-8%
# slower, and items made longer to take a channel whole 30-100% slower.
OUTPUT_HERE = True
OUTPUT_HERE_UNITS_MAX = 2
# Channel slots per workgroup at most (each keeps SUMS x 24 digits in shared memory).
SLOTS_MAX = 16
# Words per (channel, chunk group, sum) in `partials`: 24 digits and the flags
# (shaders/include/batch_normalization_training.glsl).
PARTIAL_WORDS = 25
# The completing item's loop iterations besides the groups' words: normalising and rounding
# (3 x 24), the clears, and the finish's correctly rounded arithmetic.
FINISH_FIXED_LOOPS = 3 * 24 + 200
# A digit takes at most 2^16 per group (each item normalises them): 32768 groups stay below
# 2^31. The kernel also takes `groups >> 16` as a zero the compiler cannot see (store_dx).
GROUPS_MAX = 32768
assert GROUPS_MAX < 1 << 16


def chunk_count(n: int) -> int:
    """Non-empty canonical chunks of a channel of n elements: 32 per whole block of 512, and
    one per element of the last block up to 32."""
    block = CHUNK * INTERLEAVE
    return INTERLEAVE * (n // block) + min(INTERLEAVE, n % block)


@dataclass(frozen=True)
class Sums:
    """The dispatches over `groups` chunk groups per channel, and the scratch buffers they use
    (`partials`, `counters` and `coefficients`)."""

    dispatches: Tuple[Dispatch, ...]
    groups: int
    scratch: Tuple[Scratch, ...]
    output_here: bool = False  # the forward's Output written by these dispatches


@dataclass(frozen=True)
class Lanes:
    """A workgroup of `wg` lanes: LK channel slots of LR lanes, each taking `per_lane` chunks
    per work item; `loops`: an item's loop iterations (the completing item's); `output_here`:
    the items write the forward's Output (OUTPUT_HERE)."""

    lr: int
    lk: int
    per_lane: int
    loops: int
    output_here: bool = False


def _lanes(axes: Axes, x: TensorDesc, limits: Limits, sums: int, wg: int, chunks: int,
           most: int, pair: int, output: bool = False) -> Lanes:
    """The lanes of a `wg`-wide workgroup over channels of `chunks` units (a chunk, or with
    `pair` 2 a pair of chunks) each; under a loop limit (`most` iterations an invocation, 0:
    none) the fewest units per lane that fit, where any do (else the loops of the best, which
    the caller refuses). `output`: the forward may write Output here (OUTPUT_HERE, where
    `writes_output`), and its Output loops count there."""
    channels, n = axes.channels, axes.reduced_count
    if axes.kept_innermost:
        # Channels side by side (K_FAST), as many slots as fit: consecutive invocations read
        # consecutive channels' elements, SLOTS_MAX of them in one memory segment.
        lr = max(wg // min(SLOTS_MAX, pow2_ceil(channels)), 1)
    else:
        lr = min(wg, max(pow2_ceil(chunks), wg // SLOTS_MAX, 1))
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
    per_lane = max(per_lane, -(-chunks // (lr * max_groups)))
    # An item's loops: per chunk its element and tree loops (16 + 15 iterations, 6 tests), the
    # shift's chunk once, the flushes' pieces, the digits' clear and normalisation, the stores
    # of its slots' words over the workgroup; and the completing item's: its channels' groups'
    # words (LK channels' over the workgroup: a channel's over LR lanes), and rounding and
    # finishing its slots' sums over the workgroup; with one group and `output`, per unit its
    # Output walk (16 iterations, 4 tests).
    slot_sums = -(-sums * lk // wg)  # an invocation's share of the slots' sums

    def writes_output(p: int) -> bool:
        """OUTPUT_HERE's rule at p units a lane: one group, float32 or pairs."""
        return (output and OUTPUT_HERE and -(-chunks // (lr * p)) == 1
                and p <= OUTPUT_HERE_UNITS_MAX and (x.data_type.element_size == 4 or pair == 2))

    def item_loops(p: int) -> int:
        groups = -(-chunks // (lr * p))
        return (1 + (pair * p + 1) * 40 + (p * 20 if writes_output(p) else 0)
                + 4 * 7 + 4 * 25 + slot_sums * PARTIAL_WORDS
                + -(-groups * sums * PARTIAL_WORDS // lr) + slot_sums * FINISH_FIXED_LOOPS)

    if most and item_loops(per_lane) > most:
        # More chunks per lane make fewer groups for the completing item to add: the loops
        # fall until about `best` chunks per lane, then rise. The least per_lane that fits,
        # by bisection below `best` (every step keeps a per_lane that fits).
        top = max(per_lane, (GROUPS_MAX // lr - 1) // pair)
        best = math.isqrt(chunks * sums * PARTIAL_WORDS // (40 * pair * lr * lr))
        best = min(top, max(per_lane, best))
        best = min(range(max(per_lane, best - 2), min(top, best + 2) + 1), key=item_loops)
        if item_loops(best) <= most:
            low, high = per_lane, best
            while low < high:
                mid = (low + high) // 2
                if item_loops(mid) <= most:
                    high = mid
                else:
                    low = mid + 1
            best = high if item_loops(high) <= most else best
        per_lane = best
    return Lanes(lr, lk, per_lane, item_loops(per_lane), writes_output(per_lane))


def sums_and_finish(operator: str, axes: Axes, x: TensorDesc, limits: Limits, sums: int,
                    bindings: Dict[str, str], constants: dict, coefficients: int,
                    dy: Optional[TensorDesc] = None,
                    output: Optional[Tuple[Dict[str, str], dict]] = None) -> Sums:
    """The sums over `x` (and with `dy` the grads' dY), `sums` sums per channel (2: the
    forward's; 3: the grads'), and each channel's finish; `bindings` name the kernel's tensors
    (the scratch buffers are named here) and `constants` complete its own (the K strides,
    GRAD's); `coefficients`: vec4 per channel of the pass that follows. `output`: the
    forward's bindings and constants for writing Output here (OUTPUT_HERE), which the plan
    takes where each item completes its channels (Sums.output_here)."""
    channels, n = axes.channels, axes.reduced_count
    # The reduced dimensions in their logical (row-major) order: the canonical order.
    reduced = axes.reduced_logical
    walked = (x,) if dy is None else (x, dy)
    rsizes, rstrides = coalesce([x.sizes[d] for d in reduced],
                                *[[t.element_strides[d] for d in reduced] for t in walked])
    rstrides = [right_align(s, 8, 0) for s in rstrides]
    # The forward's float16 chunks in pairs (PAIRED): elements r, r + 1 (r even) in one word
    # of X: the innermost reduced dimension contiguous and of even size (so n and the chunk
    # count are even too), every other reduced and kept stride even (X at offset 0).
    paired = (PAIR_HALVES and dy is None and x.data_type.element_size == 2
              and len(rsizes) > 0 and rsizes[-1] % 2 == 0 and rstrides[0][-1] == 1
              and all(v % 2 == 0 for v in rstrides[0][:-1])
              and all(x.element_strides[d] % 2 == 0 for d in axes.kept))
    chunks = chunk_count(n)
    most = limits.max_loop_iterations - LOOP_MARGIN if limits.max_loop_iterations else 0
    # On lavapipe one subgroup a workgroup ([32,256,14,14] took 68 ms with 256 lanes, 33 with
    # 8), unless a channel is too long for its loop limit at that width.
    widths = [limits.local_size]
    if limits.narrow_reductions and limits.subgroup_size < limits.local_size:
        widths.insert(0, limits.subgroup_size)
    # Pairs where they fit the loop limit, else chunks one at a time (a pair's lanes are half
    # as many per channel, so more channels share a workgroup's finish).
    def fits(lanes: Lanes) -> bool:
        return not most or lanes.loops <= most

    for pair in ((2, 1) if paired else (1,)):
        for wg in widths:
            lanes = _lanes(axes, x, limits, sums, wg, chunks // pair, most, pair,
                           output is not None)
            if fits(lanes):
                break
        if fits(lanes):
            break
    units = chunks // pair
    if not fits(lanes):
        fail(operator, "InputTensor.Sizes", f"needs fewer loop iterations per invocation than "
             f"the device allows ({limits.max_loop_iterations})", "fewer elements per channel",
             n, RuntimeError)
    lr, lk, per_lane, loops = lanes.lr, lanes.lk, lanes.per_lane, lanes.loops
    # A slot's digits take a flush per chunk sum at most, and one per lane at the end.
    if lr * (pair * per_lane + 1) > GROUPS_MAX:
        fail(operator, "InputTensor.Sizes", "must give at most 2^33 elements per channel",
             "fewer elements per channel", n, RuntimeError)
    groups = -(-units // (lr * per_lane))
    assert groups <= GROUPS_MAX, (groups, units, lr, per_lane)
    items = -(-channels // lk) * groups
    # Each operator passes only its own constants: the others stay off.
    unused = right_align([], 8, 0)
    common = dict(WG=wg, IS_F16=x.data_type.element_size == 2, LK=lk, N_R=float(n),
                  K_FAST=axes.kept_innermost, CHUNKS_PER_LANE=per_lane, PAIRED=pair == 2,
                  R_SIZES=right_align(rsizes, 8, 1), R_X_STRIDES=rstrides[0],
                  R_DY_STRIDES=rstrides[1] if dy is not None else unused, GRAD=False,
                  TRAINING=False, EPSILON=0.0, WRITE_DX=False, K_DY_STRIDES=unused,
                  K_MEAN_STRIDES=unused, K_VARIANCE_STRIDES=unused, K_SCALE_STRIDES=unused,
                  K_BIAS_STRIDES=unused, K_OUTPUT_MEAN_STRIDES=unused,
                  K_OUTPUT_VARIANCE_STRIDES=unused, K_DSCALE_STRIDES=unused,
                  K_DBIAS_STRIDES=unused, OUTPUT_HERE=False, FUSED_ADD=False, RELU=False,
                  UNROLL_CHUNKS=limits.unroll_loops)
    bindings = dict(bindings, partials="partials", counters="counters",
                    coefficients="coefficients")
    here = lanes.output_here
    if here:
        bindings.update(output[0])
        constants = dict(constants, OUTPUT_HERE=True, **output[1])
    dispatches = tuple(
        Dispatch("batch_normalization_training_sums", bindings, workgroups,
                 constants=dict(common, **constants),
                 push=dict(channels=channels, reduced=n, groups=groups, end=end, first=first))
        for first, end, workgroups in grid_slices(items, 1, limits, loops))
    # One group per channel: its item finishes the channel alone (`partials` and `counters`
    # unused; one word each, as a buffer may not be empty). The counts start at zero, uploaded
    # once; the completing item zeroes its channel's again.
    words = groups * sums * PARTIAL_WORDS if groups > 1 else 0
    count_words = channels if groups > 1 else 1
    scratch = (Scratch("partials", max(4, channels * words * 4)),
               Scratch("counters", count_words * 4, np.zeros(count_words, np.uint32)),
               Scratch("coefficients", channels * coefficients * 16))
    return Sums(dispatches, groups, scratch, here)
