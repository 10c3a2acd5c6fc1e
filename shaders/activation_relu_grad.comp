// DML_OPERATOR_ACTIVATION_RELU_GRAD (activation_relu_grad), general strided form.
//
//   dX[i] = X[i] > 0 ? dY[i] : +0        (a select, so NaN in dY passes only where X > 0)
//
// Results are bit copies of dY or +0: no arithmetic, so float16 and float32 are exact.
// Constants: SIZES and the strides of X, dY and dX (8 dimensions, right-aligned, in elements).
// Dispatch: any number of workgroups up to 65535; grid-stride loop over the `count` elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
DIMS8(uint, SIZES, 2, 1)
DIMS8_3(uint, X_STRIDES, DY_STRIDES, DX_STRIDES, 10, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
// OutputGradientTensor (float16 stores use integer atomics on shared words)
layout(set = 0, binding = 2) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

// Float bit patterns greater than +0: sign clear, not zero, not NaN (at most +Inf).
bool positive_f32(uint bits) { return bits - 1u < 0x7F800000u; }
bool positive_f16(uint bits) { return bits - 1u < 0x7C00u; }

// One element at offsets o in X, dY and dX.
void element(uvec3 o) {
    if (IS_F16) {
        uint bits = positive_f16(HALF_BITS(x, o.x)) ? HALF_BITS(dy, o.y) : 0u;
        STORE_HALF_BITS(dx, o.z, bits);
    } else {
        dx[o.z] = positive_f32(x[o.x]) ? dy[o.y] : 0u;
    }
}

#define ADD_OFFSETS(D, c) o += (c) * uvec3(X_STRIDES##D, DY_STRIDES##D, DX_STRIDES##D);
ELEMENTWISE_MAIN8(uvec3, ADD_OFFSETS)
