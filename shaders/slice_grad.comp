// DML_OPERATOR_SLICE_GRAD (slice_grad), any strides: dX = +0 everywhere but on the window,
// where dX[FIRSTS + STEPS k] = dY[DY_BASE + k DY_STRIDES] (include/slice_grad.glsl). A
// gather: one invocation per dX element finds whether it lies on the window and copies the
// dY element's bits, or writes zero bits, so each element is written once and the result is
// a bit copy in every data type.
//
// Constants: LANES_LOG2 and the window (include/slice_grad.glsl), then DX_STRIDES (dX's
//   element strides, 8 dimensions, right-aligned).
// Push constants: count (the dX elements this dispatch ends at), first (where it starts).
// Dispatch: up to 65535 workgroups, a grid-stride loop over the dX elements [first, count).
//   Elements narrower than a word are stored through STORE_SUB_BITS (integer atomics: the
//   word's other elements belong to other invocations), so dx is read-write.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "slice_grad.glsl"

DIMS8(uint, DX_STRIDES, 43, 0u)

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 1) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(push_constant) uniform Push { uint count; uint first; };

#define MAP_AND_ADD_OFFSET(D, c) SLICE_MAP(D, c) target += (c) * DX_STRIDES##D;

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        bool on_window = true;
        uint source = DY_BASE, target = 0u;
        FOR_EACH_COORDINATE8(SIZES, i, MAP_AND_ADD_OFFSET)
        uint bits = 0u;
        if (on_window) {  // off the window `source` may lie outside dY
            bits = SUB_BITS(dy, source, LANES_LOG2);
        }
        if (LANES_LOG2 == 0u) {
            dx[target] = bits;
        } else {
            STORE_SUB_BITS(dx, target, bits, LANES_LOG2)
        }
    }
}
