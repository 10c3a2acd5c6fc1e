// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD (batch_normalization_training_grad), and with
// CONSTANT_STATISTICS DML_OPERATOR_BATCH_NORMALIZATION_GRAD (batch_normalization_grad),
// OutputGradient, general strided form.
//
//   dX = alpha * ((dY - mean_R(dY)) - ((X - Mean) - ma) * q)            (docs/semantics.md §5)
//   CONSTANT_STATISTICS: dX = dY * coefficients[2k].x (Scale / sqrt(Variance + Epsilon),
//   correctly rounded; §5.1); X is not read.
//
// with the per-channel coefficients the sums kernel stored as it finished the channel:
//   coefficients[2k] = (alpha = Scale / sqrt(Var + eps), q = mean_R(Coef1) / (Var + eps),
//   Mean, ma), coefficients[2k + 1].x = mean_R(dY), ma = mean_R(X) - Mean. Mean is subtracted
//   before ma so that X - mean_R(X) keeps float32 precision when the data sit far from zero.
//
// Constants: SIZES, the strides of X, dY and dX, and CHANNEL_STRIDES (the channel index's
//   stride per dimension: 0 on reduced dimensions); 8 dimensions, right-aligned, in elements.
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define BATCH_NORMALIZATION_TRAINING_DX_ONLY
#include "batch_normalization_grad.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
DIMS8(uint, SIZES, 2, 1)
DIMS8_4(uint, X_STRIDES, DY_STRIDES, DX_STRIDES, CHANNEL_STRIDES, 10, 0)
layout(constant_id = 42) const bool CONSTANT_STATISTICS = false;

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
// scratch: 2 vec4 per channel
layout(set = 0, binding = 2) readonly buffer COEFFICIENTS { vec4 coefficients[]; };
// OutputGradientTensor (float16 stores use integer atomics on shared words)
layout(set = 0, binding = 3) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; uint first; };

// One element at offsets o in X, dY and dX, of channel o.w.
void element(uvec4 o) {
    const vec4 a = coefficients[2u * o.w];
    const float mdy = coefficients[2u * o.w + 1u].x;
    const float gy = LOAD(dy, o.y);
    STORE(dx, o.z, CONSTANT_STATISTICS ? gy * a.x : training_dx(LOAD(x, o.x), gy, a, mdy))
}

#define ADD_OFFSETS(D, c)                                                               \
    o += (c) * uvec4(X_STRIDES##D, DY_STRIDES##D, DX_STRIDES##D, CHANNEL_STRIDES##D);
ELEMENTWISE_MAIN8(uvec4, ADD_OFFSETS)
