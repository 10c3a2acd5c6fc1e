"""The oracle of RANDOM_GENERATOR (docs/semantics.md §9): Philox 4x32-10 in integer arithmetic
only (uint64 holds the 32x32-bit products exactly, Python integers the 128-bit counter); uint32
results, no float."""

import numpy as np

from ._reference_common import _name

_PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)
_WORD = 0xFFFFFFFF


def philox_4x32_10(counters, key):
    """Philox 4x32-10 of each row of `counters` ((n, 4) words, word 0 least significant) with
    `key` (k0, k1): ten rounds, the key bumped by the Weyl constants before rounds 2..10; each
    round takes the 64-bit products M0 * c0 and M1 * c2 (exact in uint64) and returns
    (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0). Returns (n, 4) uint32."""
    c = [np.asarray(counters, np.uint64)[:, i] for i in range(4)]
    k0, k1 = int(key[0]), int(key[1])
    m0, m1 = (np.uint64(m) for m in _PHILOX_MULTIPLIERS)
    word, shift = np.uint64(_WORD), np.uint64(32)
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_WEYL[0]) & _WORD, (k1 + _PHILOX_WEYL[1]) & _WORD
        p0, p1 = m0 * c[0], m1 * c[2]  # < 2^64: exact
        c = [(p1 >> shift) ^ c[1] ^ np.uint64(k0), p1 & word,
             (p0 >> shift) ^ c[3] ^ np.uint64(k1), p0 & word]
    return np.stack(c, axis=1).astype(np.uint32)


def _state_words(input_state):
    words = np.asarray(input_state)
    if words.dtype != np.uint32 or words.size != 6:
        raise ValueError(f"random_generator: input_state must be 6 uint32 words, got "
                         f"{words.size} of {words.dtype}")
    return [int(w) for w in words.reshape(-1)]


def random_generator(input_state, output_sizes, type="philox_4x32_10"):
    """(output, output_state) of DML_RANDOM_GENERATOR (PHILOX_4X32_10, the only type).

    State words s0..s5: counter C = s0 + 2^32 s1 + 2^64 s2 + 2^96 s3, key (s4, s5). Output
    element n (row-major over `output_sizes`, E elements) is word n mod 4 of the Philox block of
    counter (C + floor(n/4)) mod 2^128; output_state is ((C + ceil(E/4)) mod 2^128, s4, s5),
    shaped like input_state. Both uint32."""
    if _name(type) not in ("philox_4x32_10", 0):
        raise ValueError(f"random_generator: type must be philox_4x32_10, got {type!r}")
    s = _state_words(input_state)
    counter = s[0] | s[1] << 32 | s[2] << 64 | s[3] << 96
    count = int(np.prod(output_sizes, dtype=np.int64))
    blocks = -(-count // 4)
    # Counters C + b, b < 2^32: the low 64 bits wrap in uint64, their carry goes upward.
    b = np.arange(blocks, dtype=np.uint64)
    low = np.uint64(counter & (2**64 - 1)) + b
    high = np.uint64(counter >> 64) + (low < b).astype(np.uint64)
    shift, word = np.uint64(32), np.uint64(_WORD)
    counters = np.stack([low & word, low >> shift, high & word, high >> shift], axis=1)
    output = philox_4x32_10(counters, s[4:]).reshape(-1)[:count].reshape(tuple(output_sizes))
    after = (counter + blocks) % 2**128
    state = [(after >> (32 * i)) & _WORD for i in range(4)] + s[4:]
    return output, np.array(state, np.uint32).reshape(np.shape(input_state))
