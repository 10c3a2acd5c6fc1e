// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad), reduction stage 2 of 2: per
// channel, the fixed-order sum of the stage-1 partials (batch_normalization_grad_partials),
// the scale and bias gradients, and the per-channel coefficients of the training grad's dX.
//
//   s = (sum dY, sum a, sum dY a) = sum over chunks of partials[k * chunks + j].xyz, with
//   a = X - shift (partials[k * chunks].w: the Mean, or for the training grad the channel's
//   first X), then OutputBiasGradient, OutputScaleGradient and the training grad's terms as
//   include/batch_normalization_grad.glsl says:
//   coefficients[2k]     = (alpha, q, shift, ma)
//   coefficients[2k + 1] = (mean_R(dY), 0, 0, 0)
// so that the training grad's dX = alpha * ((dY - mean_R(dY)) - ((X - shift) - ma) * q)
// (its output kernels). The constant-statistics grad ignores the coefficients.
//
// Each work item is LK channels by LR = WG / LK lanes; lane p adds partials p, p + LR, ... of
// its channel in order, then the lanes are added with subgroupAdd and shared memory in a
// fixed order (include/workgroup_sums.glsl, as in stage 1). Deterministic; no atomics except
// float16 stores.
//
// Constants: K_SIZES and the strides over the kept dimensions K of Mean, Variance, Scale and
//   the two parameter gradients (8 dimensions, right-aligned, in elements); N_R is the
//   reduced element count as a float.
// Push constants: channels, chunks (partials per channel).
// Dispatch: up to 65535 workgroups; workgroup-stride loop over ceil(channels / LK) items.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const uint LK = 1;
layout(constant_id = 3) const float EPSILON = 0.0;
layout(constant_id = 4) const float N_R = 1.0;
layout(constant_id = 53) const bool TRAINING = false;
DIMS8(uint, K_SIZES, 5, 1)
DIMS8_5(uint, K_MEAN_STRIDES, K_VARIANCE_STRIDES, K_SCALE_STRIDES, K_DSCALE_STRIDES,
        K_DBIAS_STRIDES, 13, 0)

const uint LR = WG / LK;
const bool K_FAST = false;
#include "workgroup_sums.glsl"

layout(set = 0, binding = 0) readonly buffer PARTIALS { vec4 partials[]; };  // scratch
layout(set = 0, binding = 1) readonly buffer MEAN { uint mean[]; };  // MeanTensor
layout(set = 0, binding = 2) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 3) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
// OutputScaleGradientTensor and OutputBiasGradientTensor (float16: integer atomics on shared
// words), then the scratch coefficients (2 vec4 per channel)
layout(set = 0, binding = 4) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 5) buffer DBIAS { uint dbias[]; };
layout(set = 0, binding = 6) writeonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(push_constant) uniform Push { uint channels; uint chunks; };

#define BATCH_NORMALIZATION_FINISH
#include "batch_normalization_grad.glsl"

#define ADD_K_OFFSETS(D, c)                                                             \
    a += (c) * uvec3(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D, K_SCALE_STRIDES##D);     \
    b += (c) * uvec2(K_DSCALE_STRIDES##D, K_DBIAS_STRIDES##D);

// Offsets of channel k in Mean, Variance, Scale (a) and the two gradients (b).
void k_offsets(uint k, out uvec3 a, out uvec2 b) {
    a = uvec3(0u);
    b = uvec2(0u);
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_OFFSETS)
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint kl = t / LR;
    const uint rl = t % LR;
    const uint groups = (channels + LK - 1u) / LK;
    for (uint w = gl_WorkGroupID.x; w < groups; w += gl_NumWorkGroups.x) {
        const uint k = w * LK + kl;
        vec4 acc = vec4(0.0);
        if (k < channels && kl < LK) {
            for (uint p = rl; p < chunks; p += LR) acc += partials[k * chunks + p];
        }
        column_sums(acc, kl, rl);
        const uint kt = w * LK + t;
        if (t < LK && kt < channels) {
            const vec4 s = res[t];
            uvec3 a;
            uvec2 b;
            k_offsets(kt, a, b);
            const float shift = partials[kt * chunks].w;  // each partial carries it
            finish_channel(kt, s.xyz, shift, LOAD(mean, a.x), LOAD(variance, a.y) + EPSILON,
                           LOAD(scale, a.z), b.x, b.y);
        }
    }
}
