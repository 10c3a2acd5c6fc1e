"""RANDOM_GENERATOR: the specification's known answers, sizes and layouts that break kernels,
the state's carries and wraps, in place and without an output state, errors, and the same bits
under other workgroup and subgroup widths; the operator table's tests cover the rest."""

import dataclasses
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, RandomGeneratorDesc, RandomGeneratorType, TensorDesc, reference
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.plan import LOOP_MARGIN, Limits
from pyvkgrad.ops import random_generator as random_generator_module
from cases import BEYOND_WORKGROUP_LIMIT, EDGE_COUNTS, SHAPES_BY_RANK
from test_environment import SUBPROCESS_CWD

U32, F32 = DataType.UINT32, DataType.FLOAT32
STATE = TensorDesc(U32, (1, 1, 1, 6))  # DirectML's Sizes {1, 1, 1, 6}


def words(text):
    return np.array([int(w, 16) for w in text.split()], np.uint32)


ONES = "ffffffff " * 6
# (state s0..s5, E, output, new state): Random123's known-answer vectors (KAT) and the
# specification's worked examples (RG-1 ten words, RG-2 a carry from s1 into s2, RG-3 a
# partial block).
KNOWN = {
    "KAT-1": ("0 0 0 0 0 0", 4, "6627e8d5 e169c58d bc57ac4c 9b00dbd8", "1 0 0 0 0 0"),
    "KAT-2": (ONES, 4, "408f276d 41c83b0e a20bc7c6 6d5451fd", "0 0 0 0 ffffffff ffffffff"),
    "KAT-3": ("243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0", 4,
              "d16cfe09 94fdcceb 5001e420 24126ea1",
              "243f6a89 85a308d3 13198a2e 03707344 a4093822 299f31d0"),
    "RG-1": ("0 0 0 0 12345678 9abcdef0", 10,
             "0279b337 ecb5bd8d e611c4f6 44ece875 eb897a36 4fcdf6b6 fba23d8c 6eed5b47 "
             "207b164b 5d52b9ca", "3 0 0 0 12345678 9abcdef0"),
    "RG-2": ("fffffffe ffffffff 0 0 1 2", 9,
             "d21fe785 2457d16f b0dc43f6 4fb31d89 917bce08 bfd2df9c 2cd1335e 0ff71127 f0c38cd9",
             "1 0 1 0 1 2"),
    "RG-3": ("0 0 0 0 0 0", 5, "6627e8d5 e169c58d bc57ac4c 9b00dbd8 f8e4cca4", "2 0 0 0 0 0"),
}


@pytest.mark.parametrize("name", KNOWN)
def test_the_oracle_gives_the_known_answers(name):
    state, count, output, new_state = KNOWN[name]
    got, got_state = reference.random_generator(words(state), (count,))
    assert got.dtype == got_state.dtype == np.uint32
    np.testing.assert_array_equal(got, words(output))
    np.testing.assert_array_equal(got_state, words(new_state))


@pytest.mark.parametrize("name", KNOWN)
def test_the_device_gives_the_known_answers(device, name):
    state, count, output, new_state = KNOWN[name]
    got, got_state = pyvkgrad.random_generator(words(state).reshape(1, 1, 1, 6), (count,),
                                               device=device)
    np.testing.assert_array_equal(got, words(output))
    np.testing.assert_array_equal(got_state, words(new_state).reshape(1, 1, 1, 6))


def test_the_pages_counter_example(device):
    """DirectML's page: 3*3*20*7219 elements advance 0x48656c6c'6f46726f'6d536561'74746c65 by
    ceil(1299420 / 4) = 324855 blocks, to ...'7479615c (the page prints the counter minus
    324855, ...'746f776e: a typo)."""
    state = np.array([0x74746c65, 0x6d536561, 0x6f46726f, 0x48656c6c, 7, 9], np.uint32)
    want = np.array([0x7479615c, 0x6d536561, 0x6f46726f, 0x48656c6c, 7, 9], np.uint32)
    sizes = (3, 3, 20, 7219)
    np.testing.assert_array_equal(reference.random_generator(state, sizes)[1], want)
    got, got_state = pyvkgrad.random_generator(state, sizes, device=device)
    np.testing.assert_array_equal(got_state, want)
    np.testing.assert_array_equal(got, reference.random_generator(state, sizes)[0])


