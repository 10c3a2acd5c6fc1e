// ADAM_OPTIMIZER's element arithmetic (shaders/include/adam_step.glsl) on a simulated device
// that flushes float32 subnormals to zero in its float arithmetic (Vulkan allows it; an NVIDIA
// H200 does): FLOAT_PATH flushes every operand and result of the float path's products and
// sums. tests/test_adam_optimizer.py checks that the elements that could meet a subnormal take
// the exact path, so the results still keep IEEE subnormals. Benchmark only: built by
// tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
//   (new_x, new_m, new_v)[i] = adam(x[i], m[i], v[i], g[i], LR_ALPHA)   (float32)
//
// Constants: the Betas, Epsilon and the float path's limits as adam_optimizer.comp's;
//   LR_ALPHA (LearningRate alpha).
// Push constants: count (elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "../../shaders/include/correctly_rounded.glsl"

// 1-5: the scalars, 6-10: the float path's limits (adam_step.glsl)
#define ADAM_SCALARS_ID 1
#define ADAM_LIMITS_ID 6
layout(constant_id = 11) const float LR_ALPHA = 0.001;

// v, or a zero of its sign where v is subnormal.
float flush_subnormal(float v) {
    const uint u = floatBitsToUint(v);
    return (u & 0x7F800000u) == 0u ? uintBitsToFloat(u & 0x80000000u) : v;
}
#define FLOAT_PATH(v) flush_subnormal(v)
#include "../../shaders/include/adam_step.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer M { uint m[]; };
layout(set = 0, binding = 2) readonly buffer V { uint v[]; };
layout(set = 0, binding = 3) readonly buffer G { uint g[]; };
layout(set = 0, binding = 4) writeonly buffer NEW_X { uint new_x[]; };
layout(set = 0, binding = 5) writeonly buffer NEW_M { uint new_m[]; };
layout(set = 0, binding = 6) writeonly buffer NEW_V { uint new_v[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    const uint field = (floatBitsToUint(LR_ALPHA) >> 23) & 0xFFu;
    GRID_STRIDE_LOOP(i, count) {
        const vec3 r = adam(uintBitsToFloat(x[i]), uintBitsToFloat(m[i]), uintBitsToFloat(v[i]),
                            uintBitsToFloat(g[i]), LR_ALPHA, field);
        new_x[i] = floatBitsToUint(r.x);
        new_m[i] = floatBitsToUint(r.y);
        new_v[i] = floatBitsToUint(r.z);
    }
}
