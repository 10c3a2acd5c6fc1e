// DML_OPERATOR_RANDOM_GENERATOR (random_generator), the output: Philox 4x32-10 blocks.
//
//   y[n] = philox_4x32_10((C + floor(n/4)) mod 2^128, key)[n mod 4]
//
// for the logical row-major index n of OutputTensor (E elements); C and the key are the
// InputStateTensor's words (include/random_generator.glsl). One invocation per block b: the
// four words of block b go to elements 4b..4b+3 that exist (the last block of an E that is
// not a multiple of 4 writes fewer).
// Constants: WG; PACKED (y is one packed run: a whole block is one 16-byte store); STATE_STRIDE
// (the state's element stride); SIZES, Y_STRIDES (y's coalesced sizes and element strides,
// 8 dimensions, right-aligned).
// Push constants: count (the block this dispatch ends at), elements (E), first (the block it
// starts at). Dispatch: up to 65535 workgroups; a grid-stride loop over the blocks [first,
// count), split into several dispatches under a loop limit (plan.grid_slices).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool PACKED = false;
layout(constant_id = 2) const uint STATE_STRIDE = 1u;
DIMS8_2(uint, SIZES, Y_STRIDES, 3, 1u)

layout(set = 0, binding = 0) readonly buffer STATE { uint state[]; };  // InputStateTensor
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };  // OutputTensor
layout(set = 0, binding = 1) writeonly buffer Y_UVEC4 { uvec4 y_uvec4[]; };  // the same, packed
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

#include "random_generator.glsl"

#define ADD_OFFSET(D, c) o += (c) * Y_STRIDES##D;

void store(uint n, uint word) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(SIZES, n, ADD_OFFSET)
    y[o] = word;
}

void main() {
    const uvec4 counter = uvec4(STATE(0), STATE(1), STATE(2), STATE(3));
    const uvec2 key = uvec2(STATE(4), STATE(5));
    GRID_STRIDE_LOOP_FROM(b, first, count) {
        const uvec4 words = philox_4x32_10(counter_plus(counter, b), key);
        const uint n = 4u * b;  // < elements; n + 3 <= 2^32 - 1 (E < 2^32)
        if (PACKED && n + 3u < elements) {
            y_uvec4[b] = words;
        } else {
            store(n, words.x);
            if (n + 1u < elements) store(n + 1u, words.y);
            if (n + 2u < elements) store(n + 2u, words.z);
            if (n + 3u < elements) store(n + 3u, words.w);
        }
    }
}
