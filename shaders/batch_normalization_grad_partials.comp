// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad), reduction stage 1 of 2:
// partial sums per (channel, chunk); or, with FINISH, the whole reduction in one stage.
//
//   For channel k (the kept dimensions K, where the statistics' sizes equal the input's) and
//   chunk j of its reduced index range r (the dimensions R where the statistics' sizes are 1):
//     partials[k * chunks + j] = ( sum dY, sum a, sum dY * a, shift ),   a = X - shift
//   over r in [j * ITERS * LR * VEC, (j + 1) * ITERS * LR * VEC) clipped to `reduced`.
//
// The shift is the supplied Mean, or for the training grad (TRAINING) the channel's first X
// (include/batch_normalization_grad.glsl says why); shifted sums stay small, so the training
// grad's covariance needs no second pass over the data. Sums are float32 in
// a fixed order: ITERS terms (or vectors) per invocation, then subgroupAdd and a fixed loop over
// subgroups in shared memory (include/workgroup_sums.glsl); stage 2
// (batch_normalization_grad_finalize) reduces the partials of a channel the same way. No
// atomics: results are bitwise identical run to run.
//
// With VEC > 1 (X and dY walk the innermost reduced dimension contiguously, its size and every
// other stride a multiple of VEC; or with MASKED, its vectors not aligned) a lane reads VEC
// elements with one load of 16, 8 or 4 bytes (float32: 4 or 2 elements; float16: 8, 4 or 2)
// and adds them pairwise before its running sum; ITERS then counts vectors, and a chunk is
// ITERS * LR * VEC elements (with MASKED, padded elements: see MASKED).
//
// FINISH (one chunk per channel: the plan does so where there are channel groups enough to fill
// the device): the work item that sums a channel's only chunk also finishes it, storing
// OutputBiasGradient, OutputScaleGradient and the coefficients as
// batch_normalization_grad_finalize does (finish_channel, include/batch_normalization_grad.glsl),
// so no second dispatch, no partials and no barrier between them.
//
// Work item w = (channel group g, chunk j), g = w / chunks (with CHUNK_MAJOR: j = w / groups,
// the training grad's L2 order): LK channels by LR = WG / LK lanes (with SPAN, LK = SPAN
// channels read as rows of whole vectors: span_item).
// K_FAST: invocation t takes channel g*LK + t % LK and lane t / LK (consecutive invocations
// on consecutive channels: coalesced when a kept dimension is innermost in memory, NHWC);
// otherwise channel g*LK + t / LR and lane t % LR (coalesced for NCHW, and LK = 1 when a
// channel has at least WG elements).
//
// Constants: K_SIZES and the strides over the kept dimensions K of X, dY, Mean, Variance, and
//   with WRITE_DX dX and Scale, R_SIZES and the strides over the reduced dimensions R of X, dY
//   (and dX) (8 dimensions each, right-aligned, in elements; K and R coalesced on the host);
//   VEC is 1, 2, 4 or 8 (with WRITE_DX, dX's vectors are aligned like dY's; with MASKED,
//   R_SIZES7 is the padded run, see MASKED); a lane loads AHEAD vectors (or elements) before it
//   adds the first, the same bits for any AHEAD. With FINISH, N_R (the reduced element count as
//   a float) and the strides over K of the two parameter gradients.
// Push constants: channels, reduced (elements per channel; with MASKED, padded elements),
//   chunks (per channel), groups.
// Dispatch: up to 65535 workgroups; a workgroup-stride loop over groups * chunks work items
//   (uniform per workgroup, so the barriers inside are in uniform control flow).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
DIMS8(uint, K_SIZES, 2, 1)
DIMS8_3(uint, K_X_STRIDES, K_DY_STRIDES, K_MEAN_STRIDES, 10, 0)
DIMS8(uint, K_VARIANCE_STRIDES, 63, 0)
DIMS8(uint, R_SIZES, 34, 1)
DIMS8_2(uint, R_X_STRIDES, R_DY_STRIDES, 42, 0)
// The lane layout and the work per lane (see above).
layout(constant_id = 58) const bool K_FAST = false;
layout(constant_id = 59) const uint LK = 1;
layout(constant_id = 60) const uint ITERS = 16;
layout(constant_id = 61) const uint VEC = 1;
layout(constant_id = 62) const bool TRAINING = false;
layout(constant_id = 71) const float EPSILON = 0.0;
// WRITE_DX (BATCH_NORMALIZATION_GRAD): also store OutputGradient = dY * Scale / sqrt(Variance +
// Epsilon) while dY is in registers (it needs no reduction), so dY is read once.
layout(constant_id = 72) const bool WRITE_DX = false;
DIMS8_2(uint, K_DX_STRIDES, K_SCALE_STRIDES, 73, 0)
DIMS8(uint, R_DX_STRIDES, 89, 0)
layout(constant_id = 97) const bool FINISH = false;
layout(constant_id = 98) const float N_R = 1.0;
DIMS8_2(uint, K_DSCALE_STRIDES, K_DBIAS_STRIDES, 99, 0)
// CHUNK_MAJOR: work item w is (chunk w / groups, group w % groups), so the GPU walks every
// channel's reduced range from first to last at once (workgroups start roughly in order), and
// what it read last, the end of each channel, is what the training grad's dX pass reads first,
// from L2 (REVERSE in batch_normalization_training_grad_output_packed). The one-pass plan
// (FINISH, one chunk) walks that way anyway: each lane goes from first to last.
layout(constant_id = 115) const bool CHUNK_MAJOR = false;
// Vectors (or single elements, VEC 1) a lane loads before it adds the first of them: bytes in
// flight where loads are small and the one-pass plan's invocations few.
layout(constant_id = 116) const uint AHEAD = 1;
// MASKED (VEC > 1 where the innermost reduced run of RUN elements is contiguous but its
// vectors are not aligned, such as float16 rows of 7x7): each run is read as the aligned
// vectors that hold it, R_SIZES7 = VEC * (vectors a run can touch), and the elements of a vector
// outside the run count as 0 in the sums; dX stores only the run's own elements (the run's
// first and last words through STORE_HALF_BITS when they hold another run's float16 half).
// X, dY and dX agree in every stride modulo VEC, so a run starts at the same place in a
// vector in all three.
layout(constant_id = 117) const bool MASKED = false;
layout(constant_id = 118) const uint RUN = 1;
// SPAN (channels side by side, NCHW with rows such as 7x7 that no vector width divides: 0 is
// off): a work item is SPAN adjacent channels (LK = SPAN, SPAN = VEC / gcd(RUN, VEC)), whose
// runs of RUN elements lie end to end in memory and make one aligned row of SV whole vectors
// per outer reduced index. Lane sv of a row always loads vector sv, so element slot i of its
// vectors always belongs to span channel (sv * VEC + i) / RUN: the lane's first channel, or
// (RUN >= VEC) the next one from slot `split` on. It sums each slot apart, then the slots of
// each channel, and loads and stores every vector whole: no masks and no atomics.
layout(constant_id = 119) const uint SPAN = 0;

