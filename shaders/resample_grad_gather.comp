// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), deterministic
// gather: one invocation per dX element (or per float16 word of a packed dX), no atomics, a fixed
// summation order.
//
//   dX[i0,i1,i2,i3] = sum over o_d in C_d(i_d) of dY[o0,o1,o2,o3] * w0(o0,i0)*w1(o1,i1)*w2(o2,i2)*w3(o3,i3)
//
// C_d(i) is the set of forward outputs o along axis d that read input i (nearest: i(o) == i;
// linear: a tap of o lands on i with a nonzero weight). The forward map is monotone, so C_d(i)
// is a contiguous range [BEGIN[i], BEGIN[i] + COUNTS[i+1] - COUNTS[i]); the host computes it,
// and the weights, in exact float32 (docs/semantics.md §6.2): no coordinate is computed here.
// Summation order: o0, then o1, o2, o3 ascending (innermost o3). Nearest: acc += dY. Linear
// (ROW_SUM, include/resample_grad.glsl): along the innermost resampled axis INNER first,
// h = fma(dY, w_INNER, h) from 0, then acc = fma(h, w_outer, acc) with w_outer the product of
// the other axes' weights in axis order, ((w0*w1)*w2); accumulation in float32, one rounding
// on a float16 store.
//
// Bindings: tables, dy and IDENTITY as in include/resample_grad.glsl; dx
//   (OutputGradientTensor; float16 strided stores use integer atomics on shared words).
// Tables, per axis d (In_d = dX size): BEGIN_d[In_d] first o of each input index,
//   COUNTS_d[In_d+1] prefix counts (entry index base), WEIGHTS_d[entries] weights (linear
//   only). Nearest ranges partition [0, Out_d) in order, so there BEGIN_d == COUNTS_d (the
//   same words).
// Constants: PAIRED (float16 packed dX: one invocation per word, two elements), DX_SIZES,
//   DX_STRIDES, DY_STRIDES (4 dimensions, right-aligned, in elements), BEGIN, COUNTS, WEIGHTS
//   (word offsets in tables), WINDOWED (see below).
// Push constants: count (dX elements); with WINDOWED, first and window_begin/end0..3.
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dX elements (PAIRED:
//   words).
//
// WINDOWED (where a driver ends long loops, as lavapipe does after 65535 iterations per
// invocation): each dispatch sums only the contributors o_d in [window_begin_d,
// window_end_d) and adds them to a packed float32 accumulator bound as dx (the first window
// overwrites it); the plan runs the windows in a fixed order and resample_grad_convert stores
// the result, so no invocation loops past the limit and the result stays deterministic.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "resample_grad.glsl"

layout(constant_id = 7) const bool PAIRED = false;
DIMS4(uint, DX_SIZES, 8, 1)
DIMS4_2(uint, DX_STRIDES, DY_STRIDES, 12, 0)
DIMS4_3(uint, BEGIN, COUNTS, WEIGHTS, 20, 0)
layout(constant_id = 32) const bool WINDOWED = false;
// OutputGradientTensor, or with WINDOWED the float32 accumulator
layout(set = 0, binding = 2) buffer DX { uint dx[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint window_begin0; uint window_begin1; uint window_begin2; uint window_begin3;
    uint window_end0; uint window_end1; uint window_end2; uint window_end3;
};

// Contributor range of input index i along axis D: first output ob, entry base wb, length n.
#define AXIS_RANGE(D, i, ob, wb, n)                                  \
    if (IDENTITY##D) {                                               \
        ob = (i); wb = 0u; n = 1u;                                   \
    } else {                                                         \
        ob = tables[BEGIN##D + (i)];                                 \
        wb = tables[COUNTS##D + (i)];                                \
        n = tables[COUNTS##D + (i) + 1u] - wb;                       \
    }
// With WINDOWED, keep the contributors of axis D inside [window_begin_D, window_end_D).
#define CLIP_TO_WINDOW(D, ob, wb, n)                                 \
    if (WINDOWED && !IDENTITY##D) {                                  \
        uint e_ = min(window_end##D, ob + n);                        \
        uint s_ = min(max(window_begin##D, ob), e_);                 \
        wb += s_ - ob; n = e_ - s_; ob = s_;                         \
    }
#define WEIGHT(D, k) \
    ((IS_LINEAR && !IDENTITY##D) ? uintBitsToFloat(tables[WEIGHTS##D + (k)]) : 1.0)

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
    CLIP_TO_WINDOW(0, ob0, wb0, n0)
    CLIP_TO_WINDOW(1, ob1, wb1, n1)
    CLIP_TO_WINDOW(2, ob2, wb2, n2)
    CLIP_TO_WINDOW(3, ob3, wb3, n3)
    // The innermost resampled axis (0 when none is: every weight is then 1).
    uint inner = !IDENTITY3 ? 3u : !IDENTITY2 ? 2u : !IDENTITY1 ? 1u : 0u;
    precise float acc = 0.0;  // no contraction but the fma of ACCUMULATE and ROW_SUM
    precise float h = 0.0;    // linear: the sum along axis `inner` (zeroed before its loop)
    for (uint k0 = 0u; k0 < n0; ++k0) {
        float a0 = WEIGHT(0, wb0 + k0);
        float w0 = inner == 0u ? 1.0 : a0;
        uint y0 = (ob0 + k0) * DY_STRIDES0;
        if (inner == 1u) h = 0.0;
        for (uint k1 = 0u; k1 < n1; ++k1) {
            float a1 = WEIGHT(1, wb1 + k1);
            float w1 = w0 * (inner == 1u ? 1.0 : a1);
            uint y1 = y0 + (ob1 + k1) * DY_STRIDES1;
            if (inner == 2u) h = 0.0;
            for (uint k2 = 0u; k2 < n2; ++k2) {
                float a2 = WEIGHT(2, wb2 + k2);
                float w2 = w1 * (inner == 2u ? 1.0 : a2);
                uint y2 = y1 + (ob2 + k2) * DY_STRIDES2;
                if (inner == 3u) h = 0.0;
                for (uint k3 = 0u; k3 < n3; ++k3) {
                    float v = LOAD(dy, y2 + (ob3 + k3) * DY_STRIDES3);
                    if (IS_LINEAR) {
                        float a3 = WEIGHT(3, wb3 + k3);
                        float wi = inner == 3u ? a3 : inner == 2u ? a2 : inner == 1u ? a1 : a0;
                        ACCUMULATE(h, v, wi)
                    } else {
                        ACCUMULATE(acc, v, 1.0)
                    }
                }
                if (inner == 3u) ROW_SUM(acc, h, w2)
            }
            if (inner == 2u) ROW_SUM(acc, h, w1)
        }
        if (inner == 1u) ROW_SUM(acc, h, w0)
    }
    if (inner == 0u) ROW_SUM(acc, h, 1.0)
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
    } else if (WINDOWED) {  // packed float32 accumulator, element e at word e
        GRID_STRIDE_LOOP(e, count) {
            uint off;
            float s = dx_element(e, off);
            dx[e] = floatBitsToUint(first != 0u ? s : uintBitsToFloat(dx[e]) + s);
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint off;
            float s = dx_element(e, off);
            STORE(dx, off, s)
        }
    }
}
