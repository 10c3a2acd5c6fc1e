// DML_OPERATOR_SLICE_GRAD (slice_grad) for a packed dX: dX = +0 everywhere but on the window,
// where dX[FIRSTS + STEPS k] = dY[DY_BASE + k DY_STRIDES] (include/slice_grad.glsl). A
// gather over 16-byte vectors of dX (4 words of 1, 2 or 4 elements): each is written once, by
// one invocation, with bit copies of dY's elements or zero bits, in every data type.
//
// A vector within one row of dX's innermost dimension tests the outer coordinates once: off
// the window it is all zeros; wholly on a window row that steps by 1 through contiguous dY
// elements it is a straight copy of dY's words (one 16-byte load where they are aligned,
// else words shifted into place); otherwise each element is tested along the row. A vector
// across rows, or the tail vector, tests each element on its own.
//
// Constants: LANES_LOG2 and the window (include/slice_grad.glsl).
// Push constants: count (the vectors this dispatch ends at), elements (dX's: a tail vector
//   writes only those, the rest of the buffer keeps its contents, STORE_VECTOR_SUB), first
//   (the vector it starts at).
// Dispatch: up to 65535 workgroups, a grid-stride loop over the vectors [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "slice_grad.glsl"

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 0) readonly buffer DY_UVEC4 { uvec4 dy_uvec4[]; };  // the same
layout(set = 0, binding = 1) buffer DX { uvec4 dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 1) buffer DX_UINT { uint dx_uint[]; };  // the same, a tail vector
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

const uint VECTOR = 4u << LANES_LOG2;  // elements per 16-byte vector

// The bits of dY's element `source`, in the low bits.
uint dy_bits(uint source) { return SUB_BITS(dy, source, LANES_LOG2); }

// dX's element e (its logical index): the bits of its dY element, or 0 off the window.
uint gathered(uint e) {
    bool on_window = true;
    uint source = DY_BASE;
    FOR_EACH_COORDINATE8(SIZES, e, SLICE_MAP)
    uint bits = 0u;
    if (on_window) {  // off the window `source` may lie outside dY
        bits = dy_bits(source);
    }
    return bits;
}

// A vector's worth of contiguous dY elements from element b.
uvec4 contiguous(uint b) {
    const uint w = b >> LANES_LOG2, shift = SUB_SHIFT(b, LANES_LOG2);
    if (shift == 0u) {
        return (w & 3u) == 0u ? dy_uvec4[w >> 2]
                              : uvec4(dy[w], dy[w + 1u], dy[w + 2u], dy[w + 3u]);
    }
    uvec4 v;
    for (uint k = 0u; k < 4u; ++k) {
        v[k] = (dy[w + k] >> shift) | (dy[w + k + 1u] << (32u - shift));
    }
    return v;
}

#define OUTER_MAP(D, c) if (D != 7) SLICE_MAP(D, c)

// Element e of a vector as word `word`'s lanes: loops of constant bounds, which compilers
// unroll, so the vector is indexed by constants (a variable index can put it in memory).
#define FOR_EACH_LANE(e)                                                                \
    for (uint word = 0u; word < 4u; ++word)                                             \
        for (uint lane_ = 0u, e = word << LANES_LOG2; lane_ < (1u << LANES_LOG2);       \
             ++lane_, ++e)

// Vector v of dX.
uvec4 vector_at(uint v) {
    const uint e0 = v * VECTOR, c7 = e0 % SIZES7;
    uvec4 out_ = uvec4(0u);
    if (e0 + VECTOR <= elements && c7 + VECTOR <= SIZES7) {  // within one row
        bool on_window = true;
        uint source = DY_BASE;
        FOR_EACH_COORDINATE8(SIZES, e0, OUTER_MAP)
        if (!on_window) {
            return out_;
        }
        if (STEPS7 == 1u && DY_STRIDES7 == 1u && c7 >= FIRSTS7
                && c7 + VECTOR <= FIRSTS7 + DY_SIZES7) {
            return contiguous(source + (c7 - FIRSTS7));
        }
        FOR_EACH_LANE(e) {
            const uint c = c7 + e, r = c - FIRSTS7, k = r / STEPS7;
            if (c >= FIRSTS7 && k * STEPS7 == r && k < DY_SIZES7) {
                out_[word] |= dy_bits(source + k * DY_STRIDES7) << SUB_SHIFT(e, LANES_LOG2);
            }
        }
        return out_;
    }
    FOR_EACH_LANE(e) {
        if (e0 + e < elements) {
            out_[word] |= gathered(e0 + e) << SUB_SHIFT(e, LANES_LOG2);
        }
    }
    return out_;
}

void main() {
    GRID_STRIDE_LOOP_FROM(v, first, count) {
        const uvec4 value = vector_at(v);
        STORE_VECTOR_SUB(dx, dx_uint, v, value, elements, LANES_LOG2)
    }
}