# Counters below a carry into s1, into s2 and s3 (2^64), and the 2^128 wrap.
EDGE_STATES = [
    (0xFFFFFFFF, 0, 0, 0, 1, 2),
    (0xFFFFFFFC, 0xFFFFFFFF, 0, 0, 0xDEADBEEF, 0),
    (0xFFFFFFFD, 0xFFFFFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 3, 4),
    (0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 5),
]


@pytest.mark.parametrize("state", EDGE_STATES, ids=lambda s: f"{s[3]:x}.{s[2]:x}.{s[1]:x}.{s[0]:x}")
def test_sizes_and_carries(device, rng, state):
    """Element counts around block, subgroup and workgroup widths and primes, from counters
    just below each word's carry and the 2^128 wrap: the oracle's bits and new state."""
    state = np.array(state, np.uint32)
    for count in sorted(set(EDGE_COUNTS) | {4, 5, 8, 9, 4093, 65537}):
        got = pyvkgrad.random_generator(state, (count,), device=device)
        want = reference.random_generator(state, (count,))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"{count} elements")


def test_the_state_advance_carries_across_words():
    state = np.array([0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 1, 2], np.uint32)
    np.testing.assert_array_equal(reference.random_generator(state, (9,))[1],
                                  [2, 0, 0, 0, 1, 2])  # C + 3 wraps past 2^128



MARK = 0xA5A5A5A5


def run_compiled(device, desc, state, limits=None, in_place=False):
    """Compile and run `desc` on `state`, the output bound to a buffer of the words its
    descriptor spans, holding MARK: (the output's elements, its buffer, the new state)."""
    op = device.compile(desc, limits)
    y = desc.output_tensor
    state_tensor = device.empty(desc.input_state_tensor)
    state_tensor.write(state.reshape(desc.input_state_tensor.sizes))
    tensors = dict(input_state_tensor=state_tensor,
                   output_tensor=device.upload(np.full(y.element_span, MARK, np.uint32)))
    if desc.output_state_tensor is not None:
        tensors["output_state_tensor"] = (state_tensor if in_place
                                          else device.empty(desc.output_state_tensor))
    op(**tensors)
    buffer = tensors["output_tensor"].numpy()
    elements = np.lib.stride_tricks.as_strided(buffer, y.sizes, [4 * s for s in y.element_strides])
    new = tensors.get("output_state_tensor")
    return elements, buffer, (None if new is None else new.numpy().reshape(-1))


def check(device, desc, state, limits=None, in_place=False):
    elements, buffer, new = run_compiled(device, desc, state, limits, in_place)
    want, want_state = reference.random_generator(state, desc.output_tensor.sizes)
    np.testing.assert_array_equal(elements, want)
    y = desc.output_tensor
    addressed = np.zeros(buffer.size, bool)
    np.lib.stride_tricks.as_strided(addressed, y.sizes, list(y.element_strides))[...] = True
    assert (buffer[~addressed] == MARK).all(), "a word outside the output's elements changed"
    if desc.output_state_tensor is not None:
        np.testing.assert_array_equal(new, want_state.reshape(-1))


def padded_strides(sizes, rng):
    """Row-major strides with random padding, the axes in a random memory order."""
    strides, step = [0] * len(sizes), 1
    for axis in rng.permutation(len(sizes))[::-1]:
        strides[axis] = step
        step *= sizes[axis] + int(rng.integers(0, 2))
    return tuple(strides)


@pytest.mark.parametrize("shape", SHAPES_BY_RANK, ids=lambda s: f"rank{len(s)}")
def test_every_rank_strided(device, rng, shape):
    """Ranks 1-8, the output packed and padded in a random axis order (the logical row-major
    index decides each element's word, not its memory order), the state strided: the oracle's
    bits, and only the descriptor's elements written."""
    state = rng.integers(0, 2**32, 6, dtype=np.uint64).astype(np.uint32)
    for strides in (None, padded_strides(shape, rng)):
        for state_desc in (STATE, TensorDesc(U32, (6,), (3,))):
            desc = RandomGeneratorDesc(state_desc, TensorDesc(U32, shape, strides),
                                       TensorDesc(U32, (1,) * (state_desc.rank - 1) + (6,)))
            check(device, desc, state)


