// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD, OutputGradient, general strided form.
//
//   dX = alpha * ((dY - mean_R(dY)) - ((X - Mean) - ma) * q)            (docs/semantics.md §5)
//
// with the per-channel coefficients of batch_normalization_finalize:
//   table[2k] = (alpha = Scale / sqrt(Var + eps), q = mean_R(Coef1) / (Var + eps), Mean, ma),
//   table[2k + 1].x = mean_R(dY), ma = mean_R(X) - Mean. Mean is subtracted before ma so that
//   X - mean_R(X) keeps float32 precision when the data sit far from zero.
//
// Bindings (set 0):
//   0  x      InputTensor           read
//   1  dy     InputGradientTensor   read
//   2  table  scratch coefficients  read (2 vec4 per channel)
//   3  dx     OutputGradientTensor  write (float16 stores use integer atomics on shared words)
// Specialization constants: 0 workgroup width, 1 IS_F16, 2..9 sizes, 10..17 X strides,
//   18..25 dY strides, 26..33 dX strides, 34..41 table strides (the channel index's stride per
//   dimension: 0 on reduced dimensions); 8 dimensions, right-aligned, in elements.
// Push constants: count (logical elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define DIMS8(NAME, ID, DEF)                                                            \
    layout(constant_id = ID + 0) const uint NAME##0 = DEF;                              \
    layout(constant_id = ID + 1) const uint NAME##1 = DEF;                              \
    layout(constant_id = ID + 2) const uint NAME##2 = DEF;                              \
    layout(constant_id = ID + 3) const uint NAME##3 = DEF;                              \
    layout(constant_id = ID + 4) const uint NAME##4 = DEF;                              \
    layout(constant_id = ID + 5) const uint NAME##5 = DEF;                              \
    layout(constant_id = ID + 6) const uint NAME##6 = DEF;                              \
    layout(constant_id = ID + 7) const uint NAME##7 = DEF;

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
DIMS8(N, 2, 1)
DIMS8(XS, 10, 0)
DIMS8(DYS, 18, 0)
DIMS8(DXS, 26, 0)
DIMS8(TS, 34, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 2) readonly buffer TABLE { vec4 table[]; };
layout(set = 0, binding = 3) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))
#define STEP(D) c = rem % N##D; rem /= N##D; o += c * uvec4(XS##D, DYS##D, DXS##D, TS##D);

void main() {
    GRID_STRIDE_LOOP(i, count) {
        uint rem = i, c;
        uvec4 o = uvec4(0u);
        STEP(7) STEP(6) STEP(5) STEP(4) STEP(3) STEP(2) STEP(1)
        o += rem * uvec4(XS0, DYS0, DXS0, TS0);
        const vec4 a = table[2u * o.w];
        const float mdy = table[2u * o.w + 1u].x;
        const float v = a.x * ((LOAD(dy, o.y) - mdy) - ((LOAD(x, o.x) - a.z) - a.w) * a.y);
        if (IS_F16) {
            STORE_HALF_BITS(dx, o.z, HALF_FROM_FLOAT(v));
        } else {
            dx[o.z] = floatBitsToUint(v);
        }
    }
}
