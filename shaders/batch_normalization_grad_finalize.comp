// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad), stage 2: per channel, the
// exact sums of stage 1's chunk groups (batch_normalization_training_sums with GRAD), each
// rounded once to float32,
//   s = (sum dY, sum a, sum dY a),  a = X - shift (the shift stored with the partials),
// then OutputBiasGradient, OutputScaleGradient and the training grad's coefficients as
// include/batch_normalization_grad.glsl says (every operation correctly rounded):
//   coefficients[2k]     = (alpha, q, shift, ma)
//   coefficients[2k + 1] = (mean_R(dY), 0, 0, 0)
// so that the training grad's dX = alpha * ((dY - mean_R(dY)) - ((X - shift) - ma) * q)
// (its output kernels). BATCH_NORMALIZATION_GRAD ignores the coefficients.
//
// One workgroup per channel (a grid-stride loop over the channels [first, end)): its lanes add
// the channel's partials (batch_normalization_training.glsl), contiguous, word by word, into
// shared digits with integer atomics (exact in any order), then three lanes round the three
// sums and one finishes the channel. Float16 stores use integer atomics on shared words.
//
// Constants: K_SIZES and the strides over the kept dimensions of Mean, Variance, Scale and the
//   two parameter gradients (8 dimensions, right-aligned, in elements); N_R is the reduced
//   element count as a float.
// Push constants: end, first (the channels of this dispatch), groups (chunk groups per
//   channel).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const float EPSILON = 0.0;
layout(constant_id = 3) const float N_R = 1.0;
layout(constant_id = 4) const bool TRAINING = false;
DIMS8(uint, K_SIZES, 5, 1)
DIMS8_5(uint, K_MEAN_STRIDES, K_VARIANCE_STRIDES, K_SCALE_STRIDES, K_DSCALE_STRIDES,
        K_DBIAS_STRIDES, 13, 0)

const uint SUMS = 3u;  // dY, a = X - shift, dY a
#define EXACT_SLOTS SUMS
#include "exact_sums.glsl"
#include "batch_normalization_training.glsl"

layout(set = 0, binding = 0) readonly buffer PARTIALS { int partials[]; };  // scratch
layout(set = 0, binding = 1) readonly buffer MEAN { uint mean[]; };  // MeanTensor
layout(set = 0, binding = 2) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 3) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
// OutputScaleGradientTensor and OutputBiasGradientTensor, then the scratch coefficients
// (2 vec4 per channel)
layout(set = 0, binding = 4) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 5) buffer DBIAS { uint dbias[]; };
layout(set = 0, binding = 6) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(push_constant) uniform Push { uint end; uint first; uint groups; };

#define BATCH_NORMALIZATION_FINISH
#include "batch_normalization_grad.glsl"

shared float sums[SUMS];

#define ADD_K(D, c)                                                                     \
    a += (c) * uvec3(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D, K_SCALE_STRIDES##D);     \
    b += (c) * uvec2(K_DSCALE_STRIDES##D, K_DBIAS_STRIDES##D);

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
            uvec3 a = uvec3(0u);
            uvec2 b = uvec2(0u);
            FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K)
            const float shift = intBitsToFloat(groups == 1u ? partials[k * ROUNDED_WORDS + SUMS]
                                                            : partials[at + EXACT_DIGITS + 1u]);
            precise float ve = LOAD(variance, a.y) + EPSILON;
            finish_channel(k, vec3(sums[0], sums[1], sums[2]), shift, LOAD(mean, a.x), ve,
                           LOAD(scale, a.z), b.x, b.y);
        }
    }
}
