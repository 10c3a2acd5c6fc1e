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
// rounded; 0 where not finite), so that a is small where the data sit far from 0; its first 16
// lanes load chunk (0, 0) at once, and every work item stores the shift with its partials.
//
// Lanes: LK channel slots of LR = WG / LK lanes (K_FAST: consecutive invocations on
// consecutive channels, for a channel dimension innermost in memory). Work item `item` is
// channel group item / groups (channels LK * that + slot) and chunk group item % groups,
// whose chunks g LR CHUNKS_PER_LANE + lane + LR c (c < CHUNKS_PER_LANE) the lanes take.
// partials: batch_normalization_training.glsl's layout.
//
// Constants: K_SIZES / K_X_STRIDES (channel k's offset), R_SIZES / R_X_STRIDES (element r's
// offset within its channel), 8 dimensions each, right-aligned, in elements.
// Dispatch: up to 65535 workgroups; a grid-stride loop over the items [first, end).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"
#include "batch_normalization_training.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const uint LK = 1u;
layout(constant_id = 3) const bool K_FAST = false;
layout(constant_id = 4) const uint CHUNKS_PER_LANE = 1u;
DIMS8(uint, K_SIZES, 5, 1)
DIMS8(uint, K_X_STRIDES, 13, 0)
DIMS8(uint, R_SIZES, 21, 1)
DIMS8(uint, R_X_STRIDES, 29, 0)

const uint LR = WG / LK;
#define EXACT_SLOTS (2u * LK)
#include "exact_sums.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) writeonly buffer PARTIALS { int partials[]; };  // scratch
layout(push_constant) uniform Push { uint channels; uint reduced; uint groups; uint end;
                                     uint first; };

shared float first_x[16u * LK];  // chunk (0, 0) of each slot's channel
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
// its run, and are decomposed anew where they leave it.
vec2 chunk_sums(uint base, uint r0, float shift) {
    precise vec4 a[4];
    uint inner = r0 % R_SIZES7, o = element_offset(r0);
    if (inner + 480u < R_SIZES7 && r0 + 480u < reduced) {
        // The 16 elements in one run, all in the channel: loads with no branches.
        for (uint i = 0u; i < 16u; ++i) {
            a[i >> 2][i & 3u] = LOAD(x, base + o + 32u * i * R_X_STRIDES7) - shift;
        }
    } else {
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
    }
    precise vec4 s0 = a[0] * a[0], s1 = a[1] * a[1], s2 = a[2] * a[2], s3 = a[3] * a[3];
    return vec2(chunk_tree(a[0], a[1], a[2], a[3]), chunk_tree(s0, s1, s2, s3));
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
        for (uint i = lane; i < 16u; i += LR) {
            const uint r = 32u * i;
            first_x[16u * slot + i] = live && r < reduced ? LOAD(x, base + element_offset(r)) : 0.0;
        }
        barrier();
        if (live && lane == 0u) {
            const uint f = 16u * slot;
            const float sum0 = chunk_tree(
                vec4(first_x[f], first_x[f + 1u], first_x[f + 2u], first_x[f + 3u]),
                vec4(first_x[f + 4u], first_x[f + 5u], first_x[f + 6u], first_x[f + 7u]),
                vec4(first_x[f + 8u], first_x[f + 9u], first_x[f + 10u], first_x[f + 11u]),
                vec4(first_x[f + 12u], first_x[f + 13u], first_x[f + 14u], first_x[f + 15u]));
            const float mean0 = cr_div(sum0, float(min(16u, (reduced + 31u) / 32u)));
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
        // Each slot's sums normalised (so that the finalize stage may add up to 32768 groups),
        // then stored by the whole workgroup.
        for (uint st = t; st < EXACT_SLOTS; st += WG) exact_normalize(st);
        barrier();
        for (uint w = t; w < EXACT_SLOTS * PARTIAL_WORDS; w += WG) {
            const uint st = w / PARTIAL_WORDS, i = w % PARTIAL_WORDS;
            const uint kt = (item / groups) * LK + st / 2u;
            if (kt < channels) {
                const int word = i < EXACT_DIGITS ? exact_digits[st * EXACT_DIGITS + i]
                                 : i == EXACT_DIGITS ? int(exact_flags[st])
                                                     : floatBitsToInt(shift_of[st / 2u]);
                partials[((kt * groups + g) * 2u + st % 2u) * PARTIAL_WORDS + i] = word;
            }
        }
    }
}
