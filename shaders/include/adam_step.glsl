// ADAM_OPTIMIZER's arithmetic for one element (adam_optimizer.comp; and
// benchmarks/shaders/adam_simulated_device.comp, which tests it on a simulated device that
// flushes subnormals and divides badly).
// The including kernel includes correctly_rounded.glsl first, defines ADAM_LIMITS_ID, the
// first specialization constant id of the group declared here, and KERNEL_PUSH_CONSTANTS, its
// own push constants: this file declares the push-constant block, those first, then the
// step's.
//
// FLOAT_PATH(v) is applied to every operand and result of the float path's products and sums:
// nothing here; adam_simulated_device.comp makes it flush subnormals to zero, as a device may.
// HALF_STEP_SQRT(v) and HALF_STEP_SKEW(q) are half_step's square root and quotient: the
// device's here; the simulated device's are 2 ulp and 2^-17 off.
//
// pyvkgrad/ops/adam_optimizer.py (step_values) gives both groups.
// The step's push constants: Beta1, Beta2, Epsilon, 1 - Beta1 and 1 - Beta2 (the host's
// float32 differences), as float32 bits. Push constants rather than specialization constants,
// so that operators of different Betas and Epsilons share one pipeline: a schedule that
// changes Beta1 every step (OneCycleLR's momentum) compiles no kernel. They are also values
// the compiler cannot see, so a Beta of 0 or 1 cannot fold a product with an Inf or NaN
// operand to 0.
layout(push_constant) uniform Push {
    KERNEL_PUSH_CONSTANTS
    uint beta1;
    uint beta2;
    uint epsilon;
    uint one_minus_beta1;
    uint one_minus_beta2;
};
#define BETA1 uintBitsToFloat(beta1)
#define BETA2 uintBitsToFloat(beta2)
#define EPSILON uintBitsToFloat(epsilon)
#define ONE_MINUS_BETA1 uintBitsToFloat(one_minus_beta1)
#define ONE_MINUS_BETA2 uintBitsToFloat(one_minus_beta2)
// The float path's limits (adam()), specialization constants: m, g and v below M_LEAST,
// G_LEAST and V_LEAST (float32 bits: powers of two, so that the usual Betas, and a schedule
// of them, give the same limits) take the exact path, as does x below SUMMAND_LEAST
// (2^-102); CHECK_INPUTS: whether any of these limits lies above the data type's least
// nonzero value (float16's inputs never reach them with the usual Betas); EXACT_ONLY: Beta1,
// Beta2 or Epsilon is subnormal, every element takes the exact path; NEGATIVE_EPSILON: the
// float16 quick step does not run (half_step). Specialization constants: as push constants
// (the checks they switch off then ran for every element) they cost ADAM_OPTIMIZER float16
// 8% and float32 1-2% on an H200 (benchmarks/RESULTS.md, "2026-12-04 (evening)").
layout(constant_id = ADAM_LIMITS_ID) const uint M_LEAST = 0x00800000u;
layout(constant_id = ADAM_LIMITS_ID + 1) const uint G_LEAST = 0x00800000u;
layout(constant_id = ADAM_LIMITS_ID + 2) const uint V_LEAST = 0x00800000u;
layout(constant_id = ADAM_LIMITS_ID + 3) const bool CHECK_INPUTS = true;
layout(constant_id = ADAM_LIMITS_ID + 4) const bool EXACT_ONLY = false;
layout(constant_id = ADAM_LIMITS_ID + 5) const bool NEGATIVE_EPSILON = false;

#ifndef FLOAT_PATH
#define FLOAT_PATH(v) (v)
#endif
#ifndef HALF_STEP_SQRT
#define HALF_STEP_SQRT(v) sqrt(v)
#endif
#ifndef HALF_STEP_SKEW
#define HALF_STEP_SKEW(q) (q)
#endif

const uint SUMMAND_LEAST = 0x0C800000u;  // 2^-102

// The float path's operations, each rounded once (`precise`: no contraction).
float float_mul(float a, float b) {
    precise float r = FLOAT_PATH(a) * FLOAT_PATH(b);
    return FLOAT_PATH(r);
}
float float_add(float a, float b) {
    precise float r = FLOAT_PATH(a) + FLOAT_PATH(b);
    return FLOAT_PATH(r);
}
float float_sub(float a, float b) {
    precise float r = FLOAT_PATH(a) - FLOAT_PATH(b);
    return FLOAT_PATH(r);
}

// The exact path, for elements whose operands or results may lie below 2^-126: every product
// and sum by integers (correctly_rounded.glsl's ieee_mul and ieee_add), so a device that
// flushes subnormals in its float arithmetic gives the same bits as one that keeps them.
vec3 adam_exact(float xe, float me, float ve, float ge, float lr_alpha) {
    const float new_m = ieee_add(ieee_mul(BETA1, me), ieee_mul(ONE_MINUS_BETA1, ge));
    const float new_v = ieee_add(ieee_mul(BETA2, ve), ieee_mul(ONE_MINUS_BETA2, ieee_mul(ge, ge)));
    const float step = cr_div(ieee_mul(lr_alpha, new_m), ieee_add(cr_sqrt(new_v), EPSILON));
    // x - step as x + (-step), the sign flipped in the bits (no float instruction).
    const float new_x = ieee_add(xe, uintBitsToFloat(floatBitsToUint(step) ^ 0x80000000u));
    return vec3(new_x, new_m, new_v);
}

// Nonzero and below the float32 whose bits are `least` in magnitude (nonnegative floats order
// as their bits).
bool below(float v, uint least) { return (floatBitsToUint(v) & 0x7FFFFFFFu) - 1u < least - 1u; }

