// DML_OPERATOR_BATCH_NORMALIZATION_GRAD, OutputGradient, general strided form.
//
//   dX = dY * (Scale / sqrt(Variance + Epsilon))                        (docs/semantics.md §4)
//
// Element-wise with constant statistics: no reduction, so it runs beside the reduction
// kernels (it reads only dY, Scale and Variance). The statistics are read through strides
// that are 0 on the reduced dimensions.
//
// Bindings (set 0):
//   0  dy     InputGradientTensor   read
//   1  scale  ScaleTensor           read
//   2  var    VarianceTensor        read
//   3  dx     OutputGradientTensor  write (float16 stores use integer atomics on shared words)
// Specialization constants: 0 workgroup width, 1 IS_F16, 2 EPS (float bits), 3..10 sizes,
//   11..18 dY strides, 19..26 dX strides, 27..34 Scale strides, 35..42 Variance strides
//   (8 dimensions, right-aligned, in elements; statistics strides 0 where reduced).
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
layout(constant_id = 2) const float EPS = 0.0;
DIMS8(N, 3, 1)
DIMS8(DYS, 11, 0)
DIMS8(DXS, 19, 0)
DIMS8(SS, 27, 0)
DIMS8(VS, 35, 0)

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 1) readonly buffer SCALE { uint scale[]; };
layout(set = 0, binding = 2) readonly buffer VAR { uint var_[]; };
layout(set = 0, binding = 3) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))
#define STEP(D) c = rem % N##D; rem /= N##D; o += c * uvec4(DYS##D, DXS##D, SS##D, VS##D);

void main() {
    GRID_STRIDE_LOOP(i, count) {
        uint rem = i, c;
        uvec4 o = uvec4(0u);
        STEP(7) STEP(6) STEP(5) STEP(4) STEP(3) STEP(2) STEP(1)
        o += rem * uvec4(DYS0, DXS0, SS0, VS0);
        const float v = LOAD(dy, o.x) * (LOAD(scale, o.z) / sqrt(LOAD(var_, o.w) + EPS));
        if (IS_F16) {
            STORE_HALF_BITS(dx, o.y, HALF_FROM_FLOAT(v));
        } else {
            dx[o.y] = floatBitsToUint(v);
        }
    }
}
