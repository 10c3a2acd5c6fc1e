// DML_OPERATOR_AVERAGE_POOLING_GRAD (average_pooling_grad): the transpose of average pooling,
// gathered (include/pooling_grad.glsl: the geometry, the summation order, the dispatches).
//
//   dX[p] = sum over the windows o that contain p (ascending) of dY[o] / count(o)
//   count(o) = prod_d count_d(o),  with s = o S - P0 the window's start along axis d:
//     INCLUDE_PADDING: min(s + W, In + P1) - s   (positions inside the padded extent)
//     otherwise:       min(s + W, In) - max(s, 0) (real positions)
//
// The division is correctly rounded (cr_div, include/correctly_rounded.glsl), the count an
// exact integer (the plan keeps the window's size below 2^24), the sum float32 in ascending
// output order, so the same bits on every device; float16 dY widens exactly and each dX
// rounds once (half_from_float). A window with no real element contains no dX element: it adds nothing.
//
// Constants: INCLUDE_PADDING, and include/pooling_grad.glsl's.
// Bindings: dy (InputGradientTensor), dx (OutputGradientTensor; float16 stores through word
//   atomics), accumulator (scratch: the running sums between dispatches, one float32 per dX
//   element; a word where the plan runs one dispatch per element).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 1) buffer DX { uint dx[]; };
layout(set = 0, binding = 2) buffer ACCUMULATOR { uint accumulator[]; };

#include "pooling_grad.glsl"

layout(constant_id = 35) const bool INCLUDE_PADDING = false;

uint x_slice_offset(uint n, uint c) { return 0u; }

// The divisor's factor along one axis for a window starting at s (an int: it may lie in
// the start padding). Only windows with a real element come here, so it is >= 1.
uint axis_count(int s, uint window, uint size, uint end_padding) {
    const int end = s + int(window);
    return INCLUDE_PADDING ? uint(min(end, int(size + end_padding)) - s)
                           : uint(min(end, int(size)) - max(s, 0));
}

bool window_term(Element el, uvec3 o, out float term) {
    const ivec3 s = ivec3(o * uvec3(STRIDES0, STRIDES1, STRIDES2))
        - ivec3(START_PADDING0, START_PADDING1, START_PADDING2);
    const uint count = axis_count(s.x, WINDOW0, SIZES2, END_PADDING0)
        * axis_count(s.y, WINDOW1, SIZES3, END_PADDING1)
        * axis_count(s.z, WINDOW2, SIZES4, END_PADDING2);
    const float v = LOAD(dy, el.dy_base + o.x * DY_STRIDES2 + o.y * DY_STRIDES3
                                 + o.z * DY_STRIDES4);
    term = cr_div(v, float(count));
    return true;
}
