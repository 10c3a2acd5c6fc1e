// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING (batch_normalization_training), stage 1: per
// channel, the exact sums of a = X - shift and of a^2 over a range of the channel's chunks,
// as digits (exact_sums.glsl) in the `partials` scratch buffer.
//
// The canonical order (docs/semantics.md §18), fixed by the problem alone: a channel's n
// elements, in row-major order over the reduced dimensions (r = 0 .. n-1), fall in blocks of
// 512; chunk (b, j), j < 32, is the 16 elements r = 512 b + j + 32 i, i = 0..15 (those below
// n; the others count as 0). A chunk's terms are added in one fixed tree (pairs i, i + 8,
// then i + 4, i + 2, i + 1) in float32, and the chunk sums are added exactly. Which lane,
// workgroup or dispatch takes a chunk changes nothing. Interleaving by 32 lets 32 lanes read 32
// consecutive elements of a contiguous run at once.
//
// shift: the mean of chunk (0, 0) (its tree sum divided by its element count, correctly
// rounded; 0 where not finite), so that a is small where the data sit far from 0.
//
// Lanes: LK channel slots of LR = WG / LK lanes (K_FAST: consecutive invocations on
// consecutive channels, for a channel dimension innermost in memory). Work item `item` is
// channel group item / groups (channels LK * that + slot) and chunk group item % groups,
// whose chunks g LR CHUNKS_PER_LANE + lane + LR c (c < CHUNKS_PER_LANE) the lanes take.
// partials[((k groups + g) * 2 + s) * PARTIAL_WORDS ...]: sum s's 24 digits, then its flags.
//
// Constants: K_SIZES / K_X_STRIDES (channel k's offset), R_SIZES / R_X_STRIDES (element r's
// offset within its channel), 8 dimensions each, right-aligned, in elements.
// Dispatch: up to 65535 workgroups; a grid-stride loop over the items [first, end).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const uint LK = 1u;
layout(constant_id = 3) const bool K_FAST = false;
layout(constant_id = 4) const uint CHUNKS_PER_LANE = 1u;
DIMS8(uint, K_SIZES, 5, 1)
DIMS8(uint, K_X_STRIDES, 13, 0)
DIMS8(uint, R_SIZES, 21, 1)
DIMS8(uint, R_X_STRIDES, 29, 0)

const uint LR = WG / LK;
const uint PARTIAL_WORDS = 25u;  // EXACT_DIGITS, then the flags
#define EXACT_SLOTS (2u * LK)
#include "exact_sums.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) writeonly buffer PARTIALS { int partials[]; };  // scratch
layout(push_constant) uniform Push { uint channels; uint reduced; uint groups; uint end;
                                     uint first; };

shared float shift_of[LK];

#define ADD_K(D, c) o += (c) * K_X_STRIDES##D;
#define ADD_R(D, c) o += (c) * R_X_STRIDES##D;

uint channel_offset(uint k) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K)
    return o;
}

uint element_offset(uint r) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R)
    return o;
}

// Chunk (b, j) of the channel at `base` (r0 = 512 b + j): the tree sums of a = X - shift and
// of a^2. Its elements r0 + 32 i step along the innermost reduced dimension while they stay in
// its run, and are decomposed anew where they leave it. The tree on vectors: element i is
// component i % 4 of vector i / 4, so pairs (i, i + 8) are vectors (0, 2) and (1, 3), then
// (i, i + 4) vectors 0 and 1, (i, i + 2) .xy and .zw, (i, i + 1) .x and .y.
vec2 chunk_sums(uint base, uint r0, float shift) {
    precise vec4 a[4];
    uint inner = r0 % R_SIZES7, o = element_offset(r0);
    for (uint i = 0u; i < 16u; ++i) {
        const uint r = r0 + 32u * i;
        if (i > 0u) {
            inner += 32u;
            if (inner < R_SIZES7) {
                o += 32u * R_X_STRIDES7;
            } else {
                inner = r % R_SIZES7;
                o = element_offset(r);
            }
        }
        a[i >> 2][i & 3u] = r < reduced ? LOAD(x, base + o) - shift : 0.0;
    }
    precise vec4 s0 = a[0] * a[0], s1 = a[1] * a[1], s2 = a[2] * a[2], s3 = a[3] * a[3];
    precise vec4 a01 = (a[0] + a[2]) + (a[1] + a[3]);
    precise vec4 s01 = (s0 + s2) + (s1 + s3);
    precise vec2 a2 = a01.xy + a01.zw, s2v = s01.xy + s01.zw;
    precise float sa = a2.x + a2.y, ss = s2v.x + s2v.y;
    return vec2(sa, ss);
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint slot = K_FAST ? t % LK : t / LR, lane = K_FAST ? t / LK : t % LR;
    const uint per_group = LR * CHUNKS_PER_LANE;
    for (uint item = first + gl_WorkGroupID.x; item < end; item += gl_NumWorkGroups.x) {
        const uint k = (item / groups) * LK + slot, g = item % groups;
        const bool live = k < channels;
        const uint base = live ? channel_offset(k) : 0u;
        barrier();  // the previous item's digits are stored
        exact_clear();
        if (live && lane == 0u) {
            // The shift: chunk (0, 0)'s mean, the same for every item of the channel.
            const float count = float(min(16u, (reduced + 31u) / 32u));
            const float mean0 = cr_div(chunk_sums(base, 0u, 0.0).x, count);
            shift_of[slot] = isinf(mean0) || isnan(mean0) ? 0.0 : mean0;
        }
        barrier();
        ExactWindow sum_a = exact_empty(), sum_s = exact_empty();
        if (live) {
            const float shift = shift_of[slot];
            for (uint c = 0u; c < CHUNKS_PER_LANE; ++c) {
                const uint q = g * per_group + lane + LR * c;  // chunk (q / 32, q % 32)
                const uint r0 = (q >> 5) * 512u + (q & 31u);
                if (r0 >= reduced) break;
                const vec2 sums = chunk_sums(base, r0, shift);
                exact_add(sum_a, sums.x, 2u * slot);
                exact_add(sum_s, sums.y, 2u * slot + 1u);
            }
        }
        exact_finish(sum_a, 2u * slot);
        exact_finish(sum_s, 2u * slot + 1u);
        barrier();
        // Slot s's sums, normalised (so that the finalize stage may add up to 32768 groups).
        for (uint st = t; st < EXACT_SLOTS; st += WG) {
            const uint kt = (item / groups) * LK + st / 2u;
            if (kt < channels) {
                int d[EXACT_DIGITS];
                for (uint i = 0u; i < EXACT_DIGITS; ++i) d[i] = exact_digits[st * EXACT_DIGITS + i];
                EXACT_NORMALIZE(d)
                const uint at = ((kt * groups + g) * 2u + st % 2u) * PARTIAL_WORDS;
                for (uint i = 0u; i < EXACT_DIGITS; ++i) partials[at + i] = d[i];
                partials[at + EXACT_DIGITS] = int(exact_flags[st]);
            }
        }
    }
}
