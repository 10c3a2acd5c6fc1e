// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD, OutputGradient, fast path for X, dY and dX
// sharing one packed layout.
//
//   dX = alpha * ((dY - mean_R(dY)) - ((X - Mean) - ma) * q)            (docs/semantics.md §5)
//
// Coefficients per channel as in batch_normalization_training_grad_output. Word w of the
// three tensors holds the same elements, so each invocation streams one 16-byte vector of
// each: 4 float32 or 8 float16 elements, and owns the whole output words (no atomics).
// The channel of element i comes from i's decomposition over the sizes; with SAME every
// vector lies in one channel (the innermost dimension is reduced and a multiple of the
// vector width), so the coefficients are read once per vector.
//
// Bindings (set 0):
//   0  x      InputTensor           read  (uvec4 view)
//   1  dy     InputGradientTensor   read  (uvec4 view)
//   2  table  scratch coefficients  read  (2 vec4 per channel)
//   3  dx     OutputGradientTensor  write (uvec4 view)
// Specialization constants: 0 workgroup width, 1 IS_F16, 2 SAME, 3..10 sizes,
//   11..18 table strides (8 dimensions, right-aligned).
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
DIMS8(N, 3, 1)
DIMS8(TS, 11, 0)

layout(set = 0, binding = 0) readonly buffer X { uvec4 x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uvec4 dy[]; };
layout(set = 0, binding = 2) readonly buffer TABLE { vec4 table[]; };
layout(set = 0, binding = 3) writeonly buffer DX { uvec4 dx[]; };
layout(push_constant) uniform Push { uint vectors; uint count; };

const uint WIDTH = IS_F16 ? 8u : 4u;

#define STEP(D) c = rem % N##D; rem /= N##D; o += c * TS##D;

// Channel (table row) of element i; elements past the end use the last element's channel.
uint channel(uint i) {
    uint rem = min(i, count - 1u), c, o = 0u;
    STEP(7) STEP(6) STEP(5) STEP(4) STEP(3) STEP(2) STEP(1)
    return o + rem * TS0;
}

vec4 coefficients(uint k) { return table[2u * k]; }
float mean_dy(uint k) { return table[2u * k + 1u].x; }

float grad(float xv, float gy, vec4 a, float mdy) {
    return a.x * ((gy - mdy) - ((xv - a.z) - a.w) * a.y);
}

void main() {
    GRID_STRIDE_LOOP(v, vectors) {
        const uvec4 xw = x[v];
        const uvec4 gw = dy[v];
        const uint base = v * WIDTH;
        uvec4 outw;
        if (SAME) {
            const uint k = channel(base);
            const vec4 a = coefficients(k);
            const float mdy = mean_dy(k);
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) {
                    const vec2 xs = unpackHalf2x16(xw[w]);
                    const vec2 gs = unpackHalf2x16(gw[w]);
                    outw[w] = packHalf2x16(a.x * ((gs - mdy) - ((xs - a.z) - a.w) * a.y));
                }
            } else {
                const vec4 xs = uintBitsToFloat(xw);
                const vec4 gs = uintBitsToFloat(gw);
                outw = floatBitsToUint(a.x * ((gs - mdy) - ((xs - a.z) - a.w) * a.y));
            }
        } else if (IS_F16) {
            for (uint w = 0u; w < 4u; ++w) {
                const vec2 xs = unpackHalf2x16(xw[w]);
                const vec2 gs = unpackHalf2x16(gw[w]);
                const uint k0 = channel(base + 2u * w);
                const uint k1 = channel(base + 2u * w + 1u);
                outw[w] = packHalf2x16(vec2(grad(xs.x, gs.x, coefficients(k0), mean_dy(k0)),
                                            grad(xs.y, gs.y, coefficients(k1), mean_dy(k1))));
            }
        } else {
            const vec4 xs = uintBitsToFloat(xw);
            const vec4 gs = uintBitsToFloat(gw);
            vec4 r;
            for (uint e = 0u; e < 4u; ++e) {
                const uint k = channel(base + e);
                r[e] = grad(xs[e], gs[e], coefficients(k), mean_dy(k));
            }
            outw = floatBitsToUint(r);
        }
        dx[v] = outw;
    }
}