const uint LR = WG / LK;
const uint LOAD_BYTES = VEC * (IS_F16 ? 2u : 4u);  // one load of X or dY (VEC > 1)
const uint WHOLE_VECTOR = (1u << VEC) - 1u;  // a mask of every element of a vector
const uint SV = SPAN > 0u ? SPAN * RUN / VEC : 1u;  // SPAN: the vectors of a span row
const uint SPAN_LR = WG / SV;  // SPAN: span rows side by side in a workgroup
#include "workgroup_sums.glsl"

// InputTensor and InputGradientTensor, each also viewed as uvec2 and uvec4 for VEC > 1
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 0) readonly buffer X_UVEC2 { uvec2 x_uvec2[]; };
layout(set = 0, binding = 1) readonly buffer DY_UVEC2 { uvec2 dy_uvec2[]; };
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };
layout(set = 0, binding = 1) readonly buffer DY_UVEC4 { uvec4 dy_uvec4[]; };
layout(set = 0, binding = 2) readonly buffer MEAN { uint mean[]; };  // MeanTensor
// scratch: a vec4 per channel and chunk, channel-major
layout(set = 0, binding = 3) writeonly buffer PARTIALS { vec4 partials[]; };
layout(set = 0, binding = 4) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 5) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
// OutputGradientTensor (WRITE_DX; a MASKED run's edge words may hold another run's float16 half:
// those go through integer atomics)
layout(set = 0, binding = 6) buffer DX { uint dx[]; };
layout(set = 0, binding = 6) writeonly buffer DX_UVEC2 { uvec2 dx_uvec2[]; };
layout(set = 0, binding = 6) writeonly buffer DX_UVEC4 { uvec4 dx_uvec4[]; };
// FINISH: OutputScaleGradientTensor and OutputBiasGradientTensor (float16: integer atomics on
// shared words), and the scratch coefficients (2 vec4 per channel)
layout(set = 0, binding = 7) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 8) buffer DBIAS { uint dbias[]; };
layout(set = 0, binding = 9) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(push_constant) uniform Push { uint channels; uint reduced; uint chunks; uint groups; };