// |v| in [2^-100, 2^100) (bits: NaN and Inf are not).
bool in_range(float v) { return (floatBitsToUint(v) & 0x7FFFFFFFu) - 0x0D800000u < 0x64000000u; }

// float16 outputs: x - q, q = (lr_alpha m') / (sqrt(v') + Epsilon), through the device's own
// square root and division where that provably gives the float16 of the correctly rounded
// pipeline (most elements: a float16's last place is 2^13 float32 ones). Vulkan allows sqrt
// the error of 1 / inversesqrt (2 + 2.5 ulp) and 1 / d 2.5 ulp, so the device's quotient q'
// lies within about 19 u of the correctly rounded q (u = 2^-24 |q|: the sum, the product and
// cr_div's own roundings included); here it may lie anywhere within |q'| 2^-16 (256 u). x -
// q then lies between a = x - (q' + bound) and b = x - (q' - bound), each rounded once, and
// float32 then float16 rounding is monotone: where a and b give the same float16, so does x -
// q, and `a` is returned for it. false: the bounds straddle a float16 rounding point, or an
// operand lies outside the ranges where Vulkan bounds the errors (the caller's exact
// pipeline then). On the flushing devices Vulkan allows nothing here is subnormal: den and
// q are at least 2^-100, bound 2^-116, and x, a float16, a multiple of 2^-24 (so a and b are
// 0 or at least 2^-47).
bool half_step(float xe, float num, float new_v, out float new_x) {
    // Only where Epsilon >= 0 and v' >= 0: a negative Epsilon may cancel most of sqrt(v'),
    // which multiplies the root's relative error, and GLSL leaves sqrt(v') undefined for a
    // negative v' (cr_sqrt gives NaN).
    if (NEGATIVE_EPSILON || (floatBitsToUint(new_v) & 0x80000000u) != 0u) return false;
    precise float den = FLOAT_PATH(HALF_STEP_SQRT(new_v) + EPSILON);
    precise float quotient = FLOAT_PATH(HALF_STEP_SKEW(num * (1.0 / den)));
    const bool zero = (floatBitsToUint(num) & 0x7FFFFFFFu) == 0u;  // q is num's zero
    const float q = zero ? num : quotient;
    if (!in_range(den) || !(zero || in_range(q))) return false;
    const float bound = abs(q) * (1.0 / 65536.0);
    precise float high = q + bound;
    precise float low = q - bound;
    new_x = float_sub(xe, zero ? q : high);
    const float other = float_sub(xe, zero ? q : low);
    // The same float16: a and b in one binade of float16's normal range (2^-14 to 2^16: the
    // same sign and exponent field, 113 to 142), where adding load_store.glsl's half_grid
    // rounds each to that binade's float16 grid, once. Anything else (zeros, Inf, NaN,
    // float16 subnormals, a power of two between them) takes the exact pipeline.
    const uint ua = floatBitsToUint(new_x), ub = floatBitsToUint(other);
    if ((ua ^ ub) >= 0x00800000u || ((ua >> 23) & 0xFFu) - 113u > 29u) return false;
    const float c = half_grid(ua);
    precise float rounded_a = new_x + c;
    precise float rounded_b = other + c;
    return floatBitsToUint(rounded_a) == floatBitsToUint(rounded_b);
}

// One element's step: (x', m', v') from (x, m, v, g), lr_alpha = LearningRate alpha and its
// exponent field; half_outputs: the caller rounds x' to float16 (half_step). The float path
// runs where no operand or result can be subnormal, else adam_exact, with the same result
// (the host's limits, pyvkgrad/ops/adam_optimizer.py): the scalars are normal or 0 (the
// host's EXACT_ONLY for subnormal Betas or Epsilon, and here for a subnormal lr_alpha); every
// product that a sum adds is 0 or at least 2^-102, and so is every summand, so every sum is 0
// or normal; lr_alpha m' (the division's dividend) is normal or 0; the step x - q is checked
// as a sum. cr_div and cr_sqrt are exact for every input.
vec3 adam(float xe, float me, float ve, float ge, float lr_alpha, uint lr_alpha_field,
          bool half_outputs) {
    // (lr_alpha's bits, not a float comparison, which a flushing device may flush too.)
    if (EXACT_ONLY || (lr_alpha_field == 0u && (floatBitsToUint(lr_alpha) & 0x7FFFFFFFu) != 0u)
        || (CHECK_INPUTS && (below(me, M_LEAST) || below(ge, G_LEAST) || below(ve, V_LEAST)
                             || below(xe, SUMMAND_LEAST)))) {
        return adam_exact(xe, me, ve, ge, lr_alpha);
    }
    const float new_m = float_add(float_mul(BETA1, me), float_mul(ONE_MINUS_BETA1, ge));
    // lr_alpha m' >= 2^(fields' sum - 254): normal where the fields add up to 128 or more.
    const uint m_bits = floatBitsToUint(new_m) & 0x7FFFFFFFu;
    if (m_bits != 0u && (m_bits >> 23) + lr_alpha_field < 128u) {
        return adam_exact(xe, me, ve, ge, lr_alpha);
    }
    const float new_v = float_add(float_mul(BETA2, ve),
                                  float_mul(ONE_MINUS_BETA2, float_mul(ge, ge)));
    const float num = float_mul(lr_alpha, new_m);
    float quick_x;
    if (half_outputs && half_step(xe, num, new_v, quick_x)) return vec3(quick_x, new_m, new_v);
    const float step = cr_div(num, float_add(cr_sqrt(new_v), EPSILON));
    if (below(step, SUMMAND_LEAST)) return adam_exact(xe, me, ve, ge, lr_alpha);
    return vec3(float_sub(xe, step), new_m, new_v);
}
