// The scatter of DML_OPERATOR_RESAMPLE_GRAD's atomic kernels (resample_grad), shared by
// resample_grad_atomic.comp (compare-and-swap adds) and resample_grad_atomic_native.comp
// (native float atomics). The including file declares binding 2, `accumulator`, and
// `void atomic_add_f32(uint idx, float v)`: accumulator[idx] += v. Layout, tables and
// constants: resample_grad_atomic.comp.

#include "resample_grad.glsl"

layout(push_constant) uniform Push { uint count; };
DIMS4(uint, DY_SIZES, 7, 1)
DIMS4_3(uint, DY_STRIDES, ACCUMULATOR_STRIDES, FORWARD, 11, 0)

// Taps of output o along axis D: first input index i, weights wa (i) and wb (i + 1), n taps.
#define AXIS_TAPS(D, o, i, wa, wb, n)                                        \
    if (IDENTITY##D) {                                                       \
        i = (o); wa = 1.0; wb = 0.0; n = 1u;                                 \
    } else {                                                                 \
        i = tables[FORWARD##D + (o)];                                        \
        if (IS_LINEAR) {                                                     \
            wa = uintBitsToFloat(tables[FORWARD##D + DY_SIZES##D + (o)]);    \
            wb = uintBitsToFloat(tables[FORWARD##D + 2u * DY_SIZES##D + (o)]); \
            n = wb != 0.0 ? 2u : 1u;                                         \
        } else {                                                             \
            wa = 1.0; wb = 0.0; n = 1u;                                      \
        }                                                                    \
    }

// Coordinate c of dY along axis D, and its part of the element offset.
#define DY_COORDINATE(D, c) o##D = (c); yoff += (c) * DY_STRIDES##D;

void main() {
    GRID_STRIDE_LOOP(e, count) {
        uint o0, o1, o2, o3, yoff = 0u;
        FOR_EACH_COORDINATE4(DY_SIZES, e, DY_COORDINATE)
        float v = LOAD(dy, yoff);
        // The accumulator starts at +0 and a zero addend never changes a float32 sum. Zero from
        // the bits: a NaN dY must reach its taps whatever a compiler assumes about NaN.
        if ((floatBitsToUint(v) & 0x7FFFFFFFu) == 0u) {
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
            uint x0 = (i0 + t0) * ACCUMULATOR_STRIDES0;
            for (uint t1 = 0u; t1 < n1; ++t1) {
                float w1 = w0 * (t1 == 0u ? a1 : b1);
                uint x1 = x0 + (i1 + t1) * ACCUMULATOR_STRIDES1;
                for (uint t2 = 0u; t2 < n2; ++t2) {
                    float w2 = w1 * (t2 == 0u ? a2 : b2);
                    uint x2 = x1 + (i2 + t2) * ACCUMULATOR_STRIDES2;
                    for (uint t3 = 0u; t3 < n3; ++t3) {
                        float c = IS_LINEAR ? v * (w2 * (t3 == 0u ? a3 : b3)) : v;
                        if ((floatBitsToUint(c) & 0x7FFFFFFFu) != 0u) {
                            atomic_add_f32(x2 + (i3 + t3) * ACCUMULATOR_STRIDES3, c);
                        }
                    }
                }
            }
        }
    }
}
