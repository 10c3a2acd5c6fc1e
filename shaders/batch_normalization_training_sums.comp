// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING (batch_normalization_training), and with GRAD
// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad): per channel, the exact sums
//   the forward:  a = X - shift and a^2
//   GRAD:         dY, a = X - shift and dY a
// each rounded once, and from them the channel's results (`finish`): the forward's
// OutputMean, OutputVariance and its Output pass's coefficients; the grads' OutputScaleGradient,
// OutputBiasGradient and the dX pass's coefficients.
//
// A work item sums a range of one channel's chunks (a chunk group) as digits (exact_sums.glsl).
// With one group per channel it rounds them and finishes the channel itself. With more, it
// stores them in the `partials` scratch buffer and counts itself in the channel's `counters`
// word; the item that counts last (whichever it is: the sums are exact, so the order in which
// items arrive changes no bits) adds every group's digits, rounds, finishes the channel and
// zeroes its count. (A dispatch that stops part-way, as on a lost device, would leave counts
// behind for the next call: the plans keep every invocation within a driver's loop limit so
// that none stops.) One dispatch, where a second (one workgroup per channel) cost 8-14 us of
// fixed latency on an H200.
//
// The canonical order (docs/semantics.md §18), fixed by the problem alone: a channel's n
// elements, in row-major order over the reduced dimensions (r = 0 .. n-1), fall in blocks of
// 512; chunk (b, j), j < 32, is the 16 elements r = 512 b + j + 32 i, i = 0..15 (those below
// n; the others count as 0). A chunk's terms are added in one fixed tree (pairs i, i + 8,
// then i + 4, i + 2, i + 1) in float32, and the chunk sums are added exactly. Which lane,
// workgroup or dispatch takes a chunk changes nothing. Interleaving by 32 lets 32 lanes read 32
// consecutive elements of a contiguous run at once.
//
// shift: the forward's is the mean of chunk (0, 0) (its tree sum divided by its element count,
// correctly rounded; 0 where not finite), so that a is small where the data sit far from 0; its
// first 16 lanes load chunk (0, 0) at once. BATCH_NORMALIZATION_GRAD's is the supplied Mean;
// the training grad's is `training_shift` (batch_normalization_grad.glsl). Every work item of
// the channel computes the same shift.
//
// WRITE_DX (BATCH_NORMALIZATION_GRAD, float32, dX laid out as dY): also store
// dX = dY * (Scale / sqrt(Variance + Epsilon)) while dY is in registers (it needs no
// reduction), so dY is read once; the factor is correctly rounded (cr_div, cr_sqrt). A chunk's
// dX is stored after its X is read (store_dx: dX may be bound over X).
//
// Lanes: LK channel slots of LR = WG / LK lanes (K_FAST: consecutive invocations on
// consecutive channels, for a channel dimension innermost in memory). Work item `item` is
// channel group item / groups (channels LK * that + slot) and chunk group item % groups,
// whose chunks g LR CHUNKS_PER_LANE + lane + LR c (c < CHUNKS_PER_LANE) the lanes take
// (PAIRED: those units u, each the chunks 2u and 2u + 1).
// partials: batch_normalization_training.glsl's layout.
//
// OUTPUT_HERE (the forward, float32 or PAIRED, with one chunk group per channel and Output and
// FusedAdd laid out as X; the plan's rule in _batch_normalization_sums.py): each item completes
// its channels, so it also writes their Output (output_value, batch_normalization_output.glsl)
// from the coefficients it has just computed, walking its chunks again: X is read again from
// L2, where this item has just read it, and the element-wise pass, its dispatch and its barrier
// are not needed. Output goes to the DX binding and FusedAdd comes from the DY binding, both at
// X's offsets.
//
// Constants: K_SIZES and the strides over the kept dimensions of X (and with GRAD of dY,
// Mean, Variance, Scale; and of the finish's tensors), R_SIZES and the strides over the
// reduced dimensions of X (and dY), 8 dimensions each, right-aligned, in elements. With
// WRITE_DX dX has dY's strides. PAIRED: chunks two at a time (chunk_pair_sums).
// Dispatch: up to 65535 workgroups; a grid-stride loop over the items [first, end).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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
layout(constant_id = 37) const bool GRAD = false;
layout(constant_id = 38) const bool TRAINING = false;  // GRAD: the training grad's shift
layout(constant_id = 39) const float EPSILON = 0.0;
layout(constant_id = 40) const bool WRITE_DX = false;
DIMS8_4(uint, K_DY_STRIDES, K_MEAN_STRIDES, K_VARIANCE_STRIDES, K_SCALE_STRIDES, 41, 0)
DIMS8(uint, R_DY_STRIDES, 73, 0)
layout(constant_id = 81) const float N_R = 1.0;  // the channel's element count as a float
// The finish's outputs: the forward's BiasTensor, OutputMeanTensor and OutputVarianceTensor;
// the grads' OutputScaleGradientTensor and OutputBiasGradientTensor.
DIMS8_5(uint, K_BIAS_STRIDES, K_OUTPUT_MEAN_STRIDES, K_OUTPUT_VARIANCE_STRIDES, K_DSCALE_STRIDES,
        K_DBIAS_STRIDES, 82, 0)