#define BATCH_NORMALIZATION_FINISH
#include "batch_normalization_grad.glsl"

#define ADD_K_OFFSETS(D, c) o += (c) * uvec4(K_X_STRIDES##D, K_DY_STRIDES##D, K_MEAN_STRIDES##D, \
                                             K_VARIANCE_STRIDES##D);
#define ADD_R_OFFSETS(D, c) o += (c) * uvec3(R_X_STRIDES##D, R_DY_STRIDES##D, R_DX_STRIDES##D);
#define ADD_K_OUT_OFFSETS(D, c) o += (c) * uvec4(K_DX_STRIDES##D, K_SCALE_STRIDES##D, \
                                                 K_DSCALE_STRIDES##D, K_DBIAS_STRIDES##D);

// Offsets of channel k in X, dY, Mean and Variance.
uvec4 k_offsets(uint k) {
    uvec4 o = uvec4(0u);
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_OFFSETS)
    return o;
}

// Offsets of channel k in dX, Scale (WRITE_DX), OutputScaleGradient and OutputBiasGradient
// (FINISH).
uvec4 k_out_offsets(uint k) {
    uvec4 o = uvec4(0u);
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_OUT_OFFSETS)
    return o;
}

// Offsets of reduced index r in X, dY and dX (relative to the channel's).
uvec3 r_offsets(uint r) {
    uvec3 o = uvec3(0u);
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R_OFFSETS)
    return o;
}

// The shift of a channel's sums (include/batch_normalization_grad.glsl); reduced index 0 sits
// at the channel's offset.
float shift(uvec4 ko) {
    const float m = LOAD(mean, ko.z);
    return TRAINING ? training_shift(m, LOAD(variance, ko.w) + EPSILON, LOAD(x, ko.x)) : m;
}

// (sum g, sum a, sum g * a, 0) of four or two elements, pairwise.
vec4 sums4(vec4 g, vec4 a) {
    const vec4 ga = g * a;
    return vec4((g.x + g.y) + (g.z + g.w), (a.x + a.y) + (a.z + a.w),
                (ga.x + ga.y) + (ga.z + ga.w), 0.0);
}
vec4 sums2(vec2 g, vec2 a) { return vec4(g.x + g.y, a.x + a.y, g.x * a.x + g.y * a.y, 0.0); }

// v with the elements whose bit in `mask` is 0 replaced by 0 (a select: NaN or Inf outside the
// run stays out of the sums).
vec4 keep(vec4 v, uint mask) {
    return mix(vec4(0.0), v, notEqual(uvec4(mask) & uvec4(1u, 2u, 4u, 8u), uvec4(0u)));
}
vec2 keep(vec2 v, uint mask) { return keep(vec4(v, 0.0, 0.0), mask).xy; }

vec4 half_sums(uvec2 gw, uvec2 xw, float m, uint mask) {
    return sums4(keep(vec4(unpackHalf2x16(gw.x), unpackHalf2x16(gw.y)), mask),
                 keep(vec4(unpackHalf2x16(xw.x), unpackHalf2x16(xw.y)) - m, mask));
}

// dY words times the coefficient, as words (float16: two halves per word, rounded once).
// With a factor per element (float16: one per half; float32: coef.x), as SPAN needs.
uint scaled(uint gw, vec2 coef) {
    return IS_F16 ? packHalf2x16(unpackHalf2x16(gw) * coef)
                  : floatBitsToUint(uintBitsToFloat(gw) * coef.x);
}
uint scaled(uint gw, float coef) { return scaled(gw, vec2(coef)); }
uvec2 scaled(uvec2 gw, float coef) { return uvec2(scaled(gw.x, coef), scaled(gw.y, coef)); }
uvec4 scaled(uvec4 gw, float coef) {
    return uvec4(scaled(gw.xy, coef), scaled(gw.zw, coef));
}

