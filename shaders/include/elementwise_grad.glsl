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
// GRAD_IN_FLOAT32 (for FLOAT32 and FLOAT16 tensors: float16 elements widen exactly and the
// result rounds once on store):
//
//     float grad(float x, float dy) { return ...; }
//     GRAD_IN_FLOAT32
//
// or the bit-level form this template calls, for results that must be bit copies (a select
// keeps NaN payloads and signed zeros whatever the driver's float conversions do) and for
// integer tensors:
//
//     uint grad_bits(uint x, uint dy)    the elements' bit patterns in the low ELEMENT_BITS
//                                        bits (the rest 0); the result likewise
//
// DATA_TYPE (constant 1) is the tensors' DML_TENSOR_DATA_TYPE (TYPE_FLOAT32 ...).
// Scalar parameters are specialization constants named as the field in capitals (or as the
// descriptor's kernel_parameters name them), numbered from PARAMETER_ID(0) in order:
//     layout(constant_id = PARAMETER_ID(0)) const float ALPHA = 1.0;
//
// Strided kernel (<operator>): constants WG, DATA_TYPE, SIZES, X_STRIDES, DY_STRIDES,
//   DX_STRIDES (8 dimensions, right-aligned, in elements), then the parameters; push
//   constants count and first: a grid-stride loop over the elements [first, count) (all of
//   them unless the plan splits the loop into several dispatches under a loop limit).
//   Elements narrower than a word (float16, 16- and 8-bit integers) are stored through
//   STORE_SUB_BITS (integer atomics on the shared word), so dx is read-write.
// Packed kernel (<operator>_packed), for X, dY and dX in one packed layout: word w of each
//   holds the same elements, so an invocation streams one 16-byte vector (4, 8 or 16
//   elements). Constants WG, DATA_TYPE, then the parameters; push constants count (the
//   vectors this dispatch ends at), elements (a tail vector writes only those: the rest of the
//   buffer keeps its contents, STORE_VECTOR_SUB) and first (the vector it starts at).
// Dispatch: up to 65535 workgroups; grid-stride loops.

#include "common.glsl"

// DirectML's DML_TENSOR_DATA_TYPE values (pyvkgrad.tensor.DataType).
#define TYPE_FLOAT32 1u
#define TYPE_FLOAT16 2u
#define TYPE_UINT32 3u
#define TYPE_UINT16 4u
#define TYPE_UINT8 5u
#define TYPE_INT32 6u
#define TYPE_INT16 7u
#define TYPE_INT8 8u
layout(constant_id = 1) const uint DATA_TYPE = TYPE_FLOAT32;
// Elements per 32-bit word, as a power of two (SUB_BITS' L): 0, 1 (16-bit) or 2 (8-bit).
const uint LANES_LOG2 = DATA_TYPE == TYPE_FLOAT16 || DATA_TYPE == TYPE_UINT16
                        || DATA_TYPE == TYPE_INT16 ? 1u
                      : DATA_TYPE == TYPE_UINT8 || DATA_TYPE == TYPE_INT8 ? 2u : 0u;
const uint ELEMENT_BITS = 32u >> LANES_LOG2;

uint grad_bits(uint x, uint dy);

// The bit-level form of a float32 formula `float grad(float x, float dy)`.
#define GRAD_IN_FLOAT32                                                                 \
    uint grad_bits(uint x, uint dy) {                                                   \
        return DATA_TYPE == TYPE_FLOAT16                                                \
            ? HALF_FROM_FLOAT(grad(unpackHalf2x16(x).x, unpackHalf2x16(dy).x))          \
            : floatBitsToUint(grad(uintBitsToFloat(x), uintBitsToFloat(dy)));           \
    }

#ifdef ELEMENTWISE_PACKED

#define PARAMETER_ID(k) (2 + (k))

layout(set = 0, binding = 0) readonly buffer X { uvec4 x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uvec4 dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 2) buffer DX_UINT { uint dx_uint[]; };  // the same, for a tail vector
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

// Four words of 2^LANES_LOG2 elements each (the lowest bits first).
uvec4 grad_vector(uvec4 xv, uvec4 dyv) {
    uvec4 v = uvec4(0u);
    for (uint k = 0u; k < 4u; ++k) {
        for (uint lane = 0u; lane < (1u << LANES_LOG2); ++lane) {
            const uint s = lane * ELEMENT_BITS;
            v[k] |= grad_bits((xv[k] >> s) & SUB_MASK(LANES_LOG2),
                              (dyv[k] >> s) & SUB_MASK(LANES_LOG2)) << s;
        }
    }
    return v;
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        const uvec4 v = grad_vector(x[i], dy[i]);
        STORE_VECTOR_SUB(dx, dx_uint, i, v, elements, LANES_LOG2)
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
    if (LANES_LOG2 == 0u) {
        dx[o.z] = grad_bits(x[o.x], dy[o.y]);
    } else {
        STORE_SUB_BITS(dx, o.z, grad_bits(SUB_BITS(x, o.x, LANES_LOG2),
                                          SUB_BITS(dy, o.y, LANES_LOG2)), LANES_LOG2);
    }
}

#define ADD_OFFSETS(D, c) o += (c) * uvec3(X_STRIDES##D, DY_STRIDES##D, DX_STRIDES##D);
ELEMENTWISE_MAIN8(uvec3, ADD_OFFSETS)

#endif
