// DML_OPERATOR_ACTIVATION_RELU_GRAD (activation_relu_grad), fast path for three identically
// packed tensors.
//
//   dX[i] = X[i] > 0 ? dY[i] : +0
//
// When X, dY and dX share one packed layout, word w of each holds the same elements, so
// the kernel streams 16-byte vectors: 4 float32 or 8 float16 elements per invocation. The
// select works on bit patterns, so results are exact copies of dY or +0 in both types.
//
// Push constants: count (16-byte vectors covering the elements), elements (logical elements:
//   a tail vector writes only those, the rest of the buffer keeps its contents).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;

layout(set = 0, binding = 0) readonly buffer X { uvec4 x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uvec4 dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 2) buffer DX_UINT { uint dx_uint[]; };  // the same, for a tail vector
layout(push_constant) uniform Push { uint count; uint elements; };

// Per 32-bit lane: keep dY where X is a positive float (sign clear, nonzero, not NaN).
uvec4 relu_grad_f32(uvec4 xv, uvec4 dyv) {
    bvec4 keep = lessThan(xv - 1u, uvec4(0x7F800000u));
    return mix(uvec4(0u), dyv, keep);
}

// Per 16-bit half of each lane, the same test on float16 bit patterns.
uvec4 relu_grad_f16(uvec4 xv, uvec4 dyv) {
    uvec4 lo = mix(uvec4(0u), dyv & 0xFFFFu, lessThan((xv & 0xFFFFu) - 1u, uvec4(0x7C00u)));
    uvec4 hi = mix(uvec4(0u), dyv & 0xFFFF0000u, lessThan((xv >> 16u) - 1u, uvec4(0x7C00u)));
    return lo | hi;
}

void main() {
    GRID_STRIDE_LOOP(i, count) {
        const uvec4 v = IS_F16 ? relu_grad_f16(x[i], dy[i]) : relu_grad_f32(x[i], dy[i]);
        STORE_VECTOR(dx, dx_uint, i, v, elements)
    }
}
