// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), deterministic
// gather: one invocation per dX element (or per float16 word of a packed dX), no atomics, the
// canonical summation order.
//
//   dX[i0,i1,i2,i3] = sum over o_d in C_d(i_d) of dY[o0,o1,o2,o3] * w0(o0,i0)*w1(o1,i1)*w2(o2,i2)*w3(o3,i3)
//
// C_d(i) and the tables: include/resample_grad_gather.glsl. The order and the arithmetic are
// include/resample_grad.glsl's (the canonical order every gather kernel and plan keeps):
// contributors o0, then o1, o2, o3 ascending (innermost o3); nearest acc += dY; linear, per
// row (a combination of the contributors along the axes before INNER, the innermost resampled
// axis), h = 0, then h += dY * w_INNER over the row, then acc += h * w_outer, w_outer the
// product of the other axes' weights in axis order, ((w0*w1)*w2). Accumulation in float32,
// one rounding on a float16 store.
//
// Bindings: tables, dy and IDENTITY as in include/resample_grad.glsl; dx
//   (OutputGradientTensor; float16 strided stores use integer atomics on shared words).
// Constants: those of include/resample_grad_gather.glsl, PAIRED (float16 packed dX: one
//   invocation per word, two elements) and DX_STRIDES (4 dimensions, right-aligned).
// Push constants: count (dX elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dX elements (PAIRED:
//   words). Where a driver ends long loops before an element's contributors are summed, the
//   plan runs resample_grad_gather_windowed instead (the same order and arithmetic).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "resample_grad.glsl"
#include "resample_grad_gather.glsl"

layout(constant_id = 27) const bool PAIRED = false;
DIMS4(uint, DX_STRIDES, 28, 0)
layout(set = 0, binding = 2) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(push_constant) uniform Push { uint count; };

// Coordinate c of dX along axis D, and its part of the element offset.
#define DX_COORDINATE(D, c) i##D = (c); xoff += (c) * DX_STRIDES##D;

// The gradient of dX element e (row-major logical index); xoff gets its element offset.
float dx_element(uint e, out uint xoff) {
    uint i0, i1, i2, i3;
    xoff = 0u;
    FOR_EACH_COORDINATE4(DX_SIZES, e, DX_COORDINATE)
    uint ob0, wb0, n0, ob1, wb1, n1, ob2, wb2, n2, ob3, wb3, n3;
    AXIS_RANGE(0, i0, ob0, wb0, n0)
    AXIS_RANGE(1, i1, ob1, wb1, n1)
    AXIS_RANGE(2, i2, ob2, wb2, n2)
    AXIS_RANGE(3, i3, ob3, wb3, n3)
    precise float acc = 0.0;  // no compiler may contract or reorder its arithmetic
    precise float h = 0.0;    // linear: the row's sum along axis INNER (zeroed before its loop)
    for (uint k0 = 0u; k0 < n0; ++k0) {
        float a0 = WEIGHT(0, wb0 + k0);
        float w0 = INNER == 0u ? 1.0 : a0;  // the product of the outer weights so far
        uint y0 = (ob0 + k0) * DY_STRIDES0;
        if (INNER == 1u) h = 0.0;
        for (uint k1 = 0u; k1 < n1; ++k1) {
            float a1 = WEIGHT(1, wb1 + k1);
            float w1 = w0 * (INNER == 1u ? 1.0 : a1);
            uint y1 = y0 + (ob1 + k1) * DY_STRIDES1;
            if (INNER == 2u) h = 0.0;
            for (uint k2 = 0u; k2 < n2; ++k2) {
                float a2 = WEIGHT(2, wb2 + k2);
                float w2 = w1 * (INNER == 2u ? 1.0 : a2);
                uint y2 = y1 + (ob2 + k2) * DY_STRIDES2;
                if (INNER == 3u) h = 0.0;
                for (uint k3 = 0u; k3 < n3; ++k3) {
                    float v = LOAD(dy, y2 + (ob3 + k3) * DY_STRIDES3);
                    if (IS_LINEAR) {
                        float a3 = WEIGHT(3, wb3 + k3);
                        float wi = INNER == 3u ? a3 : INNER == 2u ? a2 : INNER == 1u ? a1 : a0;
                        ACCUMULATE(h, v, wi)
                    } else {
                        ACCUMULATE(acc, v, 1.0)
                    }
                }
                if (INNER == 3u) ROW_SUM(acc, h, w2)
            }
            if (INNER == 2u) ROW_SUM(acc, h, w1)
        }
        if (INNER == 1u) ROW_SUM(acc, h, w0)
    }
    if (INNER == 0u) ROW_SUM(acc, h, 1.0)
    return plus_zero(acc);
}

void main() {
    if (PAIRED) {
        // Packed float16 dX: this invocation owns word w (elements 2w and 2w+1) outright.
        uint words = (count + 1u) >> 1u;
        GRID_STRIDE_LOOP(w, words) {
            uint off;
            uint lo = HALF_FROM_FLOAT(dx_element(2u * w, off));
            if (2u * w + 1u < count) {
                dx[w] = lo | (HALF_FROM_FLOAT(dx_element(2u * w + 1u, off)) << 16u);
            } else {  // an odd count: the word's other half is not dX's
                STORE_HALF_BITS(dx, 2u * w, lo);
            }
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint off;
            float s = dx_element(e, off);
            STORE(dx, off, s)
        }
    }
}
