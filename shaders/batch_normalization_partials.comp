// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD, reduction stage 1 of 2: partial
// sums per (channel, chunk).
//
//   For channel k (the kept dimensions K, where the statistics' sizes equal the input's) and
//   chunk j of its reduced index range r (the dimensions R where the statistics' sizes are 1):
//     part[k * chunks + j] = ( sum dY, sum a, sum dY * a, 0 ),   a = X - Mean[k]
//   over r in [j * ITERS * LR * VEC, (j + 1) * ITERS * LR * VEC) clipped to `reduced`.
//
// Shifting X by the supplied Mean keeps the sums small when Mean is near the batch mean (the
// intended use), so the training grad's covariance needs no second pass. Sums are float32 in
// a fixed order: ITERS terms (or vectors) per invocation, then subgroupAdd and a fixed loop over
// subgroups in shared memory; stage 2 (batch_normalization_finalize) reduces the partials of
// a channel the same way. No atomics: results are bitwise identical run to run.
//
// With VEC > 1 (X and dY walk the innermost reduced dimension contiguously, its size and every
// other stride a multiple of VEC) a lane reads VEC elements with one load of 16, 8 or 4 bytes
// (float32: 4 or 2 elements; float16: 8, 4 or 2) and adds them pairwise before its running
// sum; ITERS then counts vectors, and a chunk is ITERS * LR * VEC elements.
//
// Work item w = (channel group g, chunk j), g = w / chunks: LK channels by LR = WG / LK lanes.
// K_FAST: invocation t takes channel g*LK + t % LK and lane t / LK (consecutive invocations
// on consecutive channels: coalesced when a kept dimension is innermost in memory, NHWC);
// otherwise channel g*LK + t / LR and lane t % LR (coalesced for NCHW, and LK = 1 when a
// channel has at least WG elements).
//
// Bindings (set 0):
//   0  x     InputTensor          read (also viewed as uvec2 and uvec4 for VEC > 1)
//   1  dy    InputGradientTensor  read (also viewed as uvec2 and uvec4 for VEC > 1)
//   2  mean  MeanTensor           read
//   3  part  scratch partials     write (vec4 per channel and chunk, channel-major)
// Specialization constants: 0 workgroup width WG, 1 IS_F16, 2 K_FAST, 3 LK, 4 ITERS,
//   5..12 K sizes, 13..20 X strides over K, 21..28 dY strides over K, 29..36 Mean strides over
//   K, 37..44 R sizes, 45..52 X strides over R, 53..60 dY strides over R (8 dimensions each,
//   right-aligned, in elements; K and R coalesced on the host), 61 VEC (1, 2, 4 or 8).
// Push constants: channels, reduced (elements per channel), chunks (per channel), groups.
// Dispatch: up to 65535 workgroups; a workgroup-stride loop over groups * chunks work items
//   (uniform per workgroup, so the barriers inside are in uniform control flow).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define DIMS8(NAME, ID, DEF)                                                            \
    layout(constant_id = ID + 0) const uint NAME##0 = DEF;                              \
    layout(constant_id = ID + 1) const uint NAME##1 = DEF;                              \
    layout(constant_id = ID + 2) const uint NAME##2 = DEF;                              \
    layout(constant_id = ID + 3) const uint NAME##3 = DEF;                              \
    layout(constant_id = ID + 4) const uint NAME##4 = DEF;                              \
    layout(constant_id = ID + 5) const uint NAME##5 = DEF;                              \
    layout(constant_id = ID + 6) const uint NAME##6 = DEF;                              \
    layout(constant_id = ID + 7) const uint NAME##7 = DEF;

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool K_FAST = false;
layout(constant_id = 3) const uint LK = 1;
layout(constant_id = 4) const uint ITERS = 16;
DIMS8(KN, 5, 1)
DIMS8(KXS, 13, 0)
DIMS8(KDYS, 21, 0)
DIMS8(KMS, 29, 0)
DIMS8(RN, 37, 1)
DIMS8(RXS, 45, 0)
DIMS8(RDYS, 53, 0)
layout(constant_id = 61) const uint VEC = 1;

const uint WG = gl_WorkGroupSize.x;
const uint LR = WG / LK;

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 0) readonly buffer X2 { uvec2 x2[]; };
layout(set = 0, binding = 1) readonly buffer DY2 { uvec2 dy2[]; };
layout(set = 0, binding = 0) readonly buffer X4 { uvec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer DY4 { uvec4 dy4[]; };
layout(set = 0, binding = 2) readonly buffer MEAN { uint mean_[]; };
layout(set = 0, binding = 3) writeonly buffer PART { vec4 part[]; };
layout(push_constant) uniform Push { uint channels; uint reduced; uint chunks; uint groups; };

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))

// Offsets of channel k in X, dY and Mean.
uvec3 k_offsets(uint k) {
    uint rem = k, c;
    uvec3 o = uvec3(0u);
    c = rem % KN7; rem /= KN7; o += c * uvec3(KXS7, KDYS7, KMS7);
    c = rem % KN6; rem /= KN6; o += c * uvec3(KXS6, KDYS6, KMS6);
    c = rem % KN5; rem /= KN5; o += c * uvec3(KXS5, KDYS5, KMS5);
    c = rem % KN4; rem /= KN4; o += c * uvec3(KXS4, KDYS4, KMS4);
    c = rem % KN3; rem /= KN3; o += c * uvec3(KXS3, KDYS3, KMS3);
    c = rem % KN2; rem /= KN2; o += c * uvec3(KXS2, KDYS2, KMS2);
    c = rem % KN1; rem /= KN1; o += c * uvec3(KXS1, KDYS1, KMS1);
    o += rem * uvec3(KXS0, KDYS0, KMS0);
    return o;
}