// The words of the VEC-element vectors of X and dY that hold element offsets o (multiples of
// VEC; with MASKED not always, and the aligned vector o / VEC holding o is loaded),
// in xw and gw (words past the vector's are 0); a single element (VEC 1) as float32 bits.
void load_vectors(uvec3 o, out uvec4 xw, out uvec4 gw) {
    xw = gw = uvec4(0u);
    if (VEC == 1u) {
        xw.x = floatBitsToUint(LOAD(x, o.x));
        gw.x = floatBitsToUint(LOAD(dy, o.y));
    } else if (LOAD_BYTES == 16u) {
        xw = x_uvec4[o.x / VEC];
        gw = dy_uvec4[o.y / VEC];
    } else if (LOAD_BYTES == 8u) {
        xw.xy = x_uvec2[o.x / VEC];
        gw.xy = dy_uvec2[o.y / VEC];
    } else {  // 2 float16
        xw.x = x[o.x / 2u];
        gw.x = dy[o.y / 2u];
    }
}

// The sums of one vector's elements (X words xw, dY words gw, as load_vectors gives them) whose
// bits are set in `mask` (bit i: element i of the vector; all of them unless MASKED).
vec4 vector_sums(uvec4 xw, uvec4 gw, float m, uint mask) {
    if (VEC == 1u) {
        const float gy = uintBitsToFloat(gw.x);
        const float a = uintBitsToFloat(xw.x) - m;
        return vec4(gy, a, gy * a, 0.0);
    }
    if (LOAD_BYTES == 16u) {
        if (IS_F16) return half_sums(gw.xy, xw.xy, m, mask) + half_sums(gw.zw, xw.zw, m, mask >> 4);
        return sums4(keep(uintBitsToFloat(gw), mask), keep(uintBitsToFloat(xw) - m, mask));
    }
    if (LOAD_BYTES == 8u) {
        if (IS_F16) return half_sums(gw.xy, xw.xy, m, mask);
        return sums2(keep(uintBitsToFloat(gw.xy), mask), keep(uintBitsToFloat(xw.xy) - m, mask));
    }
    return sums2(keep(unpackHalf2x16(gw.x), mask), keep(unpackHalf2x16(xw.x) - m, mask));
}

// WRITE_DX: dX's words of one whole vector (VEC > 1) at dX element offset o.
void store_vector(uint o, uvec4 words) {
    if (LOAD_BYTES == 16u) {
        dx_uvec4[o / VEC] = words;
    } else if (LOAD_BYTES == 8u) {
        dx_uvec2[o / VEC] = words.xy;
    } else {
        dx[o / 2u] = words.x;
    }
}

// WRITE_DX: dX of one vector (dY words gw) at dX element offset o, the elements in `mask`.
void store_dx(uint o, uvec4 gw, float coef, uint mask) {
    if (VEC == 1u) {
        STORE(dx, o, uintBitsToFloat(gw.x) * coef)
    } else if (mask != WHOLE_VECTOR) {  // MASKED, a run's first or last vector
        const uint e = o - o % VEC;  // the vector's first element
        for (uint w = 0u; w < LOAD_BYTES / 4u; ++w) {
            const uint word = scaled(gw[w], coef);
            if (!IS_F16) {
                if ((mask & (1u << w)) != 0u) dx[e + w] = word;
            } else if (((mask >> (2u * w)) & 3u) == 3u) {
                dx[e / 2u + w] = word;
            } else {  // one half of the word is this run's; the other may be another's
                for (uint h = 0u; h < 2u; ++h) {
                    if ((mask & (1u << (2u * w + h))) != 0u) {
                        STORE_HALF_BITS(dx, e + 2u * w + h, (word >> (16u * h)) & 0xFFFFu)
                    }
                }
            }
        }
    } else {
        store_vector(o, scaled(gw, coef));
    }
}

// MASKED: the elements of the vector at padded index r (a multiple of VEC; its innermost
// coordinate r % R_SIZES7 counts from the aligned vector that holds the run's first element)
// and element offset o that lie in the run, as bits; 0 when the vector is past the run's end.
uint run_mask(uint r, uint o) {
    const int first = int(o % VEC) - int(r % R_SIZES7);  // the run's, in this vector
    const int end = first + int(RUN);
    if (end <= 0) return 0u;
    const uint lo = uint(max(first, 0)), hi = uint(min(end, int(VEC)));
    return ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}

