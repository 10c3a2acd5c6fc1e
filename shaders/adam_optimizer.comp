// DML_OPERATOR_ADAM_OPTIMIZER (adam_optimizer): one Adam step per element.
//
//   m' = Beta1 m + (1 - Beta1) g
//   v' = Beta2 v + (1 - Beta2) (g g)
//   x' = x - ((LearningRate alpha) m') / (sqrt(v') + Epsilon)
//   alpha = sqrt(1 - Beta2^T) / (1 - Beta1^T)        (T: the TrainingStepTensor's UINT32)
//
// evaluated in float32 in exactly this order, each operation rounded once (`precise`: no
// contraction; division, square root and Beta^T through include/correctly_rounded.glsl), so
// the same bits on every device; float16 tensors widen exactly and each result rounds once
// (half_from_float). 1 - Beta1 and 1 - Beta2 are float32 constants (the host's correctly rounded
// differences). An invocation reads every input of its elements before it writes an output,
// so outputs may be bound over inputs (in place).
//
// Constants: IS_F16; PACKED (the seven tensors coalesce to one packed run: an item is one
//   32-bit word of each, one float32 or two float16 elements; a word the descriptor's elements
//   end in keeps its other half); otherwise SIZES and the element strides of the seven tensors
//   (8 dimensions, right-aligned); the float path's limits (adam_step.glsl).
// Push constants: count (the items this dispatch ends at: words or elements), elements,
//   first (the item it starts at), learning_rate (LearningRate's float32 bits), then the
//   step's (adam_step.glsl: the Betas and Epsilon). Push constants rather than specialization
//   constants, so that operators of different learning rates, Betas and Epsilons share one
//   pipeline, and a schedule compiles no kernel.
// Dispatch: up to 65535 workgroups, several items per invocation (alpha is computed once per
//   workgroup); a grid-stride loop over the items [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "correctly_rounded.glsl"
#include "half_rows.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool PACKED = false;
// PACKED: load each item's words a pass ahead (the plan's PREFETCH).
layout(constant_id = 3) const bool PREFETCH = false;
DIMS8(uint, SIZES, 4, 1u)
DIMS8_4(uint, X_STRIDES, M_STRIDES, V_STRIDES, G_STRIDES, 12, 0u)
DIMS8_3(uint, NEW_X_STRIDES, NEW_M_STRIDES, NEW_V_STRIDES, 44, 0u)
// 68-73: the float path's limits, M_LEAST, G_LEAST, V_LEAST, CHECK_INPUTS, EXACT_ONLY,
// NEGATIVE_EPSILON (adam_step.glsl)
#define ADAM_LIMITS_ID 68

// InputParametersTensor, InputFirstMomentTensor, InputSecondMomentTensor, GradientTensor,
// TrainingStepTensor, then the three outputs. Outputs are read-write: a float16 element that
// shares its word with another's is stored through integer atomics.
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer M { uint m[]; };
layout(set = 0, binding = 2) readonly buffer V { uint v[]; };
layout(set = 0, binding = 3) readonly buffer G { uint g[]; };
layout(set = 0, binding = 4) readonly buffer STEP { uint step[]; };
layout(set = 0, binding = 5) buffer NEW_X { uint new_x[]; };
layout(set = 0, binding = 6) buffer NEW_M { uint new_m[]; };
layout(set = 0, binding = 7) buffer NEW_V { uint new_v[]; };
#define KERNEL_PUSH_CONSTANTS uint count; uint elements; uint first; uint learning_rate;
#include "adam_step.glsl"

