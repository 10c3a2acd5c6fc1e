// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING (batch_normalization_training), stage 2: per
// channel, the exact sums of stage 1's chunk groups, rounded once to float32, and from them
// (docs/semantics.md §18):
//
//   d        = S_a / n                 (S_a = sum of a = X - shift, exact, then rounded)
//   Mean     = shift + d
//   Variance = max(S_aa / n - d^2, 0)   (S_aa = sum of a^2)
//   coefficients[k] = (Mean, Scale / sqrt(Variance + Epsilon), Bias, 0)
//
// every operation correctly rounded (cr_div, cr_sqrt, `precise`), so the same bits on every
// device. OutputMean and OutputVariance round once to the tensors' type.
//
// The shift is recomputed here as stage 1 computed it (chunk (0, 0)'s mean).
// One workgroup per channel (a grid-stride loop over the channels [first, end)): lane t adds the digits of
// groups t, t + WG, ... (each below 2^16 after stage 1's normalisation, so 32768 groups fit),
// then subgroupAdd and a loop over subgroups add the lanes' digits: integers, exact in any
// order.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const float EPSILON = 0.0;
DIMS8(uint, K_SIZES, 3, 1)
DIMS8(uint, K_X_STRIDES, 11, 0)
DIMS8(uint, K_SCALE_STRIDES, 19, 0)
DIMS8(uint, K_BIAS_STRIDES, 27, 0)
DIMS8(uint, K_MEAN_STRIDES, 35, 0)
DIMS8(uint, K_VARIANCE_STRIDES, 43, 0)
DIMS8(uint, R_SIZES, 51, 1)
DIMS8(uint, R_X_STRIDES, 59, 0)

const uint PARTIAL_WORDS = 25u;
#define EXACT_SLOTS 1u
#include "exact_sums.glsl"

layout(set = 0, binding = 0) readonly buffer PARTIALS { int partials[]; };  // scratch
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 2) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 3) readonly buffer BIAS { uint bias[]; };  // BiasTensor
// OutputMeanTensor, OutputVarianceTensor (float16 stores use integer atomics on shared words)
layout(set = 0, binding = 4) buffer MEAN { uint mean[]; };
layout(set = 0, binding = 5) buffer VARIANCE { uint variance[]; };
// scratch: one vec4 per channel
layout(set = 0, binding = 6) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(push_constant) uniform Push { uint end; uint first; uint reduced; uint groups; };

shared int lane_sums[2u * EXACT_DIGITS * WG];
shared uint lane_flags[2u * WG];

#define ADD_K(D, c) o += (c) * uvec4(K_X_STRIDES##D, K_SCALE_STRIDES##D, K_BIAS_STRIDES##D, 0u); \
    om += (c) * uvec2(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D);
#define ADD_R(D, c) o += (c) * R_X_STRIDES##D;

uint element_offset(uint r) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R)
    return o;
}

// chunk (0, 0)'s mean, as stage 1 computes it.
float chunk_shift(uint base) {
    precise float a[16];
    for (uint i = 0u; i < 16u; ++i) {
        const uint r = 32u * i;
        a[i] = r < reduced ? LOAD(x, base + element_offset(r)) : 0.0;
    }
    for (uint h = 8u; h >= 1u; h >>= 1) {
        for (uint i = 0u; i < h; ++i) a[i] = a[i] + a[i + h];
    }
    const float m = cr_div(a[0], float(min(16u, (reduced + 31u) / 32u)));
    return isinf(m) || isnan(m) ? 0.0 : m;
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    for (uint k = first + gl_WorkGroupID.x; k < end; k += gl_NumWorkGroups.x) {
        int acc[2u * EXACT_DIGITS];
        for (uint i = 0u; i < 2u * EXACT_DIGITS; ++i) acc[i] = 0;
        uvec2 flags = uvec2(0u);
        for (uint g = t; g < groups; g += WG) {
            for (uint s = 0u; s < 2u; ++s) {
                const uint at = ((k * groups + g) * 2u + s) * PARTIAL_WORDS;
                for (uint i = 0u; i < EXACT_DIGITS; ++i) acc[s * EXACT_DIGITS + i] += partials[at + i];
                flags[s] |= uint(partials[at + EXACT_DIGITS]);
            }
        }
        for (uint i = 0u; i < 2u * EXACT_DIGITS; ++i) acc[i] = subgroupAdd(acc[i]);
        flags = subgroupOr(flags);
        barrier();  // the previous channel's lane sums are read
        if (subgroupElect()) {
            for (uint i = 0u; i < 2u * EXACT_DIGITS; ++i) {
                lane_sums[gl_SubgroupID * 2u * EXACT_DIGITS + i] = acc[i];
            }
            lane_flags[2u * gl_SubgroupID] = flags.x;
            lane_flags[2u * gl_SubgroupID + 1u] = flags.y;
        }
        barrier();
        if (t == 0u) {
            int d[2][EXACT_DIGITS];
            for (uint s = 0u; s < 2u; ++s) {
                for (uint i = 0u; i < EXACT_DIGITS; ++i) d[s][i] = 0;
            }
            for (uint j = 0u; j < gl_NumSubgroups; ++j) {
                for (uint s = 0u; s < 2u; ++s) {
                    for (uint i = 0u; i < EXACT_DIGITS; ++i) {
                        d[s][i] += lane_sums[(j * 2u + s) * EXACT_DIGITS + i];
                    }
                }
                flags |= uvec2(lane_flags[2u * j], lane_flags[2u * j + 1u]);
            }
            EXACT_NORMALIZE(d[0])
            EXACT_NORMALIZE(d[1])
            const float sum_a = exact_to_float(d[0], flags.x);
            const float sum_aa = exact_to_float(d[1], flags.y);
            uvec4 o = uvec4(0u);
            uvec2 om = uvec2(0u);
            FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K)
            const float n = float(reduced);
            precise float dm = cr_div(sum_a, n);
            precise float mean_value = chunk_shift(o.x) + dm;
            precise float v = cr_div(sum_aa, n) - dm * dm;
            // Rounding can take a variance of nearly 0 below it; NaN stays NaN.
            const float var_value = v < 0.0 ? 0.0 : v;
            precise float ve = var_value + EPSILON;
            const float c = cr_div(LOAD(scale, o.y), cr_sqrt(ve));
            coefficients[k] = vec4(mean_value, c, LOAD(bias, o.z), 0.0);
            if (IS_F16) {
                STORE_HALF_BITS(mean, om.x, half_from_float(mean_value))
                STORE_HALF_BITS(variance, om.y, half_from_float(var_value))
            } else {
                mean[om.x] = floatBitsToUint(mean_value);
                variance[om.y] = floatBitsToUint(var_value);
            }
        }
    }
}