// WRITE_DX's factor of channel k (X offsets ko, output offsets kd), as
// batch_normalization_grad_output computes it: dX = dY * Scale / sqrt(Variance + Epsilon).
float dx_factor(uvec4 ko, uvec4 kd) {
    return LOAD(scale, kd.y) / sqrt(LOAD(variance, ko.w) + EPSILON);
}

// Element i of a vector's words (as load_vectors gives them, VEC > 1).
float element(uvec4 words, uint i) {
    return IS_F16 ? unpackHalf2x16(words[i / 2u])[i % 2u] : uintBitsToFloat(words[i]);
}

// SPAN: the span channel of slot 0 of vector sv's elements (.x), and the slot from which they
// belong to the next channel (.y; VEC where none do).
uvec2 span_lane(uint sv) {
    const uint first = sv * VEC;  // the vector's first element in a span row
    const uint lo = first / RUN;
    return uvec2(lo, min((lo + 1u) * RUN - first, VEC));
}

// SPAN: res[kl] (kl < SPAN) = the sums of span channel kl over the workgroup, from each
// lane's `lo` (its first channel's) and `hi` (the next channel's, where its vector crosses
// into it), in a fixed order: per channel the lo parts, then the hi parts, each by a loop over
// lanes and subgroupAdd. Called by every invocation (it holds barriers).
void span_sums(vec4 lo, vec4 hi, uint t) {
    for (uint part = 0u; part < 2u; ++part) {
        sh[t] = part == 0u ? lo : hi;
        barrier();
        for (uint kl = gl_SubgroupID; kl < SPAN; kl += gl_NumSubgroups) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < SV * SPAN_LR; i += gl_SubgroupSize) {
                const uvec2 lane = span_lane(i % SV);  // lane i's channels
                if (part == 0u ? lane.x == kl : lane.y < VEC && lane.x + 1u == kl) acc += sh[i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[kl] = part == 0u ? acc : res[kl] + acc;
        }
        barrier();
    }
}

