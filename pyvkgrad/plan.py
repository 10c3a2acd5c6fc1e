"""Kernel plans: which kernels an operator runs, on which buffers, with which constants.

A plan is pure data, computed from a descriptor and the device's limits without touching the
device, so it can be tested without a GPU. The device layer turns it into kp algorithms and
inserts the barriers its read/write sets call for.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

READ, WRITE, READ_WRITE = "read", "write", "read_write"


@dataclass(frozen=True)
class Limits:
    """What a plan may assume about the device."""

    subgroup_size: int = 32
    max_workgroups: int = 65535  # maxComputeWorkGroupCount[0]
    max_storage_buffer_range: int = 2**27
    local_size: int = 256  # workgroup width the plans use (a test forces a smaller one)
    max_shared_memory: int = 32768
    float_atomic_add: bool = False  # native float32 atomicAdd on storage buffers is enabled
    # Loop iterations an invocation may run in total, over all its loops, before the driver
    # ends them (lavapipe: 65535); 0 = no limit. Plans keep every invocation below it.
    max_loop_iterations: int = 0


@dataclass(frozen=True)
class Scratch:
    """A device buffer owned by the compiled operator (never read back).

    With `words` (uint32), it is a constant table uploaded once when the operator is compiled
    (e.g. per-axis index tables computed on the host in exact float32); without, its contents
    are undefined until a dispatch writes them.
    """

    name: str
    nbytes: int
    words: Optional[np.ndarray] = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Dispatch:
    """One kernel launch. `bindings` are (buffer name, access) in binding order; names refer to
    the descriptor's tensor fields or to the plan's scratch buffers. Constants are uint32 words
    (floats bit-cast with `f32`): kp sends Python lists as float32, so they never leave here as
    lists."""

    kernel: str
    bindings: Tuple[Tuple[str, str], ...]
    workgroups: int
    spec_constants: Tuple[int, ...] = ()
    push_constants: Tuple[int, ...] = ()

    @property
    def reads(self):
        return tuple(n for n, a in self.bindings if a in (READ, READ_WRITE))

    @property
    def writes(self):
        return tuple(n for n, a in self.bindings if a in (WRITE, READ_WRITE))


@dataclass(frozen=True)
class Plan:
    dispatches: Tuple[Dispatch, ...]
    scratch: Tuple[Scratch, ...] = field(default=())


def f32(value: float) -> int:
    """The bit pattern of a float32, for push and specialization constants."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def grid(count: int, per_workgroup: int, limits: Limits) -> int:
    """Workgroups for a grid-stride loop over `count` items: enough to cover them, capped at
    the device limit (the loop covers the rest)."""
    return max(1, min(math.ceil(count / per_workgroup), limits.max_workgroups))


def right_align(values, width: int, fill: int):
    """Pad a per-dimension tuple on the left to `width` entries (kernels index 8 dimensions)."""
    values = tuple(values)
    return (fill,) * (width - len(values)) + values