@pytest.mark.parametrize("layout", ["packed", "strided"])
def test_one_lane_under_the_loop_limit(device, layout):
    """More blocks than one invocation may loop over: the grid-stride loop is cut into
    dispatches each starting where the last ended (push constant `first`), every block
    written, and the new state after all of them, in place too."""
    tiny = dataclasses.replace(device.limits, max_workgroups=1, local_size=1, max_local_size=1)
    count = 4 * 70000 + 3  # 70001 blocks, the last partial
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (count,),
                                                 None if layout == "packed" else (2,)), STATE)
    plan = desc.plan(tiny)
    if tiny.max_loop_iterations:
        assert [d.kernel for d in plan.dispatches] == ["random_generator"] * 2 + [
            "random_generator_state"]
        assert [dict(d.push)["first"] for d in plan.dispatches[:2]] == [0, 65535 - 64]
    state = np.array(EDGE_STATES[1], np.uint32)
    check(device, desc, state, tiny)
    check(device, desc, state, tiny, in_place=True)


def blocks_per_invocation():
    """Blocks an invocation takes where the blocks fill the grid: the plan's blocks a pass
    times its passes."""
    return (random_generator_module.BLOCKS_PER_INVOCATION
            * random_generator_module.PASSES_PER_INVOCATION)


def test_beyond_the_workgroup_limit_plan():
    """Blocks beyond 65535 workgroups of 256 invocations of the plan's blocks each: a
    grid-stride loop in 65535 workgroups; the largest output (2^32 - 1 elements, 2^30 blocks)
    in one dispatch without a loop limit; and under lavapipe's, a narrow grid's dispatches
    cover every block once."""
    per_invocation = blocks_per_invocation()
    for count in (4 * per_invocation * BEYOND_WORKGROUP_LIMIT, 2**32 - 1):
        desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (count,)), STATE)
        blocks = -(-count // 4)
        (main,) = desc.plan(Limits()).dispatches  # it stores the new state too
        assert main.workgroups == 65535
        assert dict(main.push) == dict(count=blocks, elements=count, first=0)
        assert dict(main.constants)["STATE_HERE"]
        narrow = Limits(max_loop_iterations=65535, max_workgroups=64, local_size=1,
                        max_local_size=1)
        sliced = desc.plan(narrow).dispatches[:-1]
        spans = [(dict(d.push)["first"], dict(d.push)["count"]) for d in sliced]
        assert len(spans) > 1 and spans[0][0] == 0 and spans[-1][1] == blocks
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
def test_every_blocks_per_invocation(device, monkeypatch, blocks):
    """The kernel's BLOCKS (blocks an invocation computes a pass, at the grid's stride) from 1
    to 4: the oracle's bits for counts where a pass's later blocks fall past the end, packed
    and strided, in narrow grids (several passes; dispatches cut under a loop limit) and the
    default one; only the descriptor's words written."""
    monkeypatch.setattr(random_generator_module, "BLOCKS_PER_INVOCATION", blocks)
    state = np.array(EDGE_STATES[3], np.uint32)
    narrow = dataclasses.replace(device.limits, max_workgroups=3, local_size=4,
                                 max_local_size=4)
    cut = dataclasses.replace(narrow, max_loop_iterations=LOOP_MARGIN + 7)  # 7 blocks a lane
    cuts = 0
    for count in (1, 5, 4 * 12 * blocks + 3, 4 * 257 + 2, 65537):
        for strides in (None, (2,)):
            desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (count,), strides), STATE)
            assert dict(desc.plan(narrow).dispatches[0].constants)["BLOCKS"] == blocks
            check(device, desc, state, narrow)
            check(device, desc, state)
            cuts += len(desc.plan(cut).dispatches) > 2
            check(device, desc, state, cut)
            check(device, desc, state, cut, in_place=True)
    assert cuts >= 4  # the two largest counts, packed and strided, in several dispatches


def test_narrow_grids_on_the_device(device):
    """BEYOND_WORKGROUP_LIMIT elements in 2 workgroups of 4 lanes (grid-stride, several
    dispatches under lavapipe's loop limit) and in the default grid."""
    state = np.array(EDGE_STATES[2], np.uint32)
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (BEYOND_WORKGROUP_LIMIT,)), STATE)
    check(device, desc, state,
          dataclasses.replace(device.limits, max_workgroups=2, local_size=4, max_local_size=4))
    check(device, desc, state)


