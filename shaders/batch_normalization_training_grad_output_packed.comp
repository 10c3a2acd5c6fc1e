// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD (batch_normalization_training_grad), and with
// CONSTANT_STATISTICS DML_OPERATOR_BATCH_NORMALIZATION_GRAD (batch_normalization_grad),
// OutputGradient, fast path for X, dY and dX sharing one packed layout.
//
//   dX = alpha * ((dY - mean_R(dY)) - ((X - Mean) - ma) * q)            (docs/semantics.md §5)
//   CONSTANT_STATISTICS: dX = dY * f, f = Scale / sqrt(Variance + Epsilon), correctly rounded
//   by batch_normalization_grad_finalize into coefficients[2k].x (§5.1); X is not read.
//
// Coefficients per channel as in the strided form, batch_normalization_training_grad_output.
// Word w of the three tensors holds the same elements, so each invocation streams one 16-byte
// vector of each: 4 float32 or 8 float16 elements, and owns the whole output words (no
// atomics). The channel of element i comes from i's decomposition over the sizes; with SAME
// every vector lies in one channel (the innermost dimension is reduced and a multiple of the
// vector width), so the coefficients are read once per vector; else with RUN its elements lie
// in at most two channels, each read once.
//
// Constants: SIZES and CHANNEL_STRIDES (8 dimensions, right-aligned), REVERSE; RUN: the plan's
// channel_run (consecutive elements sharing a channel, run after run, where at least WIDTH;
// else 0).
// Push constants: vectors (the 16-byte vector this dispatch ends at; all of them cover the
//   elements), count (logical elements: a tail vector writes only those, the rest of the
//   buffer keeps its contents), first (the vector it starts at).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors [first, vectors), with
//   REVERSE (the plan's L2 order) counted from the last vector to the first.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define BATCH_NORMALIZATION_TRAINING_DX_ONLY
#include "batch_normalization_grad.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool SAME = false;
DIMS8(uint, SIZES, 3, 1)
DIMS8(uint, CHANNEL_STRIDES, 11, 0)
// REVERSE: invocation i takes vector `LAST - i` (the last vector of all), last first: what the
// reduction read last is still in L2 when this pass starts.
layout(constant_id = 19) const bool REVERSE = false;
layout(constant_id = 20) const bool CONSTANT_STATISTICS = false;
layout(constant_id = 21) const uint RUN = 0u;

layout(set = 0, binding = 0) readonly buffer X { uvec4 x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uvec4 dy[]; };  // InputGradientTensor
// scratch: 2 vec4 per channel
layout(set = 0, binding = 2) readonly buffer COEFFICIENTS { vec4 coefficients[]; };
layout(set = 0, binding = 3) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 3) buffer DX_UINT { uint dx_uint[]; };  // the same, for a tail vector
layout(push_constant) uniform Push { uint vectors; uint count; uint first; };

const uint WIDTH = IS_F16 ? 8u : 4u;
// A vector in two channels at most: the first element's, and from element `split` on (where
// its run ends) the last element's.
const bool TWO = !SAME && RUN >= WIDTH;
#define LAST ((count - 1u) / WIDTH)

#define ADD_OFFSET(D, c) o += (c) * CHANNEL_STRIDES##D;

// Channel (coefficients row) of element i; elements past the end use the last element's.
uint channel(uint i) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(SIZES, min(i, count - 1u), ADD_OFFSET)
    return o;
}

vec4 coefficients_of(uint k) { return coefficients[2u * k]; }
float mean_dy(uint k) { return coefficients[2u * k + 1u].x; }

// dX from channel k's coefficients a and mean_dy m.
float grad_with(float xv, float gy, vec4 a, float m) {
    if (CONSTANT_STATISTICS) return gy * a.x;
    return training_dx(xv, gy, a, m);
}

float grad(float xv, float gy, uint k) {
    return grad_with(xv, gy, coefficients_of(k), CONSTANT_STATISTICS ? 0.0 : mean_dy(k));
}

// TWO: element `base + t`'s dX, from the first channel's (a0, m0) before `split`, else the
// last's (a1, m1).
float grad_two(float xv, float gy, uint t, uint split, vec4 a0, float m0, vec4 a1, float m1) {
    return grad_with(xv, gy, t < split ? a0 : a1, t < split ? m0 : m1);
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, vectors) {
        const uint v = REVERSE ? LAST - i : i;
        const uvec4 xw = CONSTANT_STATISTICS ? uvec4(0u) : x[v];
        const uvec4 gw = dy[v];
        const uint base = v * WIDTH;
        uvec4 outw;
        if (SAME) {
            const uint k = channel(base);
            const vec4 a = coefficients_of(k);
            const float mdy = mean_dy(k);
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) {
                    const vec2 xs = unpackHalf2x16(xw[w]);
                    const vec2 gs = unpackHalf2x16(gw[w]);
                    outw[w] = pack_halves(CONSTANT_STATISTICS ? gs * a.x
                                                              : training_dx(xs, gs, a, mdy));
                }
            } else {
                const vec4 xs = uintBitsToFloat(xw);
                const vec4 gs = uintBitsToFloat(gw);
                outw = floatBitsToUint(CONSTANT_STATISTICS ? gs * a.x
                                                           : training_dx(xs, gs, a, mdy));
            }
        } else if (TWO) {
            const uint k0 = channel(base), k1 = channel(base + WIDTH - 1u);
            const vec4 a0 = coefficients_of(k0), a1 = coefficients_of(k1);
            const float m0 = CONSTANT_STATISTICS ? 0.0 : mean_dy(k0);
            const float m1 = CONSTANT_STATISTICS ? 0.0 : mean_dy(k1);
            const uint split = RUN - base % RUN;
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) {
                    const vec2 xs = unpackHalf2x16(xw[w]);
                    const vec2 gs = unpackHalf2x16(gw[w]);
                    outw[w] = pack_halves(vec2(
                        grad_two(xs.x, gs.x, 2u * w, split, a0, m0, a1, m1),
                        grad_two(xs.y, gs.y, 2u * w + 1u, split, a0, m0, a1, m1)));
                }
            } else {
                const vec4 xs = uintBitsToFloat(xw);
                const vec4 gs = uintBitsToFloat(gw);
                vec4 r;
                for (uint e = 0u; e < 4u; ++e) {
                    r[e] = grad_two(xs[e], gs[e], e, split, a0, m0, a1, m1);
                }
                outw = floatBitsToUint(r);
            }
        } else if (IS_F16) {
            for (uint w = 0u; w < 4u; ++w) {
                const vec2 xs = unpackHalf2x16(xw[w]);
                const vec2 gs = unpackHalf2x16(gw[w]);
                const uint k0 = channel(base + 2u * w);
                const uint k1 = channel(base + 2u * w + 1u);
                outw[w] = pack_halves(vec2(grad(xs.x, gs.x, k0), grad(xs.y, gs.y, k1)));
            }
        } else {
            const vec4 xs = uintBitsToFloat(xw);
            const vec4 gs = uintBitsToFloat(gw);
            vec4 r;
            for (uint e = 0u; e < 4u; ++e) {
                const uint k = channel(base + e);
                r[e] = grad(xs[e], gs[e], k);
            }
            outw = floatBitsToUint(r);
        }
        STORE_VECTOR(dx, dx_uint, v, outw, count)
    }
}