// SPAN: work item (channel group grp, chunk j): its SPAN channels' sums into res[0 .. SPAN), and
// WRITE_DX's dX of every element it reads. Invocation t is vector sv = t % SV of the span rows
// q = j * ITERS * SPAN_LR + t / SV + i * SPAN_LR (i < ITERS; q counts the outer reduced
// indices, `reduced` / RUN of them). Called by every invocation.
void span_item(uint grp, uint j, uint t) {
    const uint sv = t % SV, rl = t / SV;
    const uint first = sv * VEC;  // the lane's first element in a span row
    const uvec2 lane = span_lane(sv);
    const uint lo = lane.x, split = lane.y;  // slots from `split` on: channel lo + 1
    vec4 lo_sums = vec4(0.0), hi_sums = vec4(0.0);
    if (rl < SPAN_LR) {
        const uint k0 = grp * SPAN;
        const uint hi = split < VEC ? lo + 1u : lo;
        const uvec4 ko0 = k_offsets(k0), klo = k_offsets(k0 + lo), khi = k_offsets(k0 + hi);
        const float mlo = shift(klo), mhi = shift(khi);
        float flo = 0.0, fhi = 0.0;
        uint dx0 = 0u;
        if (WRITE_DX) {
            dx0 = k_out_offsets(k0).x;
            flo = dx_factor(klo, k_out_offsets(k0 + lo));
            fhi = dx_factor(khi, k_out_offsets(k0 + hi));
        }
        float m[VEC], f[VEC];  // per slot: its channel's shift and dX factor
        vec4 acc[VEC];  // per slot: (sum dY, sum a, sum dY * a, 0)
        for (uint e = 0u; e < VEC; ++e) {
            m[e] = e < split ? mlo : mhi;
            f[e] = e < split ? flo : fhi;
            acc[e] = vec4(0.0);
        }
        const uint rows = reduced / RUN;
        const uint q0 = j * (ITERS * SPAN_LR) + rl;
        // AHEAD vectors in flight, as in main's loop.
        for (uint i = 0u; i < ITERS; i += AHEAD) {
            uvec4 xw[AHEAD], gw[AHEAD];
            uvec3 o[AHEAD];
            bool ok[AHEAD];
            for (uint u = 0u; u < AHEAD; ++u) {
                const uint q = q0 + (i + u) * SPAN_LR;
                o[u] = uvec3(ko0.xy, dx0) + r_offsets(q * RUN) + first;
                ok[u] = i + u < ITERS && q < rows;
                if (ok[u]) load_vectors(o[u], xw[u], gw[u]);
            }
            for (uint u = 0u; u < AHEAD; ++u) {
                if (!ok[u]) continue;
                for (uint e = 0u; e < VEC; ++e) {
                    const float gy = element(gw[u], e), a = element(xw[u], e) - m[e];
                    acc[e] += vec4(gy, a, gy * a, 0.0);
                }
                if (WRITE_DX) {  // each element times its own channel's factor
                    uvec4 words = uvec4(0u);
                    for (uint w = 0u; w < LOAD_BYTES / 4u; ++w) {
                        words[w] = scaled(gw[u][w], IS_F16 ? vec2(f[2u * w], f[2u * w + 1u])
                                                           : vec2(f[w]));
                    }
                    store_vector(o[u].z, words);
                }
            }
        }
        for (uint e = 0u; e < VEC; ++e) {
            if (e < split) {
                lo_sums += acc[e];
            } else {
                hi_sums += acc[e];
            }
        }
    }
    span_sums(lo_sums, hi_sums, t);
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint kl = K_FAST ? t % LK : t / LR;
    const uint rl = K_FAST ? t / LK : t % LR;
    const uint items = groups * chunks;
    for (uint w = gl_WorkGroupID.x; w < items; w += gl_NumWorkGroups.x) {
        const uint grp = CHUNK_MAJOR ? w % groups : w / chunks;
        const uint j = CHUNK_MAJOR ? w / groups : w - grp * chunks;
        const uint k = grp * LK + kl;
        vec4 acc = vec4(0.0);
        if (SPAN > 0u) {
            span_item(grp, j, t);  // res[0 .. SPAN) ready
        } else if (k < channels && kl < LK && rl < LR) {
            const uvec4 ko = k_offsets(k);
            const float m = shift(ko);
            float coef = 0.0;
            uvec4 kd = uvec4(0u);
            if (WRITE_DX) {
                kd = k_out_offsets(k);
                coef = dx_factor(ko, kd);
            }
            const uint r0 = j * (ITERS * LR) + rl;  // in elements, or vectors when VEC > 1
            // AHEAD vectors are loaded before the first of them is added, so that all loads
            // of a batch are in flight at once; the additions keep their order, so the bits do
            // not depend on AHEAD. Each vector's X and dY are loaded before its dX is stored
            // (dX may be X's or dY's tensor: IN_PLACE). Offsets (and masks) are computed for
            // every slot of a batch, used or not, so that only the loads are conditional: with
            // the offsets inside the condition, the H100 ran float16 single elements at AHEAD 8
            // no faster than at AHEAD 1 (benchmarks/RESULTS.md).
            for (uint i = 0u; i < ITERS; i += AHEAD) {
                uvec4 xw[AHEAD], gw[AHEAD];
                uvec3 o[AHEAD];
                bool ok[AHEAD];
                uint mask[AHEAD];  // MASKED: the elements to add and store
                for (uint u = 0u; u < AHEAD; ++u) {
                    const uint r = (r0 + (i + u) * LR) * VEC;
                    o[u] = uvec3(ko.xy, kd.x) + r_offsets(r);
                    mask[u] = MASKED ? run_mask(r, o[u].x) : WHOLE_VECTOR;
                    // MASKED: the last vector a run can touch may lie past its end
                    ok[u] = i + u < ITERS && r < reduced && mask[u] != 0u;
                    if (ok[u]) load_vectors(o[u], xw[u], gw[u]);
                }
                for (uint u = 0u; u < AHEAD; ++u) {
                    if (ok[u]) {
                        acc += vector_sums(xw[u], gw[u], m, mask[u]);
                        if (WRITE_DX) store_dx(o[u].z, gw[u], coef, mask[u]);
                    }
                }
            }
        }
        if (SPAN == 0u) column_sums(acc, kl, rl);
        const uint kt = grp * LK + t;
        if (t < LK && kt < channels) {
            const uvec4 ko = k_offsets(kt);
            const vec4 p = vec4(res[t].xyz, shift(ko));  // finalize needs the shift
            if (FINISH) {
                const uvec4 kd = k_out_offsets(kt);
                finish_channel(kt, p.xyz, p.w, LOAD(mean, ko.z), LOAD(variance, ko.w) + EPSILON,
                               LOAD(scale, kd.y), kd.z, kd.w);
            } else {
                partials[kt * chunks + j] = p;
            }
        }
    }
}