def test_in_place_state_continues_the_stream(device):
    """The new state over the input state (ONNX Runtime's binding), executed twice in one
    recording: the second output continues the first's stream, and the state ends advanced
    by both (each execute reads the state before its new state is stored)."""
    state = np.array(EDGE_STATES[3], np.uint32)
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (4, 253)), STATE)  # 253 whole blocks
    op = device.compile(desc)
    s = device.empty(STATE)
    s.write(state.reshape(1, 1, 1, 6))
    first, second = device.empty(desc.output_tensor), device.empty(desc.output_tensor)
    with device.record() as rec:
        rec.execute(op, input_state_tensor=s, output_tensor=first, output_state_tensor=s)
        rec.execute(op, input_state_tensor=s, output_tensor=second, output_state_tensor=s)
    both, want_state = reference.random_generator(state, (2, 4, 253))
    np.testing.assert_array_equal(first.numpy(), both[0])
    np.testing.assert_array_equal(second.numpy(), both[1])
    np.testing.assert_array_equal(s.numpy().reshape(-1), want_state)


def in_place_executes(device, op, desc, state, executes):
    """A recording of `executes` executes of `op` with the state in place (one state tensor
    holding `state`), each into an output of its own: (the recording, the state tensor, the
    outputs)."""
    s = device.empty(desc.input_state_tensor)
    s.write(state.reshape(desc.input_state_tensor.sizes))
    outputs = [device.empty(desc.output_tensor) for _ in range(executes)]
    with device.record() as rec:
        for y in outputs:
            rec.execute(op, input_state_tensor=s, output_tensor=y, output_state_tensor=s)
    return rec, s, outputs


def one_dispatch_limits(device, local_size):
    """The device's limits with `local_size` lanes a workgroup, where the dispatch may store the
    state itself (not narrow_reductions, which a CPU device has)."""
    return dataclasses.replace(device.limits, local_size=local_size, narrow_reductions=False,
                               max_local_size=max(local_size, device.limits.max_local_size))


@pytest.mark.parametrize("state_here", [True, False])
@pytest.mark.parametrize("local_size", [1, 4, 64])
def test_in_place_over_many_workgroups_and_replays(device, monkeypatch, local_size, state_here):
    """The state in place over up to 251 workgroups (1001 blocks): three executes in a
    recording, replayed twice, continue one stream (every workgroup reads the state before the new state is
    stored, in every call), whether the one dispatch stores it (the last workgroup to take a
    ticket; the ticket word back to 0 for the next execute and replay) or a second one."""
    monkeypatch.setattr(random_generator_module, "STATE_HERE", state_here)
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (4 * 1001 - 2,)), STATE)
    op = device.compile(desc, one_dispatch_limits(device, local_size))
    kernels = [d.kernel for d in op.plan.dispatches]
    assert (kernels[-1] == "random_generator_state") == (not state_here or len(kernels) > 2)
    state = np.array(EDGE_STATES[2], np.uint32)
    rec, s, outputs = in_place_executes(device, op, desc, state, 3)
    for call in range(3):
        if call:
            rec.replay()
        # each execute draws 1001 blocks (the last partial): execute n starts 1001 n blocks on
        for k, y in enumerate(outputs):
            _, start = reference.random_generator(state, (4 * 1001 * (3 * call + k),))
            want, _ = reference.random_generator(start.reshape(-1), desc.output_tensor.sizes)
            np.testing.assert_array_equal(y.numpy(), want)
        _, want_state = reference.random_generator(state, (1001 * 3 * (call + 1) * 4,))
        np.testing.assert_array_equal(s.numpy().reshape(-1), want_state.reshape(-1))


def test_in_place_over_twenty_thousand_workgroups(device):
    """The one dispatch storing the state (STATE_HERE) in place over 20,000 workgroups of one
    invocation, executed 12 times in one recording: every output continues the stream and
    the state ends advanced by all of them. (A kernel whose last workgroup by index, rather
    than by ticket, stored the state failed this on lavapipe's threads where the smaller
    cases passed.)"""
    per_invocation = blocks_per_invocation()
    n = 4 * per_invocation * 20000
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (n,)), STATE)
    op = device.compile(desc, one_dispatch_limits(device, 1))
    (dispatch,) = op.plan.dispatches
    assert dict(dispatch.constants)["STATE_HERE"] and dispatch.workgroups == 20000
    state = np.array(EDGE_STATES[1], np.uint32)
    _, s, outputs = in_place_executes(device, op, desc, state, 12)
    stream, want_state = reference.random_generator(state, (len(outputs), n))
    for k, y in enumerate(outputs):
        np.testing.assert_array_equal(y.numpy(), stream[k], err_msg=f"execute {k}")
    np.testing.assert_array_equal(s.numpy().reshape(-1), want_state.reshape(-1))


