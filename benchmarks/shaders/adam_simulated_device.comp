// ADAM_OPTIMIZER's element arithmetic (shaders/include/adam_step.glsl) on a simulated device
// at the edges of what Vulkan allows: it flushes float32 subnormals to zero in its float
// arithmetic (an NVIDIA H200 does; FLOAT_PATH flushes every operand and result of the float
// path's products and sums) and, with SKEW, its square root and division for the float16
// quick path (half_step) are off: the root by 2 ulp (sqrt(|v|) for a negative v, which GLSL
// leaves undefined) and the quotient by 2^-17, 128 units of its float32 rounding and several
// times what Vulkan allows (HALF_STEP_SQRT, HALF_STEP_SKEW). tests/test_adam_optimizer.py checks
// that the results are still the IEEE model's bits. Benchmark only: built by
// tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
//   (new_x, new_m, new_v)[i] = adam(x[i], m[i], v[i], g[i], LR_ALPHA)   (float32 words; with
//                              HALF_OUTPUTS, float16 values in, their float16 bits out)
//
// Constants: LR_ALPHA (LearningRate alpha); HALF_OUTPUTS; SKEW; the float path's limits as
//   adam_optimizer.comp's (adam_step.glsl).
// Push constants: count (elements), then the Betas and Epsilon as adam_optimizer.comp's.
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "../../shaders/include/correctly_rounded.glsl"

layout(constant_id = 1) const float LR_ALPHA = 0.001;
layout(constant_id = 2) const bool HALF_OUTPUTS = false;
layout(constant_id = 3) const bool SKEW = false;
// 4-9: the float path's limits (adam_step.glsl)
#define ADAM_LIMITS_ID 4

// v, or a zero of its sign where v is subnormal.
float flush_subnormal(float v) {
    const uint u = floatBitsToUint(v);
    return (u & 0x7F800000u) == 0u ? uintBitsToFloat(u & 0x80000000u) : v;
}
#define FLOAT_PATH(v) flush_subnormal(v)

// With SKEW, the root 2 ulp above the device's (Vulkan allows about 4.5), and for v < 0
// (undefined in GLSL) sqrt(|v|).
float skewed_sqrt(float v) {
    return SKEW ? (v < 0.0 ? sqrt(-v) : uintBitsToFloat(floatBitsToUint(sqrt(v)) + 2u)) : sqrt(v);
}
#define HALF_STEP_SQRT(v) skewed_sqrt(v)

// q (1 +- 2^-17), the sign from a hash of q's bits.
float skewed(float q) {
    precise float r = q * (((floatBitsToUint(q) * 2654435761u) & 0x10000u) != 0u
                           ? 1.0 + 1.0 / 131072.0 : 1.0 - 1.0 / 131072.0);
    return SKEW ? r : q;
}
#define HALF_STEP_SKEW(q) skewed(q)
#define KERNEL_PUSH_CONSTANTS uint count;
#include "../../shaders/include/adam_step.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer M { uint m[]; };
layout(set = 0, binding = 2) readonly buffer V { uint v[]; };
layout(set = 0, binding = 3) readonly buffer G { uint g[]; };
layout(set = 0, binding = 4) writeonly buffer NEW_X { uint new_x[]; };
layout(set = 0, binding = 5) writeonly buffer NEW_M { uint new_m[]; };
layout(set = 0, binding = 6) writeonly buffer NEW_V { uint new_v[]; };

uint result_bits(float r) { return HALF_OUTPUTS ? half_from_float(r) : floatBitsToUint(r); }

void main() {
    const uint field = (floatBitsToUint(LR_ALPHA) >> 23) & 0xFFu;
    GRID_STRIDE_LOOP(i, count) {
        const vec3 r = adam(uintBitsToFloat(x[i]), uintBitsToFloat(m[i]), uintBitsToFloat(v[i]),
                            uintBitsToFloat(g[i]), LR_ALPHA, field, HALF_OUTPUTS);
        new_x[i] = result_bits(r.x);
        new_m[i] = result_bits(r.y);
        new_v[i] = result_bits(r.z);
    }
}
