// ieee_mul and ieee_add (shaders/include/correctly_rounded.glsl) per element:
// tests/test_correctly_rounded.py compares their bits with numpy's IEEE float32 arithmetic
// (subnormals kept). Benchmark only: built by tools/build_shaders.py into benchmarks/spirv/,
// not shipped.
//
//   product[i] = ieee_mul(a[i], b[i]), sum[i] = ieee_add(a[i], b[i])
//
// Push constants: count (elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "../../shaders/include/correctly_rounded.glsl"

layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) readonly buffer B { uint b[]; };
layout(set = 0, binding = 2) writeonly buffer PRODUCT { uint product[]; };
layout(set = 0, binding = 3) writeonly buffer SUM { uint sum[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        const float x = uintBitsToFloat(a[i]), y = uintBitsToFloat(b[i]);
        product[i] = floatBitsToUint(ieee_mul(x, y));
        sum[i] = floatBitsToUint(ieee_add(x, y));
    }
}