def test_two_states_in_one_recording(device):
    """One compiled operator executed on two states in one recording, in place and into other
    tensors: each output and new state its own (the executes that store a state in the one
    dispatch share its ticket word, so the recording orders them); without an output state,
    executes into other outputs need no barrier between them."""
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (4 * 1001 - 2,)), STATE)
    op = device.compile(desc, one_dispatch_limits(device, device.limits.local_size))
    (dispatch,) = op.plan.dispatches
    assert dict(dispatch.constants)["STATE_HERE"]
    states = [np.array(EDGE_STATES[k], np.uint32) for k in (0, 3)]
    for in_place in (True, False):
        inputs = [device.empty(STATE) for _ in states]
        for t, st in zip(inputs, states):
            t.write(st.reshape(1, 1, 1, 6))
        news = inputs if in_place else [device.empty(STATE) for _ in states]
        outputs = [device.empty(desc.output_tensor) for _ in states]
        with device.record() as rec:
            for args in zip(inputs, outputs, news):
                rec.execute(op, **dict(zip(("input_state_tensor", "output_tensor",
                                            "output_state_tensor"), args)))
        for st, y, new in zip(states, outputs, news):
            want, want_state = reference.random_generator(st, desc.output_tensor.sizes)
            np.testing.assert_array_equal(y.numpy(), want)
            np.testing.assert_array_equal(new.numpy().reshape(-1), want_state.reshape(-1))
    plain = device.compile(RandomGeneratorDesc(STATE, TensorDesc(U32, (400,))))
    state = device.empty(STATE)
    state.write(states[0].reshape(1, 1, 1, 6))
    with device.record() as rec:
        for _ in range(2):
            rec.execute(plain, input_state_tensor=state,
                        output_tensor=device.empty(TensorDesc(U32, (400,))))
    assert "barrier" not in rec.labels


@pytest.mark.parametrize("in_place", [True, False])
def test_a_strided_state_stored_by_the_one_dispatch(device, in_place):
    """A state of stride 3 (its words among others), stored by the one dispatch, in place and
    not: the new state's words, and the words between them untouched."""
    strided = TensorDesc(U32, (6,), (3,))
    desc = RandomGeneratorDesc(strided, TensorDesc(U32, (4 * 257 + 3,)), strided)
    op = device.compile(desc, one_dispatch_limits(device, device.limits.local_size))
    (dispatch,) = op.plan.dispatches
    assert dict(dispatch.constants)["STATE_HERE"]
    state = np.array(EDGE_STATES[2], np.uint32)

    def marked(values):  # the state's 16 words: `values` at stride 3, MARK between
        t = device.empty(strided)
        words = t.storage.host_words("test")
        words[:16] = MARK
        words[0:16:3] = values
        t.storage.state.host_written()
        return t

    source = marked(state)
    new = source if in_place else marked(np.zeros(6, np.uint32))
    y = device.empty(desc.output_tensor)
    op(input_state_tensor=source, output_tensor=y, output_state_tensor=new)
    words = new.storage.host_words("test")[:16]
    assert (np.delete(words, np.arange(0, 16, 3)) == MARK).all()
    want, want_state = reference.random_generator(state, desc.output_tensor.sizes)
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(new.numpy(), want_state)


def test_a_cpu_device_stores_the_state_by_a_second_dispatch():
    """Where barriers cost a switch of CPU threads' SIMD groups (narrow_reductions), the
    state kernel follows the one dispatch; elsewhere the dispatch stores it."""
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (4 * 1001 - 2,)), STATE)
    assert [d.kernel for d in desc.plan(Limits(narrow_reductions=True)).dispatches] == [
        "random_generator", "random_generator_state"]
    (dispatch,) = desc.plan(Limits()).dispatches
    assert dict(dispatch.constants)["STATE_HERE"]


def test_without_an_output_state(device, rng):
    """OutputStateTensor None (DirectML's _Maybenull_): no state kernel, the output alone."""
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (5, 7)))
    assert [name for name, _ in desc.tensor_fields()] == ["input_state_tensor", "output_tensor"]
    assert [d.kernel for d in desc.plan(Limits()).dispatches] == ["random_generator"]
    check(device, desc, rng.integers(0, 2**32, 6, dtype=np.uint64).astype(np.uint32))


