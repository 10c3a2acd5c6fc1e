// DML_OPERATOR_RANDOM_GENERATOR (random_generator): Philox 4x32-10 (Salmon et al., SC'11) and
// the 128-bit counter arithmetic of its two kernels, random_generator.comp (the output's
// blocks) and random_generator_state.comp (the new state). Integer arithmetic only, so every
// device, subgroup size and workgroup width gives the same bits.
//
// A kernel including this declares the InputStateTensor binding `state` and the constant
// STATE_STRIDE (its element stride: word i at state[i * STATE_STRIDE]). The state's words are
// the counter C = s0 + 2^32 s1 + 2^64 s2 + 2^96 s3 (s0 least significant) and the key
// (s4, s5).

#define STATE(i) state[(i) * STATE_STRIDE]

// The new state ((c + blocks) mod 2^128, k) into the OutputStateTensor binding `new_state`,
// word i at new_state[i * NEW_STATE_STRIDE] (both kernels declare them; written out, no loop
// for a loop limit to count; every word read before the first store).
#define STORE_NEW_STATE(c, blocks, k)                                                   \
    {                                                                                   \
        const uvec4 n_ = counter_plus(c, blocks);                                       \
        const uvec2 k_ = (k);                                                           \
        new_state[0u] = n_.x;                                                           \
        new_state[NEW_STATE_STRIDE] = n_.y;                                             \
        new_state[2u * NEW_STATE_STRIDE] = n_.z;                                        \
        new_state[3u * NEW_STATE_STRIDE] = n_.w;                                        \
        new_state[4u * NEW_STATE_STRIDE] = k_.x;                                        \
        new_state[5u * NEW_STATE_STRIDE] = k_.y;                                        \
    }

// (c + b) mod 2^128 for a counter c in four words, x least significant, carried upward.
uvec4 counter_plus(uvec4 c, uint b) {
    uint carry0, carry1, carry2;
    const uint w0 = uaddCarry(c.x, b, carry0);
    const uint w1 = uaddCarry(c.y, carry0, carry1);
    const uint w2 = uaddCarry(c.z, carry1, carry2);
    return uvec4(w0, w1, w2, c.w + carry2);
}

// One Philox round on counter words c with key k: the 32x32 -> 64-bit products of the
// multipliers with c.x and c.z, their halves mixed with c.y, c.w and the key.
#define PHILOX_ROUND(c, k)                                                              \
    {                                                                                   \
        uint hi0, lo0, hi1, lo1;                                                        \
        umulExtended(0xD2511F53u, c.x, hi0, lo0);                                       \
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);                                       \
        c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);                          \
    }
// The key bump before rounds 2..10 (the Weyl constants), then the round.
#define PHILOX_BUMPED_ROUND(c, k) k += uvec2(0x9E3779B9u, 0xBB67AE85u); PHILOX_ROUND(c, k)

// The ten rounds, written out: no loop, so that a driver counting loop iterations per
// invocation (lavapipe) sees only the kernel's grid-stride loop.
uvec4 philox_4x32_10(uvec4 c, uvec2 k) {
    PHILOX_ROUND(c, k)
    PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k)
    PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k)
    PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k) PHILOX_BUMPED_ROUND(c, k)
    return c;
}
