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
//   end in keeps its other half); VECTORS (PACKED only: an item is one 16-byte vector of each,
//   four words, loaded and stored whole but where the elements end, so that an invocation has
//   four words' loads in flight and four independent steps to interleave); otherwise SIZES and
//   the element strides of the seven tensors (8 dimensions, right-aligned); the scalars.
// Push constants: count (the items this dispatch ends at: vectors, words or elements),
//   elements, first (the item it starts at).
// Dispatch: up to 65535 workgroups, a few items per invocation (alpha is computed once per
//   invocation); a grid-stride loop over the items [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool PACKED = false;
layout(constant_id = 3) const float LEARNING_RATE = 0.001;
// 4-8: BETA1, BETA2, EPSILON, ONE_MINUS_BETA1, ONE_MINUS_BETA2 (adam_step.glsl)
DIMS8(uint, SIZES, 9, 1u)
DIMS8_4(uint, X_STRIDES, M_STRIDES, V_STRIDES, G_STRIDES, 17, 0u)
DIMS8_3(uint, NEW_X_STRIDES, NEW_M_STRIDES, NEW_V_STRIDES, 49, 0u)
// 73-77: the float path's limits, M_LEAST, G_LEAST, V_LEAST, CHECK_INPUTS, EXACT_ONLY
// (adam_step.glsl)
#define ADAM_SCALARS_ID 4
#define ADAM_LIMITS_ID 73
layout(constant_id = 78) const bool VECTORS = false;

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
// The same buffers as 16-byte vectors (VECTORS; device buffers are whole 16-byte units).
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };
layout(set = 0, binding = 1) readonly buffer M_UVEC4 { uvec4 m_uvec4[]; };
layout(set = 0, binding = 2) readonly buffer V_UVEC4 { uvec4 v_uvec4[]; };
layout(set = 0, binding = 3) readonly buffer G_UVEC4 { uvec4 g_uvec4[]; };
layout(set = 0, binding = 5) buffer NEW_X_UVEC4 { uvec4 new_x_uvec4[]; };
layout(set = 0, binding = 6) buffer NEW_M_UVEC4 { uvec4 new_m_uvec4[]; };
layout(set = 0, binding = 7) buffer NEW_V_UVEC4 { uvec4 new_v_uvec4[]; };
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

#include "adam_step.glsl"

// PACKED: one word of each input (one float32 or two float16 elements) -> the new words of
// x, m and v.
void packed_word(uint xw, uint mw, uint vw, uint gw, float lr_alpha, uint field,
                 out uint new_xw, out uint new_mw, out uint new_vw) {
    if (!IS_F16) {
        const vec3 r = adam(uintBitsToFloat(xw), uintBitsToFloat(mw), uintBitsToFloat(vw),
                            uintBitsToFloat(gw), lr_alpha, field, false);
        new_xw = floatBitsToUint(r.x);
        new_mw = floatBitsToUint(r.y);
        new_vw = floatBitsToUint(r.z);
        return;
    }
    const vec2 xs = unpackHalf2x16(xw), ms = unpackHalf2x16(mw);
    const vec2 vs = unpackHalf2x16(vw), gs = unpackHalf2x16(gw);
    const vec3 lo = adam(xs.x, ms.x, vs.x, gs.x, lr_alpha, field, IS_F16);
    const vec3 hi = adam(xs.y, ms.y, vs.y, gs.y, lr_alpha, field, IS_F16);
    new_xw = halves_from_floats(vec2(lo.x, hi.x));
    new_mw = halves_from_floats(vec2(lo.y, hi.y));
    new_vw = halves_from_floats(vec2(lo.z, hi.z));
}

// Store word w's new words: whole, or, in the word the float16 elements end in, its lower
// half alone (the upper half is not the tensor's), or nothing past the elements.
void store_word(uint w, uint new_xw, uint new_mw, uint new_vw) {
    if (!IS_F16 || 2u * w + 1u < elements) {
        new_x[w] = new_xw;
        new_m[w] = new_mw;
        new_v[w] = new_vw;
    } else if (2u * w < elements) {
        STORE_HALF_BITS(new_x, 2u * w, new_xw & 0xFFFFu)
        STORE_HALF_BITS(new_m, 2u * w, new_mw & 0xFFFFu)
        STORE_HALF_BITS(new_v, 2u * w, new_vw & 0xFFFFu)
    }
}

// PACKED, VECTORS: item i, vector i of each tensor (its inputs loaded before any output is
// stored; words past the elements, within the buffer's last 16-byte unit, are read and
// computed but not stored).
void packed_vector(uint i, float lr_alpha, uint field) {
    const uvec4 xv = x_uvec4[i], mv = m_uvec4[i], vv = v_uvec4[i], gv = g_uvec4[i];
    uvec4 new_xv, new_mv, new_vv;
    for (uint k = 0u; k < 4u; ++k) {
        packed_word(xv[k], mv[k], vv[k], gv[k], lr_alpha, field, new_xv[k], new_mv[k],
                    new_vv[k]);
    }
    if ((4u * i + 4u) << (IS_F16 ? 1u : 0u) <= elements) {
        new_x_uvec4[i] = new_xv;
        new_m_uvec4[i] = new_mv;
        new_v_uvec4[i] = new_vv;
    } else {
        for (uint k = 0u; k < 4u; ++k) store_word(4u * i + k, new_xv[k], new_mv[k], new_vv[k]);
    }
}

#define ADD_OFFSETS(D, c)                                                              \
    a += (c) * uvec4(X_STRIDES##D, M_STRIDES##D, V_STRIDES##D, G_STRIDES##D);          \
    b += (c) * uvec3(NEW_X_STRIDES##D, NEW_M_STRIDES##D, NEW_V_STRIDES##D);

void main() {
    // alpha once per invocation: T is tensor data.
    const uint t = step[0];
    precise float one_minus_beta1_t = 1.0 - pow_uint(BETA1, t);
    precise float one_minus_beta2_t = 1.0 - pow_uint(BETA2, t);
    // (By integers: LearningRate alpha may be subnormal.)
    const float lr_alpha = ieee_mul(LEARNING_RATE, cr_div(cr_sqrt(one_minus_beta2_t),
                                                          one_minus_beta1_t));
    const uint field = (floatBitsToUint(lr_alpha) >> 23) & 0xFFu;
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        if (PACKED && VECTORS) {
            packed_vector(i, lr_alpha, field);
        } else if (PACKED) {
            uint new_xw, new_mw, new_vw;
            packed_word(x[i], m[i], v[i], g[i], lr_alpha, field, new_xw, new_mw, new_vw);
            store_word(i, new_xw, new_mw, new_vw);
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
