"""DML_OPERATOR_RANDOM_GENERATOR: Philox 4x32-10 random bits from a counter and a key
(docs/semantics.md §9).

The InputStateTensor's six UINT32 words are the counter C = s0 + 2^32 s1 + 2^64 s2 + 2^96 s3
(s0 least significant) and the key (s4, s5). Element n of OutputTensor (its logical row-major
index, whatever its strides) is word n mod 4 of the Philox block of counter (C + floor(n/4))
mod 2^128; the OutputStateTensor, when given, receives ((C + ceil(E/4)) mod 2^128, s4, s5) for
E output elements. Integer arithmetic only: the same bits on every device.

Kernels: `random_generator`, a grid-stride loop over the blocks, BLOCKS_PER_INVOCATION at a
time, in a grid PASSES_PER_INVOCATION times smaller than that. An OutputStateTensor bound over
the InputStateTensor (in place, as ONNX Runtime binds it) may change only after every block
has read the state. Where one dispatch covers every block, it stores the new state itself,
from the workgroup that reads the state last (each workgroup takes a ticket from a scratch
word after reading: STATE_HERE). Where a loop limit splits the blocks into several
dispatches, and on a CPU device (`Limits.narrow_reductions`: the tickets' barriers cost more
than a dispatch there), `random_generator_state` (one invocation) follows them: the device
inserts a barrier between because it writes what they read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence, Tuple, Union

import numpy as np

from ..plan import (READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, Scratch, grid_slices,
                    right_align)
from ..tensor import (MAX_DIMENSIONS, MAX_ELEMENTS, DataType, TensorDesc, as_uint_tuple,
                      check_desc, check_output, check_rank, check_same, coalesce, enum_value,
                      fail, named_desc)
from . import _one_call

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "RANDOM_GENERATOR"
STATE_WORDS = 6  # the counter's four words and the key's two
WORDS_PER_BLOCK = 4  # one Philox 4x32 block
# Blocks an invocation computes a pass (the kernel's BLOCKS, 1 to 4: independent blocks'
# rounds interleave), and passes it makes at most (the grid has that many times fewer
# invocations, where the blocks fill it: a pass's stores overlap the next pass's rounds, and
# fewer workgroups take tickets). On an H200 one block and 8 passes was the best setting or
# within 3% of it at 16 MiB to 1 GiB, where 4 blocks in one pass was 2-9% slower
# (benchmarks/investigations/random_variants.py, results/h200-2026-12-02-random-passes).
BLOCKS_PER_INVOCATION = 1
PASSES_PER_INVOCATION = 8
# One dispatch over every block stores the new state itself (the kernel's STATE_HERE);
# False: always random_generator_state after it (benchmarks/investigations/random_variants.py).
STATE_HERE = True


class RandomGeneratorType(enum.IntEnum):
    """`DML_RANDOM_GENERATOR_TYPE` (DirectML's values)."""

    PHILOX_4X32_10 = 0


def _check_uint32(field: str, desc: TensorDesc) -> None:
    if desc.data_type != DataType.UINT32:
        fail(OPERATOR, f"{field}.DataType", "must be UINT32", "UINT32", desc.data_type.name,
             TypeError)


def _check_state(field: str, desc) -> TensorDesc:
    """A state tensor: UINT32, six elements along its last dimension, every other size 1."""
    desc = check_desc(OPERATOR, field, desc)
    _check_uint32(field, desc)
    if desc.sizes[-1] != STATE_WORDS or desc.element_count != STATE_WORDS:
        fail(OPERATOR, f"{field}.Sizes", "must be 6 along the last dimension and 1 along the "
             "others", (1,) * (desc.rank - 1) + (STATE_WORDS,), desc.sizes)
    return desc


@dataclass(frozen=True)
class RandomGeneratorDesc(OperatorDesc):
    """`DML_RANDOM_GENERATOR_OPERATOR_DESC`: InputStateTensor (UINT32, sizes (..., 1, 6), 1 to
    8 dimensions, any strides), OutputTensor (UINT32, 1 to 8 dimensions, any sizes and strides,
    not overlapping), OutputStateTensor (None, or the input state's sizes, not overlapping),
    Type (RandomGeneratorType or "philox_4x32_10")."""

    input_state_tensor: object
    output_tensor: object
    output_state_tensor: object = None
    type: object = RandomGeneratorType.PHILOX_4X32_10
    OPERATOR: ClassVar[str] = OPERATOR
    # ONNX Runtime binds one buffer as both states; the new state is stored after every read.
    IN_PLACE: ClassVar[dict] = {"output_state_tensor": ("input_state_tensor",)}
    INDEPENDENT_AXES: ClassVar[str] = ("no axis (an element's bits depend on its index in the "
                                       "whole output)")

    def __post_init__(self):
        state = _check_state("InputStateTensor", self.input_state_tensor)
        check_rank(OPERATOR, "InputStateTensor", state, 1, MAX_DIMENSIONS)
        y = check_desc(OPERATOR, "OutputTensor", self.output_tensor)
        check_rank(OPERATOR, "OutputTensor", y, 1, MAX_DIMENSIONS)
        _check_uint32("OutputTensor", y)
        check_output(OPERATOR, "OutputTensor", y)
        if self.output_state_tensor is not None:
            new = check_desc(OPERATOR, "OutputStateTensor", self.output_state_tensor)
            check_same(OPERATOR, "data_type", ("InputStateTensor", state),
                       ("OutputStateTensor", new))
            check_same(OPERATOR, "sizes", ("InputStateTensor", state),
                       ("OutputStateTensor", new))
            check_output(OPERATOR, "OutputStateTensor", new)
        object.__setattr__(self, "type", enum_value(
            OPERATOR, RandomGeneratorType, self.type, "Type",
            "'philox_4x32_10' (RandomGeneratorType.PHILOX_4X32_10)"))

    def tensor_fields(self):
        fields = (("input_state_tensor", (self.input_state_tensor, READ)),
                  ("output_tensor", (self.output_tensor, WRITE)))
        if self.output_state_tensor is not None:
            fields += (("output_state_tensor", (self.output_state_tensor, WRITE)),)
        return fields

    @property
    def blocks(self) -> int:
        """Philox blocks of the output, ceil(E / 4): what the state's counter advances by."""
        return -(-self.output_tensor.element_count // WORDS_PER_BLOCK)

    def plan(self, limits: Limits) -> Plan:
        y, wg = self.output_tensor, limits.local_size
        state_stride = self.input_state_tensor.element_strides[-1]
        sizes, (strides,) = coalesce(y.sizes, y.element_strides)
        blocks = BLOCKS_PER_INVOCATION
        constants = dict(WG=wg, PACKED=strides == (1,), STATE_STRIDE=state_stride,
                         SIZES=right_align(sizes, 8, 1), Y_STRIDES=right_align(strides, 8, 0),
                         BLOCKS=blocks)
        # A pass's rounds and stores are written out (no loop): the grid loop's iteration is
        # all an invocation counts, one per pass of `blocks` blocks (grid_slices counts one per
        # block: an overestimate, so the cuts stay under a loop limit).
        slices = grid_slices(self.blocks, wg, limits,
                             items_per_invocation=blocks * PASSES_PER_INVOCATION)
        # (Not where a workgroup's barrier costs a switch of CPU threads' SIMD groups:
        # lavapipe's 16 and 64 MiB rows took 30% longer with the tickets.)
        here = (STATE_HERE and self.output_state_tensor is not None and len(slices) == 1
                and not limits.narrow_reductions)
        new_state = self.output_state_tensor if here else None
        constants.update(STATE_HERE=here, NEW_STATE_STRIDE=(
            new_state.element_strides[-1] if new_state is not None else 1))
        # Not here: the kernel touches neither new_state nor tickets, so they are bound to the
        # output, which the dispatch writes anyway (a scratch buffer would be a write that the
        # recording must order between executes, and an upload at every compile).
        bindings = dict(state="input_state_tensor", y="output_tensor",
                        new_state="output_state_tensor" if here else "output_tensor",
                        tickets="tickets" if here else "output_tensor")
        scratch = (Scratch("tickets", 16, words=np.zeros(4, np.uint32)),) if here else ()
        dispatches = [Dispatch("random_generator", bindings, workgroups, constants=constants,
                               push=dict(count=end, elements=y.element_count, first=first))
                      for first, end, workgroups in slices]
        if self.output_state_tensor is not None and not here:
            dispatches.append(Dispatch(
                "random_generator_state",
                dict(state="input_state_tensor", new_state="output_state_tensor"), 1,
                constants=dict(WG=wg, STATE_STRIDE=state_stride,
                               NEW_STATE_STRIDE=self.output_state_tensor.element_strides[-1]),
                push=dict(blocks=self.blocks)))
        return Plan(tuple(dispatches), scratch,
                    tensors=tuple(n for n, _ in self.tensor_fields()))


def random_generator(input_state: np.ndarray, output_sizes: Sequence[int],
                     type: Union[str, RandomGeneratorType] = "philox_4x32_10", *,
                     device: DeviceLike = None) -> Tuple[np.ndarray, np.ndarray]:
    """(output, output_state) on the device: `output_sizes` uint32 Philox words from the state
    `input_state` (6 uint32 words, shaped (..., 1, 6)), and the state advanced past them,
    shaped like input_state."""
    sizes = as_uint_tuple(output_sizes, OPERATOR, "output_sizes")
    if not 1 <= len(sizes) <= MAX_DIMENSIONS:
        fail(OPERATOR, "OutputTensor.DimensionCount", "is out of range",
             f"1 to {MAX_DIMENSIONS}", len(sizes))
    if min(sizes) == 0:
        fail(OPERATOR, "OutputTensor.Sizes", "must all be at least 1", ">= 1", sizes)
    if np.prod(sizes, dtype=object) > MAX_ELEMENTS:
        fail(OPERATOR, "OutputTensor.Sizes", "hold too many elements", f"<= {MAX_ELEMENTS}",
             np.prod(sizes, dtype=object))

    def describe(d, dev):
        state = d["input_state"]
        output = named_desc(OPERATOR, "OutputTensor", DataType.UINT32, sizes)
        desc = RandomGeneratorDesc(state, output, state.with_sizes(state.sizes), type)
        return desc, {"output": (sizes, 4), "output_state": (np.shape(input_state), 4)}

    # No rerun: an element's bits depend on its place in the whole output, so a problem
    # beyond the buffer limit is refused, not cut (INDEPENDENT_AXES).
    output, output_state = _one_call.run(OPERATOR, device, (sizes, type),
                                         {"input_state": input_state}, describe, None,
                                         data_types=(DataType.UINT32,))
    return output, output_state
