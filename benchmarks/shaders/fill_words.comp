// Buffer fill in 16-byte vectors: dst[i] = (i, i, i, i). The benchmark's write-only roofline
// (the fastest a kernel that only writes each byte once can go on this device: e.g.
// RANDOM_GENERATOR, which reads six words and writes its output), measured beside such an
// operator in the same run; the values vary so that no driver can write a constant cheaply.
// Benchmark only: built by tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
// Push constants: count (16-byte vectors).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(set = 0, binding = 0) writeonly buffer DST { uvec4 dst[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        dst[i] = uvec4(i);
    }
}
