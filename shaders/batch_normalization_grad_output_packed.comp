// DML_OPERATOR_BATCH_NORMALIZATION_GRAD (batch_normalization_grad), OutputGradient, fast path
// for dY and dX sharing one packed layout.
//
//   dX = dY * (Scale / sqrt(Variance + Epsilon))                        (docs/semantics.md §4)
//
// The division and square root correctly rounded (cr_div, cr_sqrt): the same bits on every
// device.
//
// Word w of dY and dX holds the same elements, so each invocation streams one 16-byte vector:
// 4 float32 or 8 float16 elements, and owns whole output words (no atomics). The statistics
// are read through strides that are 0 on the reduced dimensions. With SAME every vector lies
// in one channel (the innermost dimension is reduced and a multiple of the vector width), so
// the coefficient is computed once per vector. Independent of the reduction kernels.
//
// Constants: SIZES and the strides of Scale and Variance (8 dimensions, right-aligned).
// Push constants: vectors (the 16-byte vector this dispatch ends at; all of them cover the
//   elements), count (logical elements: a tail vector writes only those, the rest of the
//   buffer keeps its contents), first (the vector it starts at).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors [first, vectors).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool SAME = false;
layout(constant_id = 3) const float EPSILON = 0.0;
DIMS8(uint, SIZES, 4, 1)
DIMS8_2(uint, SCALE_STRIDES, VARIANCE_STRIDES, 12, 0)

layout(set = 0, binding = 0) readonly buffer DY { uvec4 dy[]; };  // InputGradientTensor
layout(set = 0, binding = 1) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 2) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 3) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 3) buffer DX_UINT { uint dx_uint[]; };  // the same, for a tail vector
layout(push_constant) uniform Push { uint vectors; uint count; uint first; };

const uint WIDTH = IS_F16 ? 8u : 4u;

#define ADD_OFFSETS(D, c) o += (c) * uvec2(SCALE_STRIDES##D, VARIANCE_STRIDES##D);

// The statistics' offsets (Scale, Variance) of element i's channel (past the end: the last
// element's).
uvec2 stat_offsets(uint i) {
    uvec2 o = uvec2(0u);
    FOR_EACH_COORDINATE8(SIZES, min(i, count - 1u), ADD_OFFSETS)
    return o;
}

// Scale / sqrt(Variance + Epsilon) at statistics offsets o.
float coefficient_at(uvec2 o) {
    return cr_div(LOAD(scale, o.x), cr_sqrt(LOAD(variance, o.y) + EPSILON));
}

void main() {
    GRID_STRIDE_LOOP_FROM(v, first, vectors) {
        const uvec4 gw = dy[v];
        const uint base = v * WIDTH;
        uvec4 outw;
        // A vector's elements mostly share the first's or the last's channel (a run of a few
        // dozen elements holds many vectors): their coefficients are computed once each, any
        // other element's on its own. The same value either way.
        const uvec2 o_first = stat_offsets(base), o_last = stat_offsets(base + WIDTH - 1u);
        const float c_first = coefficient_at(o_first);
        const float c_last = SAME ? c_first : coefficient_at(o_last);
        if (SAME) {
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) {
                    outw[w] = packHalf2x16(unpackHalf2x16(gw[w]) * c_first);
                }
            } else {
                outw = floatBitsToUint(uintBitsToFloat(gw) * c_first);
            }
        } else {
            float c[8];
            for (uint e = 0u; e < WIDTH; ++e) {
                const uvec2 o = e == 0u ? o_first : stat_offsets(base + e);
                c[e] = o == o_first ? c_first : o == o_last ? c_last : coefficient_at(o);
            }
            if (IS_F16) {
                for (uint w = 0u; w < 4u; ++w) {
                    outw[w] = packHalf2x16(unpackHalf2x16(gw[w]) * vec2(c[2u * w], c[2u * w + 1u]));
                }
            } else {
                outw = floatBitsToUint(uintBitsToFloat(gw) * vec4(c[0], c[1], c[2], c[3]));
            }
        }
        STORE_VECTOR(dx, dx_uint, v, outw, count)
    }
}