// The plan's, for the forward in float16 (not GRAD): the innermost reduced dimension
// contiguous and of even size, every other stride even, n even: a lane takes chunks in pairs
// (b, j) and (b, j + 1), j even, whose elements r0 + 32 i and r0 + 1 + 32 i share a word.
layout(constant_id = 122) const bool PAIRED = false;
layout(constant_id = 123) const bool OUTPUT_HERE = false;
layout(constant_id = 124) const bool FUSED_ADD = false;  // OUTPUT_HERE: FusedAddTensor
layout(constant_id = 125) const bool RELU = false;  // OUTPUT_HERE: FusedActivation ReLU
// Limits.unroll_loops (a CPU device): the chunk loops take FIXED_LOOP's [[unroll]] copy, the
// same bits (benchmarks/RESULTS.md, "2026-12-04 (evening)": lavapipe 1.3-3x, H200 -2-7%).
layout(constant_id = 126) const bool UNROLL_CHUNKS = false;

const uint LR = WG / LK;
const uint SUMS = GRAD ? 3u : 2u;  // sums per channel
const bool PAIRS = PAIRED && !GRAD;  // the plan pairs only the forward's chunks
#define EXACT_SLOTS (SUMS * LK)
#include "exact_sums.glsl"
#include "batch_normalization_training.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
// scratch, read back by the item that completes a channel (coherent: other workgroups wrote it)
layout(set = 0, binding = 1) coherent buffer PARTIALS { int partials[]; };
// GRAD: InputGradientTensor, MeanTensor, VarianceTensor, ScaleTensor, and (WRITE_DX)
// OutputGradientTensor; the forward binds them to buffers it never reads or writes, except
// with OUTPUT_HERE DY (FusedAddTensor, where FUSED_ADD) and DX (OutputTensor).
layout(set = 0, binding = 2) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 3) readonly buffer MEAN { uint mean[]; };
layout(set = 0, binding = 4) readonly buffer VARIANCE { uint variance[]; };
layout(set = 0, binding = 5) readonly buffer SCALE { uint scale[]; };
layout(set = 0, binding = 6) buffer DX { uint dx[]; };
// The finish: the forward's BiasTensor, OutputMeanTensor and OutputVarianceTensor; the grads'
// OutputScaleGradientTensor and OutputBiasGradientTensor (float16 stores use integer atomics
// on shared words); the coefficients of the Output or dX pass (scratch: the forward's one vec4
// per channel, the grads' two); per channel a count of its finished items (scratch, zero
// between calls: the completing item resets it).
layout(set = 0, binding = 7) readonly buffer BIAS { uint bias[]; };
layout(set = 0, binding = 8) buffer OUTPUT_MEAN { uint output_mean[]; };
layout(set = 0, binding = 9) buffer OUTPUT_VARIANCE { uint output_variance[]; };
layout(set = 0, binding = 10) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 11) buffer DBIAS { uint dbias[]; };
layout(set = 0, binding = 12) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(set = 0, binding = 13) coherent buffer COUNTERS { uint counters[]; };
layout(push_constant) uniform Push { uint channels; uint reduced; uint groups; uint end;
                                     uint first; };

