// Template of an element-wise gradient kernel, dX[i] = grad(X[i], dY[i]), for the operators on
// the element-wise base (pyvkgrad/ops/_elementwise.py). An operator's one shader file is its
// formula, shaders/elementwise/<operator>.glsl; from it the build (tools/build_shaders.py,
// elementwise_source) generates the operator's two kernels, strided and packed, each this
// template followed by the formula:
//
//     #version 450
//     #extension GL_GOOGLE_include_directive : require
//     #define ELEMENTWISE_PACKED                  (the packed kernel only)
//     #include "elementwise_grad.glsl"
//     #include "../elementwise/<operator>.glsl"
//
// The formula file defines either a formula in float32 arithmetic, followed by
// GRAD_IN_FLOAT32 (float16 elements widen exactly and the result rounds once on store):
//
//     float grad(float x, float dy) { return ...; }
//     GRAD_IN_FLOAT32
//
// or the two bit-level forms this template calls, for results that must be bit copies (a
// select keeps NaN payloads and signed zeros whatever the driver's float conversions do):
//
//     uint grad_f32(uint x, uint dy)     float32 bit patterns
//     uint grad_f16(uint x, uint dy)     float16 bit patterns in the low 16 bits (high bits 0)
//
// Scalar parameters (the descriptor's float fields) are float specialization constants named
// as the field in capitals, numbered from PARAMETER_ID(0) in the descriptor's field order:
//     layout(constant_id = PARAMETER_ID(0)) const float ALPHA = 1.0;
//
// Strided kernel (<operator>): constants WG, IS_F16, SIZES, X_STRIDES, DY_STRIDES, DX_STRIDES
//   (8 dimensions, right-aligned, in elements), then the parameters; push constants count and
//   first: a grid-stride loop over the elements [first, count) (all of them unless the plan
//   splits the loop into several dispatches under a loop limit). Float16 stores go through
//   STORE_HALF_BITS (integer atomics on the shared word), so dx is read-write.
// Packed kernel (<operator>_packed), for X, dY and dX in one packed layout: word w of each
//   holds the same elements, so an invocation streams one 16-byte vector (4 float32 or 8
//   float16 elements). Constants WG, IS_F16, then the parameters; push constants count (the
//   vectors this dispatch ends at), elements (a tail vector writes only those: the rest of the
//   buffer keeps its contents, STORE_VECTOR) and first (the vector it starts at).
// Dispatch: up to 65535 workgroups; grid-stride loops.

#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;

uint grad_f32(uint x, uint dy);
uint grad_f16(uint x, uint dy);

// The bit-level forms of a float32 formula `float grad(float x, float dy)`.
#define GRAD_IN_FLOAT32                                                                 \
    uint grad_f32(uint x, uint dy) {                                                    \
        return floatBitsToUint(grad(uintBitsToFloat(x), uintBitsToFloat(dy)));          \
    }                                                                                   \
    uint grad_f16(uint x, uint dy) {                                                    \
        return HALF_FROM_FLOAT(grad(unpackHalf2x16(x).x, unpackHalf2x16(dy).x));        \
    }

#ifdef ELEMENTWISE_PACKED

#define PARAMETER_ID(k) (2 + (k))

layout(set = 0, binding = 0) readonly buffer X { uvec4 x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uvec4 dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 2) buffer DX_UINT { uint dx_uint[]; };  // the same, for a tail vector
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

// Four words: four float32 elements, or eight float16 elements (low half first).
uvec4 grad_vector(uvec4 xv, uvec4 dyv) {
    uvec4 v;
    for (uint k = 0u; k < 4u; ++k) {
        v[k] = IS_F16 ? grad_f16(xv[k] & 0xFFFFu, dyv[k] & 0xFFFFu)
                            | (grad_f16(xv[k] >> 16u, dyv[k] >> 16u) << 16u)
                      : grad_f32(xv[k], dyv[k]);
    }
    return v;
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        const uvec4 v = grad_vector(x[i], dy[i]);
        STORE_VECTOR(dx, dx_uint, i, v, elements)
    }
}

#else

#define PARAMETER_ID(k) (34 + (k))
DIMS8(uint, SIZES, 2, 1)
DIMS8_3(uint, X_STRIDES, DY_STRIDES, DX_STRIDES, 10, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(push_constant) uniform Push { uint count; uint first; };

// One element at offsets o in X, dY and dX.
void element(uvec3 o) {
    if (IS_F16) {
        STORE_HALF_BITS(dx, o.z, grad_f16(HALF_BITS(x, o.x), HALF_BITS(dy, o.y)));
    } else {
        dx[o.z] = grad_f32(x[o.x], dy[o.y]);
    }
}

#define ADD_OFFSETS(D, c) o += (c) * uvec3(X_STRIDES##D, DY_STRIDES##D, DX_STRIDES##D);
ELEMENTWISE_MAIN8(uvec3, ADD_OFFSETS)

#endif
