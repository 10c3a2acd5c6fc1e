"""Kernel plans: which kernels an operator runs, on which buffers, with which constants.

A plan is pure data, computed from a descriptor and the device's limits without touching the
device, so it can be tested without a GPU. It names kernels' constants, bindings and push
constants, checked against the kernels' interfaces as it is built; the device layer turns it
into kp algorithms (kernels.py resolves the names) and inserts the barriers its read/write sets
call for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import kernels
from .kernels import READ, READ_WRITE, WRITE, float_word  # noqa: F401 (re-exported for the plans)

if TYPE_CHECKING:
    from .tensor import TensorDesc


@dataclass(frozen=True)
class Limits:
    """What a plan may assume about the device. Limits are part of the one-call caches' keys
    (one_call_cache.py), so a change of any (through a PYVKGRAD_ variable) plans problems anew."""

    subgroup_size: int = 32  # the device's (ResampleGrad's walk pads its columns to it)
    max_workgroups: int = 65535  # maxComputeWorkGroupCount[0]
    # The largest buffer a kernel may bind (Device.max_buffer_bytes). Here so that a cached
    # one-call problem is not reused under a lower limit, which must cut it into pieces
    # (tests/test_operators.py::test_beyond_the_buffer_limit); plans read it only to skip an
    # optional scratch buffer that would pass it (max pooling's winners).
    max_storage_buffer_range: int = 2**27
    local_size: int = 256  # workgroup width the plans use (a test forces a smaller one)
    # The widest workgroup a plan may choose for one kernel: the device's, a power of two;
    # local_size where PYVKGRAD_LOCAL_SIZE forces that.
    max_local_size: int = 256
    float_atomic_add: bool = False  # native float32 atomicAdd on storage buffers is enabled
    # Loop iterations an invocation may run in total, over all its loops, before the driver
    # ends them (lavapipe: 65535); 0 = no limit. Plans keep every invocation below it.
    max_loop_iterations: int = 0
    # The device runs a workgroup as a loop over its SIMD groups on CPU threads (lavapipe), so
    # barriers and idle lanes cost time: kernels that reduce in shared memory take one
    # subgroup a workgroup there, where PYVKGRAD_LOCAL_SIZE does not force a width.
    narrow_reductions: bool = False
    # The device's compiler leaves short fixed loops rolled and indexes their local arrays
    # through memory, lane by lane (llvmpipe): kernels whose loops index arrays by the loop's
    # counter take [[unroll]] copies of them there (the same bits; on an H200 the copies were
    # slower).
    unroll_loops: bool = False
    # The kernels that convert to float16 run their rte16 SPIR-V, which fixes those
    # conversions to round to nearest even (DeviceContext.float16_rte; the same bits).
    float16_rte: bool = False

    def __post_init__(self) -> None:
        # A width that is a power of two is a multiple of any subgroup size (Vulkan's are
        # powers of two) or lies within one subgroup, and splits into the power-of-two lane
        # groups the plans make (the exact sums' channel slots: LK channels by WG / LK lanes).
        for name in ("local_size", "max_local_size"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1 and value & (value - 1) == 0):
                raise ValueError(f"Limits: {name} must be a power of two (workgroups of whole "
                                 f"subgroups): expected 1, 2, 4, ..., got {value!r}")


class OperatorDesc:
    """What every operator descriptor declares, once (a frozen dataclass subclassing this,
    its tensor fields first, in DirectML's order, then its other fields):

    - OPERATOR: DirectML's name without `DML_OPERATOR_` (`ACTIVATION_RELU_GRAD`); its
      snake_case names the module, kernels, oracle and one-call function;
    - IN_PLACE: output field -> the input fields it may share one tensor with (identical
      descriptors only: every kernel reads an element's inputs before writing its outputs);
    - INDEPENDENT_AXES: in words, the axes along which `independent_axes` may cut (for the
      error when no cut makes a problem fit the device's buffers);
    - tensor_fields(): ((field, (TensorDesc, access)), ...) in DirectML's order;
    - independent_axes(): the axes along which outputs depend only on the same slice of the
      inputs, so the one-call functions may cut a problem too large for one buffer there
      (cut_candidates(): a superset from sizes alone, checked first);
    - plan(limits): the Plan, pure data (no device work).
    """

    OPERATOR: ClassVar[str] = ""
    IN_PLACE: ClassVar[Mapping[str, Tuple[str, ...]]] = {}
    INDEPENDENT_AXES: ClassVar[str] = "no axis"

    def tensor_fields(self) -> Tuple[Tuple[str, Tuple["TensorDesc", str]], ...]:
        raise NotImplementedError

    def independent_axes(self) -> Tuple[int, ...]:
        return ()

    def cut_candidates(self) -> Tuple[int, ...]:
        """The axes `independent_axes` may name, from sizes alone (a superset): the one-call
        driver refuses a problem that no cut along them makes fit before it asks
        `independent_axes`, which may cost work along each axis."""
        return self.independent_axes()

    def plan(self, limits: "Limits") -> "Plan":
        raise NotImplementedError


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
    """One kernel launch, everything by name and checked against the kernel's interface (the
    manifest tools/build_shaders.py reads from the SPIR-V) when it is built, so a plan that
    disagrees with its kernel fails at plan time, naming the kernel and the name.

    bindings: kernel binding name -> buffer name, a descriptor tensor field or one of the
      plan's scratch buffers ({"x": "input_tensor", ...}). Access (read, write or both) is the
      kernel's: `readonly`/`writeonly` in its GLSL.
    constants: specialization constants by name ({"WG": 256, "EPSILON": 1e-5, ...}); a
      per-dimension group NAME0..NAME7 is passed as one name with a tuple,
      "X_STRIDES": (8 values). bool, uint (int) or float (Python float) as the kernel declares.
    push: push constants by name ({"count": n}).
    Mappings are stored as tuples of (name, value) pairs; `kernels.specialization`,
    `kernels.binding_order` and `push_constants` turn them into what kp takes.
    """

    kernel: str
    bindings: Tuple[Tuple[str, str], ...]
    workgroups: int
    constants: Tuple[Tuple[str, object], ...] = ()
    push: Tuple[Tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for name in ("bindings", "constants", "push"):
            object.__setattr__(self, name, kernels.as_pairs(getattr(self, name)))
        kernels.check(self.kernel, self.constants, self.bindings, self.push)

    def constant(self, name: str) -> object:
        """The value passed for constant (or group) `name`."""
        return dict(self.constants)[name]

    @property
    def push_constants(self) -> Tuple[int, ...]:
        """The push-constant words, in the kernel's block order."""
        return kernels.push_words(self.kernel, self.push)

    @property
    def reads(self) -> Tuple[str, ...]:
        access = kernels.interface(self.kernel).access
        return tuple(buf for b, buf in self.bindings if access[b] in (READ, READ_WRITE))

    @property
    def writes(self) -> Tuple[str, ...]:
        access = kernels.interface(self.kernel).access
        return tuple(buf for b, buf in self.bindings if access[b] in (WRITE, READ_WRITE))


@dataclass(frozen=True)
class Plan:
    """The dispatches of an operator, in order, and its scratch buffers. With `tensors` (the
    descriptor's tensor fields), every binding must name one of them or a scratch buffer."""

    dispatches: Tuple[Dispatch, ...]
    scratch: Tuple[Scratch, ...] = field(default=())
    tensors: Tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.tensors:
            known = set(self.tensors) | {s.name for s in self.scratch}
            for d in self.dispatches:
                for binding, buffer in d.bindings:
                    if buffer not in known:
                        raise kernels.InterfaceError(
                            f"kernel {d.kernel}: binding {binding} names buffer {buffer!r}, "
                            f"which is neither a tensor field nor a scratch buffer of the plan "
                            f"({sorted(known)})")


# Iterations below `Limits.max_loop_iterations` a plan leaves unused: the loops it does not
# count (a workgroup's barriers, the driver's own).
LOOP_MARGIN = 64


def grid(count: int, per_workgroup: int, limits: Limits) -> int:
    """Workgroups for a grid-stride loop over `count` items: enough to cover them, capped at
    the device limit (the loop covers the rest)."""
    return max(1, min(math.ceil(count / per_workgroup), limits.max_workgroups))


def grid_slices(count: int, per_workgroup: int, limits: Limits, loops_per_item: int = 1,
                loops_per_invocation: int = 0, items_per_invocation: int = 1
                ) -> Tuple[Tuple[int, int, int], ...]:
    """The dispatches of a grid-stride loop over `count` items, as (first, end, workgroups): the
    items [first, end) in `workgroups` of `per_workgroup` items a pass. One, over all items in
    `grid`'s workgroups, unless the device ends long loops (`limits.max_loop_iterations`)
    before an invocation would have run its share: an item costs `loops_per_item` iterations
    (the grid loop's one, and for each loop the item runs, its iterations plus one: lavapipe
    counts the test that ends a loop too; at most, where they vary), and then every dispatch
    takes as many items as keep each invocation below the limit, the next starting where it
    ends (a kernel takes `first` as a push constant: GRID_STRIDE_LOOP_FROM).
    `loops_per_invocation`: iterations an invocation runs once, before its items; with
    `items_per_invocation` > 1 the grid has that many times fewer invocations (where the items
    fill it), for a kernel with such work to share among its items."""
    per_pass = per_workgroup * items_per_invocation
    workgroups = grid(count, per_pass, limits)
    lanes = workgroups * per_workgroup
    budget = limits.max_loop_iterations - LOOP_MARGIN - loops_per_invocation
    if not limits.max_loop_iterations or -(-count // lanes) * loops_per_item <= budget:
        return ((0, count, workgroups),)
    span = lanes * max(1, budget // loops_per_item)  # items of one dispatch
    return tuple((first, min(first + span, count),
                  grid(min(span, count - first), per_pass, limits))
                 for first in range(0, count, span))


def right_align(values: Sequence[int], width: int, fill: int) -> Tuple[int, ...]:
    """Pad a per-dimension tuple on the left to `width` entries (kernels index 8 dimensions)."""
    values = tuple(values)
    return (fill,) * (width - len(values)) + values