// PACKED: item i, one word of each tensor (xw, mw, vw, gw: its inputs, loaded before any
// output is stored).
void packed_item(uint i, uint xw, uint mw, uint vw, uint gw, float lr_alpha, uint field) {
    if (!IS_F16) {
        const vec3 r = adam(uintBitsToFloat(xw), uintBitsToFloat(mw), uintBitsToFloat(vw),
                            uintBitsToFloat(gw), lr_alpha, field, false);
        new_x[i] = floatBitsToUint(r.x);
        new_m[i] = floatBitsToUint(r.y);
        new_v[i] = floatBitsToUint(r.z);
        return;
    }
    const vec2 xs = unpackHalf2x16(xw), ms = unpackHalf2x16(mw);
    const vec2 vs = unpackHalf2x16(vw), gs = unpackHalf2x16(gw);
    const vec3 lo = adam(xs.x, ms.x, vs.x, gs.x, lr_alpha, field, IS_F16);
    const vec3 hi = adam(xs.y, ms.y, vs.y, gs.y, lr_alpha, field, IS_F16);
    if (2u * i + 1u < elements) {
        // The six halves through one range test (and a zero pair): 3-4% faster on an H200
        // than three halves_from_floats (benchmarks/RESULTS.md, "2026-12-03 (night)").
        const uvec4 w = halves_from_floats8(vec4(lo.x, hi.x, lo.y, hi.y),
                                           vec4(lo.z, hi.z, 0.0, 0.0));
        new_x[i] = w.x;
        new_m[i] = w.y;
        new_v[i] = w.z;
    } else {  // the last element: the word's upper half is not the tensor's
        STORE_HALF_BITS(new_x, 2u * i, half_from_float(lo.x))
        STORE_HALF_BITS(new_m, 2u * i, half_from_float(lo.y))
        STORE_HALF_BITS(new_v, 2u * i, half_from_float(lo.z))
    }
}

#define ADD_OFFSETS(D, c)                                                              \
    a += (c) * uvec4(X_STRIDES##D, M_STRIDES##D, V_STRIDES##D, G_STRIDES##D);          \
    b += (c) * uvec3(NEW_X_STRIDES##D, NEW_M_STRIDES##D, NEW_V_STRIDES##D);

// LearningRate alpha, computed once per workgroup (T is tensor data) and shared: its
// square-and-multiply, division, square root and integer product cost as much as several
// items, and the other invocations need not run them.
// (Its bits: it may be subnormal, and a float move must not flush it.)
shared uint workgroup_lr_alpha;

void main() {
    // PACKED and PREFETCH: the first item's words are loaded before alpha, so that their
    // latency overlaps invocation 0's computing it (every invocation waits for it at the
    // barrier). Loads only: in place, nothing is stored before them.
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    const uint i0 = first + gl_GlobalInvocationID.x;
    uvec4 next = uvec4(0u);
    if (PACKED && PREFETCH && i0 < count) next = uvec4(x[i0], m[i0], v[i0], g[i0]);
    if (gl_LocalInvocationIndex == 0u) {
        const uint t = step[0];
        precise float one_minus_beta1_t = 1.0 - pow_uint(BETA1, t);
        precise float one_minus_beta2_t = 1.0 - pow_uint(BETA2, t);
        // (By integers: LearningRate alpha may be subnormal.)
        workgroup_lr_alpha = floatBitsToUint(ieee_mul(
            uintBitsToFloat(learning_rate), cr_div(cr_sqrt(one_minus_beta2_t), one_minus_beta1_t)));
    }
    barrier();
    const float lr_alpha = uintBitsToFloat(workgroup_lr_alpha);
    const uint field = (floatBitsToUint(lr_alpha) >> 23) & 0xFFu;
    if (PACKED && PREFETCH) {
        // Each item's words are loaded one pass ahead, before the item before it is
        // computed, so that a load's latency overlaps a step's arithmetic. (Different words:
        // an item's outputs over its inputs are stored after its own loads, as below.)
        for (uint i = i0; i < count; i += stride) {
            const uvec4 words = next;
            if (i + stride < count) {
                const uint j = i + stride;
                next = uvec4(x[j], m[j], v[j], g[j]);
            }
            packed_item(i, words.x, words.y, words.z, words.w, lr_alpha, field);
        }
        return;
    }
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        if (PACKED) {
            packed_item(i, x[i], m[i], v[i], g[i], lr_alpha, field);
        } else {
            uvec4 a = uvec4(0u);
            uvec3 b = uvec3(0u);
            FOR_EACH_COORDINATE8(SIZES, i, ADD_OFFSETS)
            const vec3 r = adam(LOAD(x, a.x), LOAD(m, a.y), LOAD(v, a.z), LOAD(g, a.w),
                                lr_alpha, field, IS_F16);
            if (IS_F16) {
                STORE_HALF_BITS(new_x, b.x, half_from_float(r.x))
                STORE_HALF_BITS(new_m, b.y, half_from_float(r.y))
                STORE_HALF_BITS(new_v, b.z, half_from_float(r.z))
            } else {
                new_x[b.x] = floatBitsToUint(r.x);
                new_m[b.y] = floatBitsToUint(r.y);
                new_v[b.z] = floatBitsToUint(r.z);
            }
        }
    }
}
