// Buffer copy in 16-byte vectors: dst[i] = src[i]. The benchmark's copy roofline (the fastest a
// kernel that reads and writes each byte once can go on this device), measured beside every
// operator in the same run; a compute copy, because vkCmdCopyBuffer may run on a slower engine.
//
// Bindings (set 0):
//   0  src  read
//   1  dst  write
// Specialization constants: 0 local size x.
// Push constants: count (16-byte vectors).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(set = 0, binding = 1) writeonly buffer Dst { uvec4 dst[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        dst[i] = src[i];
    }
}
