"""RANDOM_GENERATOR's parts of its operator-table record (operators.py): the case generator, the
descriptor of a case and its inverse, and the examples of valid and invalid Type for the
descriptor fuzzing. Nothing here touches a device."""

from __future__ import annotations

import numpy as np

from .operator_record import Case, packed
from .ops.random_generator import RandomGeneratorDesc, RandomGeneratorType
from .tensor import DataType, TensorDesc

# Counters where carries happen: low words near 2^32 (a carry into s1 and beyond), and the
# whole counter near 2^64 and 2^128 (wrapping to 0).
_COUNTER_EDGES = ((0xFFFFFFF0, 0, 0, 0), (0xFFFFFFFE, 0xFFFFFFFF, 0, 0),
                  (0xFFFFFFFD, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF))
_GENERATOR_TYPES = ("philox_4x32_10", RandomGeneratorType.PHILOX_4X32_10, 0)


def random_generator_case(rng, shape, dtype) -> Case:
    """A random state (uniform words, or a counter just below a carry into the next word, 2^64
    or 2^128, with a random key) and output sizes `shape`; Type as a name, a member or 0."""
    state = rng.integers(0, 2**32, 6, dtype=np.uint64).astype(np.uint32)
    edge = int(rng.integers(len(_COUNTER_EDGES) + 1))
    if edge < len(_COUNTER_EDGES):
        state[:4] = _COUNTER_EDGES[edge]
    kwargs = dict(type=_GENERATOR_TYPES[int(rng.integers(len(_GENERATOR_TYPES)))])
    return Case((state, tuple(shape)), kwargs,
                label=f"uint32 {list(shape)}, counter {int(state[3]):08x}..{int(state[0]):08x}")


def random_generator_describe(case):
    state, sizes = case.args
    return RandomGeneratorDesc(packed(state), TensorDesc(DataType.UINT32, sizes), packed(state),
                               case.kwargs.get("type", "philox_4x32_10"))


def random_generator_call(desc, values):
    return (values["input_state_tensor"], desc.output_tensor.sizes), dict(type=desc.type)


def random_generator_parameters(rank):
    return {"type": (list(_GENERATOR_TYPES), ["philox_4x32_7", 1, 0.0, None])}
