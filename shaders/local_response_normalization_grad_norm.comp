// DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD (local_response_normalization_grad), first
// kernel: per element p, its normaliser and the two factors the gradient needs,
//
//   S_p = sum over the window of p of X_j^2       (positions in order, include/
//                                                   local_response_normalization_grad.glsl)
//   N_p = Bias + (Alpha / L) S_p
//   a[p] = N_p^(-Beta)                             (pow_fixed: the same bits everywhere)
//   b[p] = ((dY_p X_p) a[p]) / N_p                 (= dY_p X_p N_p^(-Beta - 1); cr_div)
//
// N^(-Beta - 1) is NaN for N < 0 whatever Beta (docs/semantics.md §15): a[p] is already NaN
// there for Beta != 0, but N^(-0) is 1, so b[p] is set NaN where N < 0 (its sign bit, not a
// comparison a compiler may fold for NaN).
//
// in float32, each operation rounded once in this order (`precise`). Under a loop limit the
// window's sum is split over dispatches: a[p] holds the running S_p until the last one.
//
// Constants: the shared ones (include/local_response_normalization_grad.glsl), then BIAS,
//   ALPHA_OVER_SIZE (float32 Alpha / L, rounded once on the host), BETA.
// Push constants: count, first (the elements [first, count) of this dispatch), window_first,
//   window_end (the window positions it walks).
// Dispatch: up to 65535 workgroups, a grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"
#include "pow_fixed.glsl"
#include "local_response_normalization_grad.glsl"

layout(constant_id = 17) const float BIAS = 1.0;
layout(constant_id = 18) const float ALPHA_OVER_SIZE = 1e-4;
layout(constant_id = 19) const float BETA = 0.75;

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer A { float a[]; };  // running S, then N^-Beta (packed)
layout(set = 0, binding = 3) writeonly buffer B { float b[]; };  // dY X N^(-Beta - 1) (packed)
layout(push_constant) uniform Push { uint count; uint first; uint window_first; uint window_end; };

// X_j^2 at X offset `offset`, rounded once.
float x_squared(uint offset) {
    const float xj = LOAD(x, offset);
    precise float square = xj * xj;
    return square;
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        const Element e = element_at(i);
        SUM_OVER_WINDOW(s, e, BEFORE, AFTER, a, i, x_squared(w.offset.x))
        // (Bias and Alpha / L at run time: Alpha = 0 times an infinite or NaN sum is NaN, and
        // Bias = 0 plus a -0 product (Alpha < 0) is +0.)
        precise float n = run_time(BIAS) + run_time(ALPHA_OVER_SIZE) * s;
        const float power = pow_fixed(n, -BETA);
        precise float product = (LOAD(dy, e.offset.y) * LOAD(x, e.offset.x)) * power;
        a[i] = power;
        const uint bits = floatBitsToUint(n);
        b[i] = bits > 0x80000000u ? uintBitsToFloat(0x7FC00000u) : cr_div(product, n);
    }
}