#define BATCH_NORMALIZATION_FINISH
#include "batch_normalization_grad.glsl"
#include "batch_normalization_output.glsl"

shared float first_x[16u * LK];  // the forward: chunk (0, 0) of each slot's channel
shared float shift_of[LK];
shared float dx_factor_of[LK];  // WRITE_DX
shared bool completes[LK];  // this item completes the slot's channel
shared float rounded[SUMS * LK];  // a completed channel's sums, rounded
shared vec4 coefficients_of[LK];  // OUTPUT_HERE: each slot's channel's Output coefficients

#define ADD_K(D, c) o += (c) * uvec4(K_X_STRIDES##D, K_DY_STRIDES##D, K_MEAN_STRIDES##D, \
                                     K_VARIANCE_STRIDES##D);
#define ADD_K_SCALE(D, c) o += (c) * K_SCALE_STRIDES##D;
#define ADD_K_FINISH(D, c)                                                                    \
    a += (c) * uvec4(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D, K_SCALE_STRIDES##D,           \
                     K_BIAS_STRIDES##D);                                                      \
    b += (c) * uvec4(K_OUTPUT_MEAN_STRIDES##D, K_OUTPUT_VARIANCE_STRIDES##D,                 \
                     K_DSCALE_STRIDES##D, K_DBIAS_STRIDES##D);
#define ADD_R(D, c) o += (c) * uvec2(R_X_STRIDES##D, R_DY_STRIDES##D);

// Channel k's offsets in X, dY, Mean and Variance.
uvec4 channel_offsets(uint k) {
    uvec4 o = uvec4(0u);
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K)
    return o;
}

// Element r's offsets in X and dY, within its channel.
uvec2 element_offsets(uint r) {
    uvec2 o = uvec2(0u);
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R)
    return o;
}

// Element i of a chunk, at offsets o (in_channel: r < n; else it counts as 0): a = X - shift
// into a, and dY into g (GRAD).
void take(uint i, uvec2 o, bool in_channel, float shift, inout vec4 a[4], inout vec4 g[4]) {
    a[i >> 2][i & 3u] = in_channel ? LOAD(x, o.x) - shift : 0.0;
    if (GRAD) g[i >> 2][i & 3u] = in_channel ? LOAD(dy, o.y) : 0.0;
}

// Element i of the chunk from r0, r = r0 + 32 i (returned): from element r - 32's offsets o to
// r's (`inner` its index in its run of the innermost reduced dimension), a step along the run
// while it lasts, else decomposed anew; for i = 0, o and inner stay r0's (chunk_first).
uint walk(uvec2 base, uint r0, uint i, uvec2 step, inout uint inner, inout uvec2 o) {
    const uint r = r0 + 32u * i;
    if (i == 0u) return r;
    inner += 32u;
    if (inner < R_SIZES7) {
        o += step;
    } else {
        inner = r % R_SIZES7;
        o = base + element_offsets(r);
    }
    return r;
}

// Element i walked to (walk), then taken (take).
void walk_take(uvec2 base, uint r0, uint i, uvec2 step, inout uint inner, inout uvec2 o,
               float shift, inout vec4 a[4], inout vec4 g[4]) {
    const uint r = walk(base, r0, i, step, inner, o);
    take(i, o, r < reduced, shift, a, g);
}

