// DML_OPERATOR_BATCH_NORMALIZATION_GRAD (batch_normalization_grad), OutputGradient, general
// strided form.
//
//   dX = dY * (Scale / sqrt(Variance + Epsilon))                        (docs/semantics.md §4)
//
// The division and square root correctly rounded (cr_div, cr_sqrt): the same bits on every
// device.
//
// Element-wise with constant statistics: no reduction, so it runs beside the reduction
// kernels (it reads only dY, Scale and Variance). The statistics are read through strides
// that are 0 on the reduced dimensions.
//
// Constants: SIZES and the strides of dY, dX, Scale and Variance (8 dimensions, right-aligned,
//   in elements; the statistics' strides are 0 where reduced).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const float EPSILON = 0.0;
DIMS8(uint, SIZES, 3, 1)
DIMS8_4(uint, DY_STRIDES, DX_STRIDES, SCALE_STRIDES, VARIANCE_STRIDES, 11, 0)

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 1) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 2) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
// OutputGradientTensor (float16 stores use integer atomics on shared words)
layout(set = 0, binding = 3) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; uint first; };

// One element at offsets o in dY, dX, Scale and Variance.
void element(uvec4 o) {
    const float v = LOAD(dy, o.x) * cr_div(LOAD(scale, o.z),
                                           cr_sqrt(LOAD(variance, o.w) + EPSILON));
    STORE(dx, o.y, v)
}

#define ADD_OFFSETS(D, c)                                                               \
    o += (c) * uvec4(DY_STRIDES##D, DX_STRIDES##D, SCALE_STRIDES##D, VARIANCE_STRIDES##D);
ELEMENTWISE_MAIN8(uvec4, ADD_OFFSETS)
