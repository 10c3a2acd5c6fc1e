// DML_OPERATOR_ACTIVATION_RELU_GRAD, general strided form.
//
//   dX[i] = X[i] > 0 ? dY[i] : +0        (a select, so NaN in dY passes only where X > 0)
//
// Bindings (set 0):
//   0  x   InputTensor           read
//   1  dy  InputGradientTensor   read
//   2  dx  OutputGradientTensor  write (float16 stores use integer atomics on shared words)
// Specialization constants: 0 local size x, 1 IS_F16, 2..9 sizes, 10..17 X strides,
//   18..25 dY strides, 26..33 dX strides (8 dimensions, right-aligned, in elements).
// Push constants: count (logical elements).
// Dispatch: any number of workgroups up to 65535; grid-stride loop over the elements.
// Results are bit copies of dY or +0: no arithmetic, so float16 and float32 are exact.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const uint N0 = 1;
layout(constant_id = 3) const uint N1 = 1;
layout(constant_id = 4) const uint N2 = 1;
layout(constant_id = 5) const uint N3 = 1;
layout(constant_id = 6) const uint N4 = 1;
layout(constant_id = 7) const uint N5 = 1;
layout(constant_id = 8) const uint N6 = 1;
layout(constant_id = 9) const uint N7 = 1;
layout(constant_id = 10) const uint XS0 = 0;
layout(constant_id = 11) const uint XS1 = 0;
layout(constant_id = 12) const uint XS2 = 0;
layout(constant_id = 13) const uint XS3 = 0;
layout(constant_id = 14) const uint XS4 = 0;
layout(constant_id = 15) const uint XS5 = 0;
layout(constant_id = 16) const uint XS6 = 0;
layout(constant_id = 17) const uint XS7 = 0;
layout(constant_id = 18) const uint DYS0 = 0;
layout(constant_id = 19) const uint DYS1 = 0;
layout(constant_id = 20) const uint DYS2 = 0;
layout(constant_id = 21) const uint DYS3 = 0;
layout(constant_id = 22) const uint DYS4 = 0;
layout(constant_id = 23) const uint DYS5 = 0;
layout(constant_id = 24) const uint DYS6 = 0;
layout(constant_id = 25) const uint DYS7 = 0;
layout(constant_id = 26) const uint DXS0 = 0;
layout(constant_id = 27) const uint DXS1 = 0;
layout(constant_id = 28) const uint DXS2 = 0;
layout(constant_id = 29) const uint DXS3 = 0;
layout(constant_id = 30) const uint DXS4 = 0;
layout(constant_id = 31) const uint DXS5 = 0;
layout(constant_id = 32) const uint DXS6 = 0;
layout(constant_id = 33) const uint DXS7 = 0;

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 2) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

// Float bit patterns greater than +0: sign clear, not zero, not NaN (at most +Inf).
bool positive_f32(uint bits) { return bits - 1u < 0x7F800000u; }
bool positive_f16(uint bits) { return bits - 1u < 0x7C00u; }

void main() {
    GRID_STRIDE_LOOP(i, count) {
        uint rem = i, ox = 0u, ody = 0u, odx = 0u, c;
        c = rem % N7; rem /= N7; ox += c * XS7; ody += c * DYS7; odx += c * DXS7;
        c = rem % N6; rem /= N6; ox += c * XS6; ody += c * DYS6; odx += c * DXS6;
        c = rem % N5; rem /= N5; ox += c * XS5; ody += c * DYS5; odx += c * DXS5;
        c = rem % N4; rem /= N4; ox += c * XS4; ody += c * DYS4; odx += c * DXS4;
        c = rem % N3; rem /= N3; ox += c * XS3; ody += c * DYS3; odx += c * DXS3;
        c = rem % N2; rem /= N2; ox += c * XS2; ody += c * DYS2; odx += c * DXS2;
        c = rem % N1; rem /= N1; ox += c * XS1; ody += c * DYS1; odx += c * DXS1;
        c = rem;                 ox += c * XS0; ody += c * DYS0; odx += c * DXS0;
        if (IS_F16) {
            uint bits = positive_f16(HALF_BITS(x, ox)) ? HALF_BITS(dy, ody) : 0u;
            STORE_HALF_BITS(dx, odx, bits);
        } else {
            dx[odx] = positive_f32(x[ox]) ? dy[ody] : 0u;
        }
    }
}