// A chunk's walk: 32 elements on in X and dY, built at run time, component by component (the
// validation layer's SPIR-V passes mis-folded this vector of specialization constants:
// VUID-...-06719); and its first element r0's offsets (`inner`: r0's index in its run).
uvec2 chunk_step() {
    uvec2 step = uvec2(0u);
    step.x = 32u * R_X_STRIDES7;
    step.y = 32u * R_DY_STRIDES7;
    return step;
}

uvec2 chunk_first(uvec2 base, uint r0, out uint inner) {
    inner = r0 % R_SIZES7;
    return base + element_offsets(r0);
}

// WRITE_DX: chunk r0's dX = dY * dx_factor, stored after its sums, at offsets walked again
// from r0 (kept from the loads, they took 16 more registers: 80 a lane on an H200; stored at
// each load, the stores kept the next loads behind them). dX may be bound over X (in place)
// and does not depend on X: each store takes zero bits from the chunk's X sum
// (load_store.glsl, after_read; `groups` < 2^16: `groups >> 16` is 0), so every X load of
// the chunk comes first. The walk starts from r0 + (groups >> 16), r0 at run time but not to
// the compiler, which would otherwise keep the loads' offsets live rather than walk again.
void store_dx_element(uvec2 base, uint r0, uint i, uvec2 step, inout uint inner, inout uvec2 o,
                      vec4 g[4], float dx_factor, float x_sum) {
    if (walk(base, r0, i, step, inner, o) < reduced) {
        precise float v = g[i >> 2][i & 3u] * dx_factor;
        dx[o.y] = floatBitsToUint(after_read(v, x_sum, groups >> 16u));
    }
}

void store_dx(uvec2 base, uint r0, vec4 g[4], float dx_factor, float x_sum) {
    const uvec2 step = chunk_step();
    uint inner;
    r0 += groups >> 16u;
    uvec2 o = chunk_first(base, r0, inner);
    FIXED_LOOP(UNROLL_CHUNKS, i, 16u,
               store_dx_element(base, r0, i, step, inner, o, g, dx_factor, x_sum))
}

// The forward's tree sums of a chunk's a = X - shift: a's and a^2's.
vec3 forward_trees(vec4 a[4]) {
    precise vec4 s0 = a[0] * a[0], s1 = a[1] * a[1], s2 = a[2] * a[2], s3 = a[3] * a[3];
    return vec3(chunk_tree(a[0], a[1], a[2], a[3]), chunk_tree(s0, s1, s2, s3), 0.0);
}

// Chunk (b, j) of the channel at offsets `base` (r0 = 512 b + j): its tree sums (the
// forward's a and a^2, GRAD's dY, a and dY a). Its elements r0 + 32 i step along the
// innermost reduced dimension while they stay in its run, and are decomposed anew where they
// leave it.
vec3 chunk_sums(uvec2 base, uint r0, float shift, float dx_factor) {
    precise vec4 a[4], g[4];
    const uvec2 step = chunk_step();
    uint inner;
    uvec2 o = chunk_first(base, r0, inner);
    if (inner + 480u < R_SIZES7 && r0 + 480u < reduced) {
        // The 16 elements in one run, all in the channel: loads with no branches.
        FIXED_LOOP(UNROLL_CHUNKS, i, 16u, take(i, o + i * step, true, shift, a, g))
    } else {
        FIXED_LOOP(UNROLL_CHUNKS, i, 16u, walk_take(base, r0, i, step, inner, o, shift, a, g))
    }
    if (GRAD) {
        precise vec4 p0 = g[0] * a[0], p1 = g[1] * a[1], p2 = g[2] * a[2], p3 = g[3] * a[3];
        const vec3 sums = vec3(chunk_tree(g[0], g[1], g[2], g[3]),
                               chunk_tree(a[0], a[1], a[2], a[3]), chunk_tree(p0, p1, p2, p3));
        if (WRITE_DX) store_dx(base, r0, g, dx_factor, sums.y);
        return sums;
    }
    return forward_trees(a);
}