def test_the_type_field():
    desc = RandomGeneratorDesc(STATE, TensorDesc(U32, (4,)), None, "philox_4x32_10")
    assert desc.type is RandomGeneratorType.PHILOX_4X32_10
    assert RandomGeneratorDesc(STATE, TensorDesc(U32, (4,)), None, 0).type is desc.type


def test_inputs_are_not_modified(device):
    state = np.array(EDGE_STATES[0], np.uint32)
    before = state.copy()
    pyvkgrad.random_generator(state, (10,), device=device)
    np.testing.assert_array_equal(state, before)


# ---- errors ----

@pytest.mark.parametrize("fields, kind, message", [
    (dict(input_state_tensor=TensorDesc(F32, (1, 1, 1, 6))), TypeError,
     r"^RANDOM_GENERATOR: InputStateTensor.DataType must be UINT32: expected UINT32, got "
     r"FLOAT32"),
    (dict(input_state_tensor=TensorDesc(U32, (2, 3))), ValueError,
     r"InputStateTensor.Sizes must be 6 along the last dimension and 1 along the others: "
     r"expected \(1, 6\), got \(2, 3\)"),
    (dict(input_state_tensor=TensorDesc(U32, (5,))), ValueError, r"InputStateTensor.Sizes"),
    (dict(output_tensor=TensorDesc(F32, (4,))), TypeError, r"OutputTensor.DataType must be UINT32"),
    (dict(output_tensor=TensorDesc(U32, (4, 4), (1, 0))), ValueError,
     r"OutputTensor.Strides must not make output elements overlap"),
    (dict(output_state_tensor=TensorDesc(U32, (6,))), ValueError,
     r"OutputStateTensor.Sizes must equal InputStateTensor.Sizes"),
    (dict(output_state_tensor=TensorDesc(F32, (1, 1, 1, 6))), TypeError,
     r"OutputStateTensor.DataType must equal InputStateTensor.DataType"),
    (dict(output_state_tensor=TensorDesc(U32, (1, 1, 1, 6), (0, 0, 0, 0))), ValueError,
     r"OutputStateTensor.Strides must not make output elements overlap"),
    (dict(type="philox_4x32_7"), ValueError, r"^RANDOM_GENERATOR: Type is not supported"),
    (dict(type=1), ValueError, r"Type is not supported"),
    (dict(type=0.0), TypeError, r"Type must be a string or an enum value"),
    (dict(output_tensor=np.zeros(4, np.uint32)), TypeError, r"OutputTensor must be a TensorDesc"),
])
def test_descriptor_errors(fields, kind, message):
    valid = dict(input_state_tensor=STATE, output_tensor=TensorDesc(U32, (4,)),
                 output_state_tensor=STATE)
    with pytest.raises(kind, match=message):
        RandomGeneratorDesc(**dict(valid, **fields))


@pytest.mark.parametrize("args, kind, message", [
    ((np.zeros(6, np.float32), (4,)), TypeError,
     r"^RANDOM_GENERATOR: InputStateTensor has unsupported dtype: expected uint32, got float32"),
    ((np.zeros(6, np.int64), (4,)), TypeError, r"got int64"),
    ((np.zeros(7, np.uint32), (4,)), ValueError, r"InputStateTensor.Sizes must be 6"),
    ((np.zeros(6, np.uint32), (4, 0)), ValueError, r"OutputTensor.Sizes must all be at least 1"),
    ((np.zeros(6, np.uint32), (1,) * 9), ValueError,
     r"OutputTensor.DimensionCount is out of range: expected 1 to 8, got 9"),
    ((np.zeros(6, np.uint32), (2**16, 2**16)), ValueError, r"OutputTensor.Sizes hold too many"),
    ((np.zeros(6, np.uint32), (4.0,)), TypeError, r"output_sizes must hold integers"),
    ((np.zeros(6, np.uint32), (4,), "mt19937"), ValueError, r"Type is not supported"),
])
def test_one_call_errors_before_device_work(device, args, kind, message, monkeypatch):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    with pytest.raises(kind, match=message):
        pyvkgrad.random_generator(*args, device=device)