// Offsets of reduced index r in X and dY (relative to the channel's).
uvec2 r_offsets(uint r) {
    uint rem = r, c;
    uvec2 o = uvec2(0u);
    c = rem % RN7; rem /= RN7; o += c * uvec2(RXS7, RDYS7);
    c = rem % RN6; rem /= RN6; o += c * uvec2(RXS6, RDYS6);
    c = rem % RN5; rem /= RN5; o += c * uvec2(RXS5, RDYS5);
    c = rem % RN4; rem /= RN4; o += c * uvec2(RXS4, RDYS4);
    c = rem % RN3; rem /= RN3; o += c * uvec2(RXS3, RDYS3);
    c = rem % RN2; rem /= RN2; o += c * uvec2(RXS2, RDYS2);
    c = rem % RN1; rem /= RN1; o += c * uvec2(RXS1, RDYS1);
    o += rem * uvec2(RXS0, RDYS0);
    return o;
}

// (sum g, sum a, sum g * a, 0) of four or two elements, pairwise.
vec4 sums4(vec4 g, vec4 a) {
    const vec4 ga = g * a;
    return vec4((g.x + g.y) + (g.z + g.w), (a.x + a.y) + (a.z + a.w),
                (ga.x + ga.y) + (ga.z + ga.w), 0.0);
}
vec4 sums2(vec2 g, vec2 a) { return vec4(g.x + g.y, a.x + a.y, g.x * a.x + g.y * a.y, 0.0); }

vec4 half_sums(uvec2 gw, uvec2 xw, float m) {
    return sums4(vec4(unpackHalf2x16(gw.x), unpackHalf2x16(gw.y)),
                 vec4(unpackHalf2x16(xw.x), unpackHalf2x16(xw.y)) - m);
}

// The sums of the VEC elements of X and dY at element offsets ox, oy (multiples of VEC).
vec4 vector_sums(uint ox, uint oy, float m) {
    if (VEC * (IS_F16 ? 2u : 4u) == 16u) {
        const uvec4 xw = x4[ox / VEC];
        const uvec4 gw = dy4[oy / VEC];
        if (IS_F16) return half_sums(gw.xy, xw.xy, m) + half_sums(gw.zw, xw.zw, m);
        return sums4(uintBitsToFloat(gw), uintBitsToFloat(xw) - m);
    }
    if (VEC * (IS_F16 ? 2u : 4u) == 8u) {
        const uvec2 xw = x2[ox / VEC];
        const uvec2 gw = dy2[oy / VEC];
        if (IS_F16) return half_sums(gw, xw, m);
        return sums2(uintBitsToFloat(gw), uintBitsToFloat(xw) - m);
    }
    return sums2(unpackHalf2x16(dy[oy / 2u]), unpackHalf2x16(x[ox / 2u]) - m);  // 2 float16
}

shared vec4 sh[WG];
shared vec4 res[WG];

// Sum v over the LR lanes of every channel slot kl < LK of the workgroup into res[kl], in a
// fixed order for any subgroup size. Called by every invocation (it holds barriers).
void column_sums(vec4 v, uint kl, uint rl) {
    if (LR == 1u) {
        if (kl < LK && rl < LR) res[kl] = v;  // one lane per channel: nothing to add
    } else if (LK == 1u) {
        v = subgroupAdd(v);
        if (gl_SubgroupInvocationID == 0u) sh[gl_SubgroupID] = v;
        barrier();
        if (gl_SubgroupID == 0u) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
                acc += sh[i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[0] = acc;
        }
    } else {
        if (kl < LK && rl < LR) sh[K_FAST ? rl * LK + kl : kl * LR + rl] = v;
        barrier();
        // Subgroup s adds up the columns s, s + NumSubgroups, ...
        for (uint col = gl_SubgroupID; col < LK; col += gl_NumSubgroups) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < LR; i += gl_SubgroupSize) {
                acc += sh[K_FAST ? i * LK + col : col * LR + i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[col] = acc;
        }
    }
    barrier();
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint kl = K_FAST ? t % LK : t / LR;
    const uint rl = K_FAST ? t / LK : t % LR;
    const uint items = groups * chunks;
    for (uint w = gl_WorkGroupID.x; w < items; w += gl_NumWorkGroups.x) {
        const uint grp = w / chunks;
        const uint j = w - grp * chunks;
        const uint k = grp * LK + kl;
        vec4 acc = vec4(0.0);
        if (k < channels && kl < LK && rl < LR) {
            const uvec3 ko = k_offsets(k);
            const float m = LOAD(mean_, ko.z);
            const uint r0 = j * (ITERS * LR) + rl;  // in elements, or vectors when VEC > 1
            for (uint i = 0u; i < ITERS; ++i) {
                const uint r = (r0 + i * LR) * VEC;
                if (r < reduced) {
                    const uvec2 ro = r_offsets(r);
                    if (VEC > 1u) {
                        acc += vector_sums(ko.x + ro.x, ko.y + ro.y, m);
                    } else {
                        const float gy = LOAD(dy, ko.y + ro.y);
                        const float a = LOAD(x, ko.x + ro.x) - m;
                        acc += vec4(gy, a, gy * a, 0.0);
                    }
                }
            }
        }
        column_sums(acc, kl, rl);
        if (t < LK && grp * LK + t < channels) part[(grp * LK + t) * chunks + j] = res[t];
    }
}
