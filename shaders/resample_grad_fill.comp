// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), first step of
// the atomic path: fill the float32 accumulator (float32 dX itself, or a scratch for float16 dX)
// with one 32-bit pattern.
//
//   accumulator[i] = value        for i in [0, count)
//
// Push constants: count (words), value (the 32-bit pattern to store; the plan passes +0).
// Dispatch: up to 65535 workgroups; grid-stride loop over the words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(set = 0, binding = 0) writeonly buffer ACCUMULATOR { uint accumulator[]; };
layout(push_constant) uniform Push { uint count; uint value; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        accumulator[i] = value;
    }
}
