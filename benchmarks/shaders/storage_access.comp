// Storage-buffer traffic in 16-byte vectors, one part at a time: MODE 0 copies (dst[i] = src[i],
// like copy_words), 1 only reads (a store under a test no value passes, so the compiler must
// keep the loads), 2 only writes. benchmarks/storage_access.py times them to show which part
// bounds a driver's kernels (on lavapipe, the loads).
// Benchmark only: built by tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
// Push constants: count (16-byte vectors), key (a value no loaded word has: the test).
// Dispatch: up to 65535 workgroups; grid-stride loop over the vectors.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0u;

layout(set = 0, binding = 0) readonly buffer SRC { uvec4 src[]; };
layout(set = 0, binding = 1) writeonly buffer DST { uvec4 dst[]; };
layout(push_constant) uniform Push { uint count; uint key; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        if (MODE == 0u) {
            dst[i] = src[i];
        } else if (MODE == 1u) {
            const uvec4 v = src[i];
            if ((v.x ^ v.y ^ v.z ^ v.w) == key) {
                dst[i] = v;
            }
        } else {
            dst[i] = uvec4(i);
        }
    }
}
