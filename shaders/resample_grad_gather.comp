// DML_OPERATOR_RESAMPLE_GRAD, deterministic gather: one invocation per dX element (or per
// float16 word of a packed dX), no atomics, a fixed summation order.
//
//   dX[i0,i1,i2,i3] = sum over o_d in C_d(i_d) of dY[o0,o1,o2,o3] * w0(o0,i0)*w1(o1,i1)*w2(o2,i2)*w3(o3,i3)
//
// C_d(i) is the set of forward outputs o along axis d that read input i (nearest: i(o) == i;
// linear: a tap of o lands on i with a nonzero weight). The forward map is monotone, so C_d(i)
// is a contiguous range [BEG[i], BEG[i] + CNT[i+1] - CNT[i]); the host computes it, and the
// weights, in exact float32 (docs/semantics.md §6.2): no coordinate is computed here.
// Summation order: o0, then o1, o2, o3 ascending (innermost o3); weights multiply as
// ((w0*w1)*w2)*w3, then times dY; accumulation in float32, one rounding on a float16 store.
//
// Bindings (set 0):
//   0  tab  per-axis tables (uint words, weights as float32 bits)     read
//   1  dy   InputGradientTensor                                         read
//   2  dx   OutputGradientTensor                                        write (float16 strided
//           stores use integer atomics on shared words)
// Tables, per axis d (In_d = dX size): BEG_d[In_d] first o of each input index, CNT_d[In_d+1]
//   prefix counts (entry index base), WGT_d[entries] weights (linear only). Nearest ranges
//   partition [0, Out_d) in order, so there BEG_d == CNT_d (the same words).
// Specialization constants: 0 local size x, 1 IS_F16, 2 IS_LINEAR, 3 PAIRED (float16 packed
//   dX: one invocation per word, two elements), 4..7 dX sizes, 8..11 dX strides, 12..15 dY
//   strides (4 dimensions, right-aligned, in elements), 16..19 ID_d (axis d is the identity:
//   o = i, weight 1, no table), 20..23 BEG_d, 24..27 CNT_d, 28..31 WGT_d (word offsets in tab).
// Push constants: count (dX elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over dX elements (PAIRED: words).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = false;
layout(constant_id = 3) const bool PAIRED = false;
layout(constant_id = 4) const uint N0 = 1;
layout(constant_id = 5) const uint N1 = 1;
layout(constant_id = 6) const uint N2 = 1;
layout(constant_id = 7) const uint N3 = 1;
layout(constant_id = 8) const uint XS0 = 0;
layout(constant_id = 9) const uint XS1 = 0;
layout(constant_id = 10) const uint XS2 = 0;
layout(constant_id = 11) const uint XS3 = 0;
layout(constant_id = 12) const uint YS0 = 0;
layout(constant_id = 13) const uint YS1 = 0;
layout(constant_id = 14) const uint YS2 = 0;
layout(constant_id = 15) const uint YS3 = 0;
layout(constant_id = 16) const bool ID0 = true;
layout(constant_id = 17) const bool ID1 = true;
layout(constant_id = 18) const bool ID2 = true;
layout(constant_id = 19) const bool ID3 = true;
layout(constant_id = 20) const uint BEG0 = 0;
layout(constant_id = 21) const uint BEG1 = 0;
layout(constant_id = 22) const uint BEG2 = 0;
layout(constant_id = 23) const uint BEG3 = 0;
layout(constant_id = 24) const uint CNT0 = 0;
layout(constant_id = 25) const uint CNT1 = 0;
layout(constant_id = 26) const uint CNT2 = 0;
layout(constant_id = 27) const uint CNT3 = 0;
layout(constant_id = 28) const uint WGT0 = 0;
layout(constant_id = 29) const uint WGT1 = 0;
layout(constant_id = 30) const uint WGT2 = 0;
layout(constant_id = 31) const uint WGT3 = 0;

layout(set = 0, binding = 0) readonly buffer Tab { uint tab[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 2) buffer DX { uint dx[]; };
layout(push_constant) uniform Push { uint count; };

// Contributor range of input index i along axis D: first output ob, entry base wb, length n.
#define AXIS_RANGE(D, i, ob, wb, n)                                  \
    if (ID##D) {                                                     \
        ob = (i); wb = 0u; n = 1u;                                   \
    } else {                                                         \
        ob = tab[BEG##D + (i)];                                      \
        wb = tab[CNT##D + (i)];                                      \
        n = tab[CNT##D + (i) + 1u] - wb;                             \
    }
#define WEIGHT(D, k) ((IS_LINEAR && !ID##D) ? uintBitsToFloat(tab[WGT##D + (k)]) : 1.0)

float load_dy(uint off) {
    return IS_F16 ? LOAD_HALF(dy, off) : uintBitsToFloat(dy[off]);
}

// The gradient of dX element e (row-major logical index); xoff gets its element offset.
float dx_element(uint e, out uint xoff) {
    uint i3 = e % N3; e /= N3;
    uint i2 = e % N2; e /= N2;
    uint i1 = e % N1;
    uint i0 = e / N1;
    xoff = i0 * XS0 + i1 * XS1 + i2 * XS2 + i3 * XS3;
    uint ob0, wb0, n0, ob1, wb1, n1, ob2, wb2, n2, ob3, wb3, n3;
    AXIS_RANGE(0, i0, ob0, wb0, n0)
    AXIS_RANGE(1, i1, ob1, wb1, n1)
    AXIS_RANGE(2, i2, ob2, wb2, n2)
    AXIS_RANGE(3, i3, ob3, wb3, n3)
    float acc = 0.0;
    for (uint k0 = 0u; k0 < n0; ++k0) {
        float w0 = WEIGHT(0, wb0 + k0);
        uint y0 = (ob0 + k0) * YS0;
        for (uint k1 = 0u; k1 < n1; ++k1) {
            float w1 = w0 * WEIGHT(1, wb1 + k1);
            uint y1 = y0 + (ob1 + k1) * YS1;
            for (uint k2 = 0u; k2 < n2; ++k2) {
                float w2 = w1 * WEIGHT(2, wb2 + k2);
                uint y2 = y1 + (ob2 + k2) * YS2;
                for (uint k3 = 0u; k3 < n3; ++k3) {
                    float v = load_dy(y2 + (ob3 + k3) * YS3);
                    acc += IS_LINEAR ? v * (w2 * WEIGHT(3, wb3 + k3)) : v;
                }
            }
        }
    }
    return acc;
}

void main() {
    if (PAIRED) {
        // Packed float16 dX: this invocation owns word w (elements 2w and 2w+1) outright.
        uint words = (count + 1u) >> 1u;
        GRID_STRIDE_LOOP(w, words) {
            uint off;
            uint lo = HALF_FROM_FLOAT(dx_element(2u * w, off));
            uint hi = 2u * w + 1u < count ? HALF_FROM_FLOAT(dx_element(2u * w + 1u, off)) : 0u;
            dx[w] = lo | (hi << 16u);
        }
    } else {
        GRID_STRIDE_LOOP(e, count) {
            uint off;
            float s = dx_element(e, off);
            if (IS_F16) {
                STORE_HALF_BITS(dx, off, HALF_FROM_FLOAT(s));
            } else {
                dx[off] = floatBitsToUint(s);
            }
        }
    }
}
