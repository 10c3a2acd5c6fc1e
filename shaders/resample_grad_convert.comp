// DML_OPERATOR_RESAMPLE_GRAD, last step of the atomic path for float16 dX: round the packed
// float32 accumulator once to float16 and store it in dX's layout.
//
//   dX[i] = float16(acc[i])        (acc packed row-major, dX any non-overlapping strides)
//
// Bindings (set 0):
//   0  acc  float32 accumulator (scratch)   read
//   1  dx   OutputGradientTensor            write (strided float16 stores use integer atomics
//           on shared words)
// Specialization constants: 0 local size x, 1 PAIRED (dX packed: one invocation per word,
//   two elements, plain stores), 2..5 dX sizes, 6..9 dX strides (4 dimensions, right-aligned).
// Push constants: count (dX elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over elements (PAIRED: words).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool PAIRED = false;
layout(constant_id = 2) const uint N0 = 1;
layout(constant_id = 3) const uint N1 = 1;
layout(constant_id = 4) const uint N2 = 1;
layout(constant_id = 5) const uint N3 = 1;
layout(constant_id = 6) const uint XS0 = 0;
layout(constant_id = 7) const uint XS1 = 0;
layout(constant_id = 8) const uint XS2 = 0;
layout(constant_id = 9) const uint XS3 = 0;

layout(set = 0, binding = 0) readonly buffer Acc { uint acc[]; };
layout(set = 0, binding = 1) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

uint half_of(uint e) {
    return HALF_FROM_FLOAT(uintBitsToFloat(acc[e]));
}

void main() {
    if (PAIRED) {
        uint words = (count + 1u) >> 1u;
        GRID_STRIDE_LOOP(w, words) {
            uint hi = 2u * w + 1u < count ? half_of(2u * w + 1u) : 0u;
            dx[w] = half_of(2u * w) | (hi << 16u);
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint r = e;
            uint i3 = r % N3; r /= N3;
            uint i2 = r % N2; r /= N2;
            uint i1 = r % N1;
            uint i0 = r / N1;
            STORE_HALF_BITS(dx, i0 * XS0 + i1 * XS1 + i2 * XS2 + i3 * XS3, half_of(e));
        }
    }
}
