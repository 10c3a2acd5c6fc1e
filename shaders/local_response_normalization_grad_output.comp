// DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD (local_response_normalization_grad), second
// kernel: dX from the first kernel's factors a and b (local_response_normalization_grad_norm),
//
//   T_i  = sum over the mirrored window of i of b[c]     (positions in order)
//   dX_i = dY_i a[i] - (COEFFICIENT X_i) T_i             (COEFFICIENT = 2 Alpha Beta / L)
//
// in float32, each operation rounded once in this order (`precise`); float16 rounds once on
// store (half_from_float). Under a loop limit the sum is split over dispatches, the running T_i kept
// in `running` until the last one.
//
// Constants: the shared ones (include/local_response_normalization_grad.glsl), then
//   COEFFICIENT (float32, rounded once on the host), DX_STRIDES.
// Push constants: count, first (the elements [first, count)), window_first, window_end (the
//   window positions walked).
// Dispatch: up to 65535 workgroups, a grid-stride loop over the elements. A float16 dX
//   element is stored through STORE_HALF_BITS (integer atomics), so dx is read-write.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"
#include "local_response_normalization_grad.glsl"

layout(constant_id = 17) const float COEFFICIENT = 0.0;
DIMS4(uint, DX_STRIDES, 18, 0u)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 3) readonly buffer A { float a[]; };
layout(set = 0, binding = 4) readonly buffer B { float b[]; };
layout(set = 0, binding = 5) buffer RUNNING { float running[]; };  // a split walk's sums
layout(push_constant) uniform Push { uint count; uint first; uint window_first; uint window_end; };

#define ADD_DX_OFFSET(D, c) target += (c) * DX_STRIDES##D;

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        const Element e = element_at(i);
        SUM_OVER_WINDOW(t, e, AFTER, BEFORE, running, i, b[w.offset.z])
        precise float result = LOAD(dy, e.offset.y) * a[i] - (run_time(COEFFICIENT) * LOAD(x, e.offset.x)) * t;
        uint target = 0u;
        FOR_EACH_COORDINATE4(SIZES, i, ADD_DX_OFFSET)
        if (IS_F16) {
            STORE_HALF_BITS(dx, target, half_from_float(result))
        } else {
            dx[target] = floatBitsToUint(result);
        }
    }
}