def test_bindings_that_may_not_share_a_tensor(device):
    """Only the output state over the input state (identical descriptors) may share."""
    u6 = TensorDesc(U32, (6,))
    op = device.compile(RandomGeneratorDesc(u6, u6, u6))
    a, b = device.empty(u6), device.empty(u6)
    with pytest.raises(ValueError, match="OutputTensor and InputStateTensor are bound to one"):
        op(input_state_tensor=a, output_tensor=a, output_state_tensor=b)
    with pytest.raises(ValueError, match="OutputTensor and OutputStateTensor are outputs bound"):
        op(input_state_tensor=a, output_tensor=b, output_state_tensor=b)
    strided = device.compile(RandomGeneratorDesc(u6, u6, TensorDesc(U32, (6,), (2,))))
    big = device.empty(TensorDesc(U32, (11,)))
    with pytest.raises(ValueError, match="may share a tensor only with an identical descriptor"):
        strided(input_state_tensor=big, output_tensor=b, output_state_tensor=big)


@pytest.mark.parametrize("name", ["activation_relu_grad", "resample_grad",
                                  "batch_normalization_grad",
                                  "batch_normalization_training_grad"])
def test_the_float_operators_refuse_uint32(device, name):
    """DataType.UINT32 exists for RANDOM_GENERATOR; every other operator stays float-only,
    in its descriptor and in its one-call function."""
    from pyvkgrad import operators
    record = operators.BY_NAME[name]
    case = record.make_case(np.random.default_rng(0), (2, 3), np.float32)
    desc = record.describe(case)
    changes = {n: TensorDesc(U32, d.sizes, d.strides) for n, (d, _) in desc.tensor_fields()}
    with pytest.raises(TypeError, match=f"^{record.OPERATOR}: .*DataType must be a float type: "
                                        f"expected FLOAT32 or FLOAT16, got UINT32"):
        dataclasses.replace(desc, **changes)
    uint = tuple(a.astype(np.uint32) if isinstance(a, np.ndarray) else a for a in case.args)
    with pytest.raises(TypeError, match="unsupported dtype: expected float32 or float16, got "
                                        "uint32"):
        record.run(operators.Case(uint, case.kwargs, case.options), device)


# ---- the same bits on other workgroup and subgroup widths ----

SAME_BITS = r"""
import hashlib
import numpy as np
import pyvkgrad
from pyvkgrad import DataType, RandomGeneratorDesc, TensorDesc
device = pyvkgrad.default_device()
digest = hashlib.sha256()
for count in (1, 5, 257, 4099, 70001):
    for s in ((0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 1, 2), (3, 1, 4, 1, 5, 9)):
        out, new = pyvkgrad.random_generator(np.array(s, np.uint32), (count,), device=device)
        digest.update(out.tobytes() + new.tobytes())
u = DataType.UINT32
desc = RandomGeneratorDesc(TensorDesc(u, (6,)), TensorDesc(u, (5, 31, 7), (1, 5 * 7 * 2, 5)))
s, y = device.upload(np.arange(6, dtype=np.uint32)), device.empty(TensorDesc(u, (31 * 70,)))
device.compile(desc)(input_state_tensor=s, output_tensor=y)
digest.update(y.numpy().tobytes())
print(device.info.subgroup_size, device.limits.local_size, digest.hexdigest())
"""


def test_the_same_bits_on_other_widths(device):
    """Default widths, PYVKGRAD_LOCAL_SIZE=32, and lavapipe's subgroups of 4 and 16
    (LP_NATIVE_VECTOR_WIDTH=128 / 512, read when the device is created: a fresh process
    each): one digest of outputs and states over sizes, carries and a strided output."""
    runs = {}
    for name, extra in (("default", {}), ("local 32", {"PYVKGRAD_LOCAL_SIZE": "32"}),
                        ("vector 128", {"LP_NATIVE_VECTOR_WIDTH": "128"}),
                        ("vector 512", {"LP_NATIVE_VECTOR_WIDTH": "512"})):
        res = subprocess.run([sys.executable, "-c", SAME_BITS], env=dict(os.environ, **extra),
                             cwd=SUBPROCESS_CWD, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        runs[name] = res.stdout.split()
    assert len({digest for _, _, digest in runs.values()}) == 1, runs
    assert runs["local 32"][1] == "32", runs
    if device.info.device_type == "cpu":  # lavapipe: the vector width sets the subgroup size
        assert {runs["vector 128"][0], runs["vector 512"][0]} == {"4", "16"}, runs
