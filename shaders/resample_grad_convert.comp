// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), last step of the
// atomic path when dX cannot accumulate in place (float16, or a float32 dX with gaps between its
// elements): store the packed float32 accumulator in dX's data type and layout, rounding float16
// once.
//
//   dX[i] = accumulator[i]        (accumulator packed row-major, dX any non-overlapping
//                                  strides; only dX's elements are written)
//
// Constants: IS_F16, PAIRED (float16 dX packed: one invocation per word, two elements, plain
//   stores), SIZES and DX_STRIDES (4 dimensions, right-aligned).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dX elements (PAIRED:
//   words).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool PAIRED = false;
DIMS4(uint, SIZES, 3, 1)
DIMS4(uint, DX_STRIDES, 7, 0)

layout(set = 0, binding = 0) readonly buffer ACCUMULATOR { uint accumulator[]; };  // scratch
// OutputGradientTensor (strided float16 stores use integer atomics on shared words)
layout(set = 0, binding = 1) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

uint half_of(uint e) {
    return HALF_FROM_FLOAT(uintBitsToFloat(accumulator[e]));
}

#define ADD_OFFSET(D, c) o += (c) * DX_STRIDES##D;

void main() {
    if (PAIRED) {
        uint words = (count + 1u) >> 1u;
        GRID_STRIDE_LOOP(w, words) {
            if (2u * w + 1u < count) {
                dx[w] = half_of(2u * w) | (half_of(2u * w + 1u) << 16u);
            } else {  // an odd count: the word's other half is not dX's
                STORE_HALF_BITS(dx, 2u * w, half_of(2u * w));
            }
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint o = 0u;
            FOR_EACH_COORDINATE4(SIZES, e, ADD_OFFSET)
            STORE(dx, o, uintBitsToFloat(accumulator[e]))
        }
    }
}