// PAIRED (the forward, float16): chunks (b, j) and (b, j + 1), j even (r0 = 512 b + j), in
// one pass: each word of X loaded holds element r0 + 32 i (its low half) and r0 + 1 + 32 i.
// The sums are chunk_sums' for each chunk, the same bits (float16 widens exactly). Both chunks
// lie in the channel alike (n is even) and their pairs in one run (the run's size is even).
void pair_element(uvec2 base, uint r0, uint i, uvec2 step, inout uint inner, inout uvec2 o,
                  float shift, inout vec4 a[4], inout vec4 b[4]) {
    const bool in_channel = walk(base, r0, i, step, inner, o) < reduced;
    const vec2 xs = in_channel ? unpackHalf2x16(x[o.x >> 1]) : vec2(0.0);
    a[i >> 2][i & 3u] = in_channel ? xs.x - shift : 0.0;
    b[i >> 2][i & 3u] = in_channel ? xs.y - shift : 0.0;
}

void chunk_pair_sums(uvec2 base, uint r0, float shift, out vec3 first, out vec3 second) {
    precise vec4 a[4], b[4];
    const uvec2 step = chunk_step();
    uint inner;
    uvec2 o = chunk_first(base, r0, inner);
    FIXED_LOOP(UNROLL_CHUNKS, i, 16u, pair_element(base, r0, i, step, inner, o, shift, a, b))
    first = forward_trees(a);
    second = forward_trees(b);
}

// The first element r0 = 512 b + j of chunk (b, j), the lane's chunk c of chunk group g (the
// lanes take the chunks g LR CHUNKS_PER_LANE + lane + LR c; PAIRED: q is the pair's first).
uint chunk_start(uint g, uint lane, uint c) {
    const uint u = g * LR * CHUNKS_PER_LANE + lane + LR * c, q = PAIRS ? 2u * u : u;
    return (q >> 5) * 512u + (q & 31u);
}

// OUTPUT_HERE: the Output of chunk r0 (PAIRS: of chunks r0 and r0 + 1, whose elements share
// X's words, which are the channel's alone; else float32), with the channel's coefficients c,
// at X's offsets (the operator binds no output over an input).
void output_element(uint o, vec4 c) {
    dx[o] = floatBitsToUint(output_value(uintBitsToFloat(x[o]),
                                         FUSED_ADD ? uintBitsToFloat(dy[o]) : 0.0, c));
}

void output_chunk(uvec2 base, uint r0, vec4 c) {
    const uvec2 step = chunk_step();
    uint inner;
    uvec2 o = chunk_first(base, r0, inner);
    if (!PAIRS && inner + 480u < R_SIZES7 && r0 + 480u < reduced) {
        for (uint i = 0u; i < 16u; ++i) output_element(o.x + i * step.x, c);
        return;
    }
    for (uint i = 0u; i < 16u; ++i) {
        if (walk(base, r0, i, step, inner, o) >= reduced) break;
        if (PAIRS) {
            const uint w = o.x >> 1u;
            const vec2 xs = unpackHalf2x16(x[w]);
            const vec2 fs = FUSED_ADD ? unpackHalf2x16(dy[w]) : vec2(0.0);
            dx[w] = halves_from_floats(vec2(output_value(xs.x, fs.x, c),
                                            output_value(xs.y, fs.y, c)));
        } else {
            output_element(o.x, c);
        }
    }
}

// The forward's shift of slot `slot` from chunk (0, 0) in first_x.
float chunk_mean_shift(uint slot) {
    const uint f = 16u * slot;
    const float sum0 = chunk_tree(
        vec4(first_x[f], first_x[f + 1u], first_x[f + 2u], first_x[f + 3u]),
        vec4(first_x[f + 4u], first_x[f + 5u], first_x[f + 6u], first_x[f + 7u]),
        vec4(first_x[f + 8u], first_x[f + 9u], first_x[f + 10u], first_x[f + 11u]),
        vec4(first_x[f + 12u], first_x[f + 13u], first_x[f + 14u], first_x[f + 15u]));
    const float mean0 = cr_div(sum0, float(min(16u, (reduced + 31u) / 32u)));
    return finite(mean0) ? mean0 : 0.0;
}

