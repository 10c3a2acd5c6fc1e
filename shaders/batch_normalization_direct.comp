// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD in one pass for short reductions
// (few elements per channel, including none reduced at all): one invocation per channel.
//
//   a = X - Mean, c0 = 1 / sqrt(Variance + Epsilon), sums over the channel's N_R elements:
//   OutputBiasGradient  = sum dY;  OutputScaleGradient = (sum dY * a) * c0
//   GRAD:          OutputGradient = dY * (Scale / sqrt(Variance + Epsilon))            (7.2)
//   TRAINING_GRAD: OutputGradient = alpha * ((dY - mean_R(dY)) - (a - ma) * q)         (7.4)
//     alpha = Scale * c0, ma = mean_R(a), q = mean_R(dY * (X - mean_R(X))) / (Var + eps)
//
// Sequential float32 sums of at most the plan's small bound of terms (the reduction kernels
// take longer channels). Invocation k owns channel k; neighbouring float16 elements may
// belong to other channels, so float16 stores use integer atomics on shared words.
//
// Bindings (set 0):
//   0  x       InputTensor                read
//   1  dy      InputGradientTensor        read
//   2  mean    MeanTensor                 read
//   3  var     VarianceTensor             read
//   4  scale   ScaleTensor                read
//   5  dx      OutputGradientTensor       write
//   6  dscale  OutputScaleGradientTensor  write
//   7  dbias   OutputBiasGradientTensor   write
// Specialization constants: 0 workgroup width, 1 IS_F16, 2 TRAINING, 3 EPS (float bits),
//   4 NR (N_R as a float), 5..12 K sizes, strides over K of X 13..20, dY 21..28, dX 29..36,
//   Mean 37..44, Variance 45..52, Scale 53..60, OutputScaleGradient 61..68,
//   OutputBiasGradient 69..76, then 77..84 R sizes and strides over R of X 85..92,
//   dY 93..100, dX 101..108 (8 dimensions each, right-aligned, in elements).
// Push constants: channels, reduced (elements per channel).
// Dispatch: up to 65535 workgroups; grid-stride loop over the channels.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define DIMS8(NAME, ID, DEF)                                                            \
    layout(constant_id = ID + 0) const uint NAME##0 = DEF;                              \
    layout(constant_id = ID + 1) const uint NAME##1 = DEF;                              \
    layout(constant_id = ID + 2) const uint NAME##2 = DEF;                              \
    layout(constant_id = ID + 3) const uint NAME##3 = DEF;                              \
    layout(constant_id = ID + 4) const uint NAME##4 = DEF;                              \
    layout(constant_id = ID + 5) const uint NAME##5 = DEF;                              \
    layout(constant_id = ID + 6) const uint NAME##6 = DEF;                              \
    layout(constant_id = ID + 7) const uint NAME##7 = DEF;

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool TRAINING = false;
layout(constant_id = 3) const float EPS = 0.0;
layout(constant_id = 4) const float NR = 1.0;
DIMS8(KN, 5, 1)
DIMS8(KXS, 13, 0)
DIMS8(KDYS, 21, 0)
DIMS8(KDXS, 29, 0)
DIMS8(KMS, 37, 0)
DIMS8(KVS, 45, 0)
DIMS8(KSS, 53, 0)
DIMS8(KDSS, 61, 0)
DIMS8(KDBS, 69, 0)
DIMS8(RN, 77, 1)
DIMS8(RXS, 85, 0)
DIMS8(RDYS, 93, 0)
DIMS8(RDXS, 101, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 2) readonly buffer MEAN { uint mean_[]; };
layout(set = 0, binding = 3) readonly buffer VAR { uint var_[]; };
layout(set = 0, binding = 4) readonly buffer SCALE { uint scale[]; };
layout(set = 0, binding = 5) buffer DX { uint dx[]; };
layout(set = 0, binding = 6) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 7) buffer DBIAS { uint dbias[]; };
layout(push_constant) uniform Push { uint channels; uint reduced; };

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))
#define STORE(buf, o, v)                                                                \
    if (IS_F16) {                                                                       \
        STORE_HALF_BITS(buf, o, HALF_FROM_FLOAT(v));                                    \
    } else {                                                                            \
        buf[o] = floatBitsToUint(v);                                                    \
    }

#define K_STEP(D) c = rem % KN##D; rem /= KN##D;                                        \
    t += c * uvec3(KXS##D, KDYS##D, KDXS##D);                                           \
    s += c * uvec4(KMS##D, KVS##D, KSS##D, KDSS##D); b += c * KDBS##D;
#define R_STEP(D) c = rem % RN##D; rem /= RN##D; o += c * uvec3(RXS##D, RDYS##D, RDXS##D);

// Offsets of channel k: t = (X, dY, dX), s = (Mean, Variance, Scale, OutputScaleGradient),
// b = OutputBiasGradient.
void k_offsets(uint k, out uvec3 t, out uvec4 s, out uint b) {
    uint rem = k, c;
    t = uvec3(0u);
    s = uvec4(0u);
    b = 0u;
    K_STEP(7) K_STEP(6) K_STEP(5) K_STEP(4) K_STEP(3) K_STEP(2) K_STEP(1)
    t += rem * uvec3(KXS0, KDYS0, KDXS0);
    s += rem * uvec4(KMS0, KVS0, KSS0, KDSS0);
    b += rem * KDBS0;
}

// Offsets of reduced index r in X, dY and dX (relative to the channel's).
uvec3 r_offsets(uint r) {
    uint rem = r, c;
    uvec3 o = uvec3(0u);
    R_STEP(7) R_STEP(6) R_STEP(5) R_STEP(4) R_STEP(3) R_STEP(2) R_STEP(1)
    return o + rem * uvec3(RXS0, RDYS0, RDXS0);
}

void main() {
    GRID_STRIDE_LOOP(k, channels) {
        uvec3 t;
        uvec4 s;
        uint b;
        k_offsets(k, t, s, b);
        const float m = LOAD(mean_, s.x);
        const float ve = LOAD(var_, s.y) + EPS;
        const float sc = LOAD(scale, s.z);
        const float c0 = 1.0 / sqrt(ve);
        const float coef = sc / sqrt(ve);
        vec3 sums = vec3(0.0);
        for (uint r = 0u; r < reduced; ++r) {
            const uvec3 o = t + r_offsets(r);
            const float gy = LOAD(dy, o.y);
            const float a = LOAD(x, o.x) - m;
            sums += vec3(gy, a, gy * a);
            if (!TRAINING) STORE(dx, o.z, gy * coef)
        }
        STORE(dbias, b, sums.x)
        STORE(dscale, s.w, sums.z * c0)
        if (TRAINING) {
            const float mdy = sums.x / NR;
            const float ma = sums.y / NR;
            const float q = (sums.z / NR - mdy * ma) / ve;
            const float alpha = sc * c0;
            for (uint r = 0u; r < reduced; ++r) {
                const uvec3 o = t + r_offsets(r);
                const float v = alpha * ((LOAD(dy, o.y) - mdy) - ((LOAD(x, o.x) - m) - ma) * q);
                STORE(dx, o.z, v)
            }
        }
    }
}
