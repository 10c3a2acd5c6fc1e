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
// (cr_half). 1 - Beta1 and 1 - Beta2 are float32 constants (the host's correctly rounded
// differences). An invocation reads every input of its elements before it writes an output,
// so outputs may be bound over inputs (in place).
//
// Constants: IS_F16; PACKED (the seven tensors coalesce to one packed run: an item is one
//   16-byte vector of each, 4 float32 or 8 float16 elements, the tail vector writing only the
//   descriptor's elements); otherwise SIZES and the element strides of the seven tensors
//   (8 dimensions, right-aligned); the scalars.
// Push constants: count (the items this dispatch ends at: vectors or elements), elements,
//   first (the item it starts at).
// Dispatch: up to 65535 workgroups; a grid-stride loop over the items [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool PACKED = false;
layout(constant_id = 3) const float LEARNING_RATE = 0.001;
layout(constant_id = 4) const float BETA1 = 0.9;
layout(constant_id = 5) const float BETA2 = 0.999;
layout(constant_id = 6) const float EPSILON = 1e-8;
layout(constant_id = 7) const float ONE_MINUS_BETA1 = 0.1;
layout(constant_id = 8) const float ONE_MINUS_BETA2 = 0.001;
DIMS8(uint, SIZES, 9, 1u)
DIMS8_4(uint, X_STRIDES, M_STRIDES, V_STRIDES, G_STRIDES, 17, 0u)
DIMS8_3(uint, NEW_X_STRIDES, NEW_M_STRIDES, NEW_V_STRIDES, 49, 0u)

// InputParametersTensor, InputFirstMomentTensor, InputSecondMomentTensor, GradientTensor,
// TrainingStepTensor, then the three outputs, each also viewed as uvec4 (PACKED). Outputs are
// read-write: float16 elements are stored through integer atomics on their word.
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer M { uint m[]; };
layout(set = 0, binding = 2) readonly buffer V { uint v[]; };
layout(set = 0, binding = 3) readonly buffer G { uint g[]; };
layout(set = 0, binding = 4) readonly buffer STEP { uint step[]; };
layout(set = 0, binding = 5) buffer NEW_X { uint new_x[]; };
layout(set = 0, binding = 6) buffer NEW_M { uint new_m[]; };
layout(set = 0, binding = 7) buffer NEW_V { uint new_v[]; };
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };
layout(set = 0, binding = 1) readonly buffer M_UVEC4 { uvec4 m_uvec4[]; };
layout(set = 0, binding = 2) readonly buffer V_UVEC4 { uvec4 v_uvec4[]; };
layout(set = 0, binding = 3) readonly buffer G_UVEC4 { uvec4 g_uvec4[]; };
layout(set = 0, binding = 5) buffer NEW_X_UVEC4 { uvec4 new_x_uvec4[]; };
layout(set = 0, binding = 6) buffer NEW_M_UVEC4 { uvec4 new_m_uvec4[]; };
layout(set = 0, binding = 7) buffer NEW_V_UVEC4 { uvec4 new_v_uvec4[]; };
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

// One element's step: (x', m', v') from (x, m, v, g) and lr_alpha = LearningRate alpha.
vec3 adam(float xe, float me, float ve, float ge, float lr_alpha) {
    precise float new_m = BETA1 * me + ONE_MINUS_BETA1 * ge;
    precise float new_v = BETA2 * ve + ONE_MINUS_BETA2 * (ge * ge);
    precise float denominator = cr_sqrt(new_v) + EPSILON;
    precise float new_x = xe - cr_div(lr_alpha * new_m, denominator);
    return vec3(new_x, new_m, new_v);
}

// A result's bits in its tensor's type (float16: in the low 16 bits).
uint bits(float value) { return IS_F16 ? cr_half(value) : floatBitsToUint(value); }

// Element e of a vector of words (float16: two per word).
float element(uvec4 words, uint e) {
    return IS_F16 ? unpackHalf2x16(words[e / 2u] >> (16u * (e % 2u))).x
                  : uintBitsToFloat(words[e]);
}

#define ADD_OFFSETS(D, c)                                                              \
    a += (c) * uvec4(X_STRIDES##D, M_STRIDES##D, V_STRIDES##D, G_STRIDES##D);          \
    b += (c) * uvec3(NEW_X_STRIDES##D, NEW_M_STRIDES##D, NEW_V_STRIDES##D);

void main() {
    // alpha once per invocation: T is tensor data.
    const uint t = step[0];
    precise float one_minus_beta1_t = 1.0 - pow_uint(BETA1, t);
    precise float one_minus_beta2_t = 1.0 - pow_uint(BETA2, t);
    precise float lr_alpha = LEARNING_RATE * cr_div(cr_sqrt(one_minus_beta2_t),
                                                    one_minus_beta1_t);
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        if (PACKED) {
            const uvec4 xw = x_uvec4[i], mw = m_uvec4[i], vw = v_uvec4[i], gw = g_uvec4[i];
            uvec4 nx = uvec4(0u), nm = uvec4(0u), nv = uvec4(0u);
            const uint lanes = IS_F16 ? 8u : 4u;
            for (uint e = 0u; e < lanes; ++e) {
                const vec3 r = adam(element(xw, e), element(mw, e), element(vw, e),
                                    element(gw, e), lr_alpha);
                const uint shift = IS_F16 ? 16u * (e % 2u) : 0u, w = IS_F16 ? e / 2u : e;
                nx[w] |= bits(r.x) << shift;
                nm[w] |= bits(r.y) << shift;
                nv[w] |= bits(r.z) << shift;
            }
            STORE_VECTOR(new_x_uvec4, new_x, i, nx, elements)
            STORE_VECTOR(new_m_uvec4, new_m, i, nm, elements)
            STORE_VECTOR(new_v_uvec4, new_v, i, nv, elements)
        } else {
            uvec4 a = uvec4(0u);
            uvec3 b = uvec3(0u);
            FOR_EACH_COORDINATE8(SIZES, i, ADD_OFFSETS)
            const vec3 r = adam(LOAD(x, a.x), LOAD(m, a.y), LOAD(v, a.z), LOAD(g, a.w),
                                lr_alpha);
            if (IS_F16) {
                STORE_HALF_BITS(new_x, b.x, cr_half(r.x))
                STORE_HALF_BITS(new_m, b.y, cr_half(r.y))
                STORE_HALF_BITS(new_v, b.z, cr_half(r.z))
            } else {
                new_x[b.x] = floatBitsToUint(r.x);
                new_m[b.y] = floatBitsToUint(r.y);
                new_v[b.z] = floatBitsToUint(r.z);
            }
        }
    }
}