// Channel k's results from its rounded sums s around `shift` (every operation correctly
// rounded, so the same bits on every device):
//   the forward (docs/semantics.md §18): d = s.x / n, Mean = shift + d,
//     Variance = max(s.y / n - d^2, 0), coefficients[k] = (Mean, Scale / sqrt(Variance +
//     Epsilon), Bias, 0) (OUTPUT_HERE: coefficients_of[slot]); OutputMean and OutputVariance
//     round once to the tensors' type;
//   the grads: batch_normalization_grad.glsl's finish_channel.
void finish(uint k, uint slot, vec3 s, float shift) {
    uvec4 a = uvec4(0u), b = uvec4(0u);
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_FINISH)
    if (GRAD) {
        precise float ve = LOAD(variance, a.y) + run_time(EPSILON);  // (-0 + 0 is +0)
        finish_channel(k, s, shift, LOAD(mean, a.x), ve, LOAD(scale, a.z), b.z, b.w);
        return;
    }
    precise float dm = cr_div(s.x, N_R);
    precise float mean_value = shift + dm;
    precise float v = cr_div(s.y, N_R) - dm * dm;
    // Rounding can take a variance of nearly 0 below it; NaN stays NaN (below_zero).
    const float var_value = below_zero(v) ? 0.0 : v;
    precise float ve = var_value + EPSILON;
    const vec4 c = vec4(mean_value, cr_div(LOAD(scale, a.z), cr_sqrt(ve)), LOAD(bias, a.w), 0.0);
    if (OUTPUT_HERE) {
        coefficients_of[slot] = c;
    } else {
        coefficients[k] = c;
    }
    if (IS_F16) {
        STORE_HALF_BITS(output_mean, b.x, half_from_float(mean_value))
        STORE_HALF_BITS(output_variance, b.y, half_from_float(var_value))
    } else {
        output_mean[b.x] = floatBitsToUint(mean_value);
        output_variance[b.y] = floatBitsToUint(var_value);
    }
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint slot = K_FAST ? t % LK : t / LR, lane = K_FAST ? t / LK : t % LR;
    for (uint item = first + gl_WorkGroupID.x; item < end; item += gl_NumWorkGroups.x) {
        const uint k0 = (item / groups) * LK;  // the item's first channel
        const uint k = k0 + slot, g = item % groups;
        const bool live = k < channels;
        const uvec4 base = live ? channel_offsets(k) : uvec4(0u);
        barrier();  // the previous item's digits are stored
        exact_clear();
        if (!GRAD) {
            for (uint i = lane; i < 16u; i += LR) {
                const uint r = 32u * i;
                first_x[16u * slot + i] =
                    live && r < reduced ? LOAD(x, base.x + element_offsets(r).x) : 0.0;
            }
        }
        barrier();
        if (live && lane == 0u) {
            if (GRAD) {
                const float m = LOAD(mean, base.z);
                precise float ve = LOAD(variance, base.w) + run_time(EPSILON);
                shift_of[slot] = TRAINING ? training_shift(m, ve, LOAD(x, base.x)) : m;
                if (WRITE_DX) {
                    uint o = 0u;
                    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_SCALE)
                    dx_factor_of[slot] = cr_div(LOAD(scale, o), cr_sqrt(ve));
                }
            } else {
                shift_of[slot] = chunk_mean_shift(slot);
            }
        }
        barrier();
        ExactWindow w0 = exact_empty(), w1 = exact_empty(), w2 = exact_empty();
        if (live) {
            const float shift = shift_of[slot];
            const float factor = WRITE_DX ? dx_factor_of[slot] : 0.0;
            for (uint c = 0u; c < CHUNKS_PER_LANE; ++c) {
                const uint r0 = chunk_start(g, lane, c);
                if (r0 >= reduced) break;
                vec3 sums, more;
                if (PAIRS) {
                    chunk_pair_sums(base.xy, r0, shift, sums, more);
                } else {
                    sums = chunk_sums(base.xy, r0, shift, factor);
                }
                exact_add(w0, sums.x, SUMS * slot);
                exact_add(w1, sums.y, SUMS * slot + 1u);
                if (GRAD) exact_add(w2, sums.z, SUMS * slot + 2u);
                if (PAIRS) {
                    exact_add(w0, more.x, SUMS * slot);
                    exact_add(w1, more.y, SUMS * slot + 1u);
                }
            }
        }
        exact_finish(w0, SUMS * slot);
        exact_finish(w1, SUMS * slot + 1u);
        if (GRAD) exact_finish(w2, SUMS * slot + 2u);
        for (uint i = t; i < LK; i += WG) completes[i] = k0 + i < channels;
        barrier();
        if (groups > 1u) {
            // The digits, normalised (so that up to 32768 groups' may be added), and flags to
            // `partials`, then the channel's count of finished items: the item that brings it
            // to `groups` completes the channel and adds every group's digits.
            for (uint st = t; st < EXACT_SLOTS; st += WG) exact_normalize(st);
            barrier();
            for (uint w = t; w < EXACT_SLOTS * PARTIAL_WORDS; w += WG) {
                const uint st = w / PARTIAL_WORDS, i = w % PARTIAL_WORDS;
                const uint kt = k0 + st / SUMS;
                if (kt < channels) {
                    partials[((kt * groups + g) * SUMS + st % SUMS) * PARTIAL_WORDS + i] =
                        i < EXACT_DIGITS ? exact_digits[st * EXACT_DIGITS + i]
                                         : int(exact_flags[st]);
                }
            }
            // Fences on both sides of each barrier: barrier() orders only shared memory, so
            // the counting lane fences again after it (the other lanes' stores before the
            // count), and every lane before it reads the partials (the count before them).
            memoryBarrierBuffer();
            barrier();
            memoryBarrierBuffer();
            for (uint i = t; i < LK; i += WG) {
                completes[i] = completes[i] && atomicAdd(counters[k0 + i], 1u) == groups - 1u;
            }
            memoryBarrierBuffer();
            barrier();
            memoryBarrierBuffer();
            bool any = false;
            for (uint i = 0u; i < LK; ++i) any = any || completes[i];
            if (any) {  // the same for every invocation: a uniform branch
                exact_clear();
                barrier();
                const uint words = groups * SUMS * PARTIAL_WORDS;  // a channel's
                for (uint w = t; w < LK * words; w += WG) {
                    const uint i = w / words;
                    if (completes[i]) {
                        deposit_partial(SUMS * i, w % words,
                                        partials[(k0 + i) * words + w % words]);
                    }
                }
                barrier();
            }
        }
        // The completed channels' sums (with one group, every channel's), rounded once.
        for (uint st = t; st < EXACT_SLOTS; st += WG) {
            if (completes[st / SUMS]) {
                rounded[st] = exact_round(st);
            }
        }
        barrier();
        for (uint i = t; i < LK; i += WG) {
            if (completes[i]) {
                const uint kt = k0 + i;
                // (The forward has no third sum: its index stays in the array either way.)
                finish(kt, i, vec3(rounded[SUMS * i], rounded[SUMS * i + 1u],
                                   GRAD ? rounded[min(SUMS * i + 2u, SUMS * LK - 1u)] : 0.0),
                       shift_of[i]);
                if (groups > 1u) counters[kt] = 0u;  // zero again for the next call
            }
        }
        if (OUTPUT_HERE) {  // one group: this item completed every live slot's channel
            barrier();
            if (live) {
                const vec4 c = coefficients_of[slot];
                for (uint cc = 0u; cc < CHUNKS_PER_LANE; ++cc) {
                    const uint r0 = chunk_start(0u, lane, cc);
                    if (r0 >= reduced) break;
                    output_chunk(base.xy, r0, c);
                }
            }
        }
    }
}
