// Buffer copy in 16-byte vectors: dst[i] = src[i]. The benchmark's copy roofline (the fastest a
// kernel that reads and writes each byte once can go on this device), measured beside every
// operator in the same run; a compute copy, because vkCmdCopyBuffer may run on a slower engine.
// Benchmark only: built by tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
// Push constants: count (16-byte vectors).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(set = 0, binding = 0) readonly buffer SRC { uvec4 src[]; };
layout(set = 0, binding = 1) writeonly buffer DST { uvec4 dst[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        dst[i] = src[i];
    }
}
