// DML_OPERATOR_RESAMPLE_GRAD (resample_grad), last step of the atomic path for float16 dX:
// round the packed float32 accumulator once to float16 and store it in dX's layout.
//
//   dX[i] = float16(accumulator[i])        (accumulator packed row-major, dX any
//                                           non-overlapping strides)
//
// Constants: PAIRED (dX packed: one invocation per word, two elements, plain stores), SIZES
//   and DX_STRIDES (4 dimensions, right-aligned).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dX elements (PAIRED:
//   words).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool PAIRED = false;
DIMS4(uint, SIZES, 2, 1)
DIMS4(uint, DX_STRIDES, 6, 0)

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
            uint hi = 2u * w + 1u < count ? half_of(2u * w + 1u) : 0u;
            dx[w] = half_of(2u * w) | (hi << 16u);
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint o = 0u;
            FOR_EACH_COORDINATE4(SIZES, e, ADD_OFFSET)
            STORE_HALF_BITS(dx, o, half_of(e));
        }
    }
}
