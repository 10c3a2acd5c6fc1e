// DML_OPERATOR_BATCH_NORMALIZATION_GRAD, OutputGradient, fast path for dY and dX sharing one
// packed layout.
//
//   dX = dY * (Scale / sqrt(Variance + Epsilon))                        (docs/semantics.md §4)
//
// Word w of dY and dX holds the same elements, so each invocation streams one 16-byte vector:
// 4 float32 or 8 float16 elements, and owns whole output words (no atomics). The statistics
// are read through strides that are 0 on the reduced dimensions. With SAME every vector lies
// in one channel (the innermost dimension is reduced and a multiple of the vector width), so
// the coefficient is computed once per vector. Independent of the reduction kernels.
//
// Bindings (set 0):
//   0  dy     InputGradientTensor   read  (uvec4 view)
//   1  scale  ScaleTensor           read
//   2  var    VarianceTensor        read
//   3  dx     OutputGradientTensor  write (uvec4 view)
// Specialization constants: 0 workgroup width, 1 IS_F16, 2 SAME, 3 EPS (float bits),
//   4..11 sizes, 12..19 Scale strides, 20..27 Variance strides (8 dimensions, right-aligned).
// Push constants: vectors (16-byte vectors covering the elements; buffers are allocated in
//   16-byte units and DirectML lets an operator write anywhere inside an output's buffer),
//   count (logical elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
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
layout(constant_id = 2) const bool SAME = false;
layout(constant_id = 3) const float EPS = 0.0;
DIMS8(N, 4, 1)
DIMS8(SS, 12, 0)
DIMS8(VS, 20, 0)

layout(set = 0, binding = 0) readonly buffer DY { uvec4 dy[]; };
layout(set = 0, binding = 1) readonly buffer SCALE { uint scale[]; };
layout(set = 0, binding = 2) readonly buffer VAR { uint var_[]; };
layout(set = 0, binding = 3) writeonly buffer DX { uvec4 dx[]; };
layout(push_constant) uniform Push { uint vectors; uint count; };

const uint WIDTH = IS_F16 ? 8u : 4u;

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))
#define STEP(D) c = rem % N##D; rem /= N##D; o += c * uvec2(SS##D, VS##D);

// Scale / sqrt(Variance + Epsilon) of element i's channel (past the end: the last element's).
float coefficient(uint i) {
    uint rem = min(i, count - 1u), c;
    uvec2 o = uvec2(0u);
    STEP(7) STEP(6) STEP(5) STEP(4) STEP(3) STEP(2) STEP(1)
    o += rem * uvec2(SS0, VS0);
    return LOAD(scale, o.x) / sqrt(LOAD(var_, o.y) + EPS);
}

void main() {
    GRID_STRIDE_LOOP(v, vectors) {
        const uvec4 gw = dy[v];
        const uint base = v * WIDTH;
        uvec4 outw;
        if (SAME) {
            const float s = coefficient(base);
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) outw[w] = packHalf2x16(unpackHalf2x16(gw[w]) * s);
            } else {
                outw = floatBitsToUint(uintBitsToFloat(gw) * s);
            }
        } else if (IS_F16) {
            for (uint w = 0u; w < 4u; ++w) {
                const vec2 s = vec2(coefficient(base + 2u * w), coefficient(base + 2u * w + 1u));
                outw[w] = packHalf2x16(unpackHalf2x16(gw[w]) * s);
            }
        } else {
            const vec4 s = vec4(coefficient(base), coefficient(base + 1u),
                                coefficient(base + 2u), coefficient(base + 3u));
            outw = floatBitsToUint(uintBitsToFloat(gw) * s);
        }
        dx[v] = outw;
    }
}
