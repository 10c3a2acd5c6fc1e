// The scatter of DML_OPERATOR_RESAMPLE_GRAD's atomic kernels, shared by
// resample_grad_atomic.comp (compare-and-swap adds) and resample_grad_atomic_native.comp
// (native float atomics). The including file declares binding 2, `acc`, and
// `void atomic_add_f32(uint idx, float v)`: acc[idx] += v. Layout, tables and constants:
// resample_grad_atomic.comp.

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = false;
layout(constant_id = 3) const uint M0 = 1;
layout(constant_id = 4) const uint M1 = 1;
layout(constant_id = 5) const uint M2 = 1;
layout(constant_id = 6) const uint M3 = 1;
layout(constant_id = 7) const uint YS0 = 0;
layout(constant_id = 8) const uint YS1 = 0;
layout(constant_id = 9) const uint YS2 = 0;
layout(constant_id = 10) const uint YS3 = 0;
layout(constant_id = 11) const uint TS0 = 0;
layout(constant_id = 12) const uint TS1 = 0;
layout(constant_id = 13) const uint TS2 = 0;
layout(constant_id = 14) const uint TS3 = 0;
layout(constant_id = 15) const bool ID0 = true;
layout(constant_id = 16) const bool ID1 = true;
layout(constant_id = 17) const bool ID2 = true;
layout(constant_id = 18) const bool ID3 = true;
layout(constant_id = 19) const uint FWD0 = 0;
layout(constant_id = 20) const uint FWD1 = 0;
layout(constant_id = 21) const uint FWD2 = 0;
layout(constant_id = 22) const uint FWD3 = 0;

layout(set = 0, binding = 0) readonly buffer Tab { uint tab[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(push_constant) uniform Push { uint count; };

// Taps of output o along axis D: first input index i, weights wa (i) and wb (i + 1), n taps.
#define AXIS_TAPS(D, o, i, wa, wb, n)                                \
    if (ID##D) {                                                     \
        i = (o); wa = 1.0; wb = 0.0; n = 1u;                         \
    } else {                                                         \
        i = tab[FWD##D + (o)];                                       \
        if (IS_LINEAR) {                                             \
            wa = uintBitsToFloat(tab[FWD##D + M##D + (o)]);          \
            wb = uintBitsToFloat(tab[FWD##D + 2u * M##D + (o)]);     \
            n = wb != 0.0 ? 2u : 1u;                                 \
        } else {                                                     \
            wa = 1.0; wb = 0.0; n = 1u;                              \
        }                                                            \
    }

void main() {
    GRID_STRIDE_LOOP(e, count) {
        uint r = e;
        uint o3 = r % M3; r /= M3;
        uint o2 = r % M2; r /= M2;
        uint o1 = r % M1;
        uint o0 = r / M1;
        uint yoff = o0 * YS0 + o1 * YS1 + o2 * YS2 + o3 * YS3;
        float v = IS_F16 ? LOAD_HALF(dy, yoff) : uintBitsToFloat(dy[yoff]);
        // The accumulator starts at +0 and a zero addend never changes a float32 sum.
        if (v == 0.0) {
            continue;
        }
        uint i0, i1, i2, i3, n0, n1, n2, n3;
        float a0, b0, a1, b1, a2, b2, a3, b3;
        AXIS_TAPS(0, o0, i0, a0, b0, n0)
        AXIS_TAPS(1, o1, i1, a1, b1, n1)
        AXIS_TAPS(2, o2, i2, a2, b2, n2)
        AXIS_TAPS(3, o3, i3, a3, b3, n3)
        for (uint t0 = 0u; t0 < n0; ++t0) {
            float w0 = t0 == 0u ? a0 : b0;
            uint x0 = (i0 + t0) * TS0;
            for (uint t1 = 0u; t1 < n1; ++t1) {
                float w1 = w0 * (t1 == 0u ? a1 : b1);
                uint x1 = x0 + (i1 + t1) * TS1;
                for (uint t2 = 0u; t2 < n2; ++t2) {
                    float w2 = w1 * (t2 == 0u ? a2 : b2);
                    uint x2 = x1 + (i2 + t2) * TS2;
                    for (uint t3 = 0u; t3 < n3; ++t3) {
                        float c = IS_LINEAR ? v * (w2 * (t3 == 0u ? a3 : b3)) : v;
                        if (c != 0.0) {
                            atomic_add_f32(x2 + (i3 + t3) * TS3, c);
                        }
                    }
                }
            }
        }
    }
}
