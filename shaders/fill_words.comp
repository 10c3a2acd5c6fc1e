// Fill a buffer of 32-bit words with one value (shared helper; zero-fills accumulators).
//
//   words[i] = value        for i in [0, count)
//
// Bindings (set 0):
//   0  words  the buffer to fill   write
// Specialization constants: 0 local size x.
// Push constants: count (words), value (the 32-bit pattern to store).
// Dispatch: up to 65535 workgroups; grid-stride loop over the words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) writeonly buffer Words { uint words[]; };
layout(push_constant) uniform Push { uint count; uint value; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        words[i] = value;
    }
}
