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
// One workgroup per channel (a grid-stride loop over the channels [first, end)): its lanes read
// the channel's partials (batch_normalization_training.glsl), contiguous, word by word, and add
// the digits into shared memory with integer atomics (exact in any order; each group's digits
// are below 2^16 after stage 1's normalisation, so 32768 groups fit), then two lanes normalise
// and round the two sums and one finishes the channel.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const float EPSILON = 0.0;
DIMS8(uint, K_SIZES, 3, 1)
DIMS8(uint, K_SCALE_STRIDES, 11, 0)
DIMS8(uint, K_BIAS_STRIDES, 19, 0)
DIMS8(uint, K_MEAN_STRIDES, 27, 0)
DIMS8(uint, K_VARIANCE_STRIDES, 35, 0)

const uint SUMS = 2u;  // a = X - shift and a^2
#define EXACT_SLOTS SUMS
#include "exact_sums.glsl"
#include "batch_normalization_training.glsl"

layout(set = 0, binding = 0) readonly buffer PARTIALS { int partials[]; };  // scratch
layout(set = 0, binding = 1) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 2) readonly buffer BIAS { uint bias[]; };  // BiasTensor
// OutputMeanTensor, OutputVarianceTensor (float16 stores use integer atomics on shared words)
layout(set = 0, binding = 3) buffer MEAN { uint mean[]; };
layout(set = 0, binding = 4) buffer VARIANCE { uint variance[]; };
// scratch: one vec4 per channel
layout(set = 0, binding = 5) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(push_constant) uniform Push { uint end; uint first; uint reduced; uint groups; };

shared float sums[2];

#define ADD_K(D, c) o += (c) * uvec4(K_SCALE_STRIDES##D, K_BIAS_STRIDES##D,                 \
                                     K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D);

void main() {
    const uint t = gl_LocalInvocationIndex;
    for (uint k = first + gl_WorkGroupID.x; k < end; k += gl_NumWorkGroups.x) {
        barrier();  // the previous channel is finished
        exact_clear();
        barrier();
        // One group: stage 1 rounded the sums (ROUNDED_WORDS); else add the groups' digits.
        const uint words = groups * SUMS * PARTIAL_WORDS, at = k * words;
        for (uint w = t; groups > 1u && w < words; w += WG) deposit_partial(w, partials[at + w]);
        barrier();
        for (uint s = t; s < SUMS; s += WG) {
            if (groups == 1u) {
                sums[s] = intBitsToFloat(partials[k * ROUNDED_WORDS + s]);
            } else {
                exact_normalize(s);
                sums[s] = exact_to_float(s);
            }
        }
        barrier();
        if (t == 0u) {
            uvec4 o = uvec4(0u);
            FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K)
            const float shift = intBitsToFloat(groups == 1u ? partials[k * ROUNDED_WORDS + SUMS]
                                                            : partials[at + EXACT_DIGITS + 1u]);
            const float n = float(reduced);
            precise float dm = cr_div(sums[0], n);
            precise float mean_value = shift + dm;
            precise float v = cr_div(sums[1], n) - dm * dm;
            // Rounding can take a variance of nearly 0 below it; NaN stays NaN.
            const float var_value = v < 0.0 ? 0.0 : v;
            precise float ve = var_value + EPSILON;
            const float c = cr_div(LOAD(scale, o.x), cr_sqrt(ve));
            coefficients[k] = vec4(mean_value, c, LOAD(bias, o.y), 0.0);
            if (IS_F16) {
                STORE_HALF_BITS(mean, o.z, half_from_float(mean_value))
                STORE_HALF_BITS(variance, o.w, half_from_float(var_value))
            } else {
                mean[o.z] = floatBitsToUint(mean_value);
                variance[o.w] = floatBitsToUint(var_value);
            }
        }
    }
}
