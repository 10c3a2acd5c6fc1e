// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad) in one pass for short
// reductions (few elements per channel, including none reduced at all): one invocation per
// channel.
//
//   sums over the channel's N_R elements of dY, a and dY a, a = X - shift (the Mean, or for
//   the training grad the channel's first X), then, as include/batch_normalization_grad.glsl
//   says: OutputBiasGradient, OutputScaleGradient, and
//   GRAD:          OutputGradient = dY * (Scale / sqrt(Variance + Epsilon))            (7.2)
//   TRAINING_GRAD: OutputGradient = alpha * ((dY - mean_R(dY)) - (a - ma) * q)         (7.4)
//
// Sequential float32 sums, in the channel's element order, of at most the plan's small bound
// of terms (the reduction kernels take longer channels): an order fixed by the problem, and
// every operation `precise` or correctly rounded, so the same bits on every device. Invocation k owns channel k; neighbouring float16 elements may
// belong to other channels, so float16 stores use integer atomics on shared words.
//
// Constants: K_SIZES and the strides over the kept dimensions K of all eight tensors, R_SIZES
//   and the strides over the reduced dimensions R of X, dY and dX (8 dimensions each,
//   right-aligned, in elements); N_R is the reduced element count as a float.
// Push constants: channels (the channel this dispatch ends at), reduced (elements per channel),
//   first (the channel it starts at).
// Dispatch: up to 65535 workgroups; grid-stride loop over the channels [first, channels).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool TRAINING = false;
layout(constant_id = 3) const float EPSILON = 0.0;
layout(constant_id = 4) const float N_R = 1.0;
DIMS8(uint, K_SIZES, 5, 1)
DIMS8_8(uint, K_X_STRIDES, K_DY_STRIDES, K_DX_STRIDES, K_MEAN_STRIDES, K_VARIANCE_STRIDES,
        K_SCALE_STRIDES, K_DSCALE_STRIDES, K_DBIAS_STRIDES, 13, 0)
DIMS8(uint, R_SIZES, 77, 1)
DIMS8_3(uint, R_X_STRIDES, R_DY_STRIDES, R_DX_STRIDES, 85, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 2) readonly buffer MEAN { uint mean[]; };  // MeanTensor
layout(set = 0, binding = 3) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 4) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 5) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 6) buffer DSCALE { uint dscale[]; };  // OutputScaleGradientTensor
layout(set = 0, binding = 7) buffer DBIAS { uint dbias[]; };  // OutputBiasGradientTensor
layout(push_constant) uniform Push { uint channels; uint reduced; uint first; };

#include "batch_normalization_grad.glsl"

#define ADD_K_OFFSETS(D, c)                                                             \
    t += (c) * uvec3(K_X_STRIDES##D, K_DY_STRIDES##D, K_DX_STRIDES##D);                 \
    s += (c) * uvec4(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D, K_SCALE_STRIDES##D,      \
                     K_DSCALE_STRIDES##D);                                              \
    b += (c) * K_DBIAS_STRIDES##D;
#define ADD_R_OFFSETS(D, c) o += (c) * uvec3(R_X_STRIDES##D, R_DY_STRIDES##D, R_DX_STRIDES##D);

// Offsets of channel k: t = (X, dY, dX), s = (Mean, Variance, Scale, OutputScaleGradient),
// b = OutputBiasGradient.
void k_offsets(uint k, out uvec3 t, out uvec4 s, out uint b) {
    t = uvec3(0u);
    s = uvec4(0u);
    b = 0u;
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_OFFSETS)
}

// Offsets of reduced index r in X, dY and dX (relative to the channel's).
uvec3 r_offsets(uint r) {
    uvec3 o = uvec3(0u);
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R_OFFSETS)
    return o;
}

void main() {
    GRID_STRIDE_LOOP_FROM(k, first, channels) {
        uvec3 t;
        uvec4 s;
        uint b;
        k_offsets(k, t, s, b);
        const float m = LOAD(mean, s.x);
        const float ve = LOAD(variance, s.y) + run_time(EPSILON);  // (-0 + 0 is +0)
        const float shift = TRAINING ? training_shift(m, ve, LOAD(x, t.x)) : m;
        const float sc = LOAD(scale, s.z);
        const float coef = cr_div(sc, cr_sqrt(ve));
        precise vec3 sums = vec3(0.0);
        for (uint r = 0u; r < reduced; ++r) {
            const uvec3 o = t + r_offsets(r);
            const float gy = LOAD(dy, o.y);
            precise float a = LOAD(x, o.x) - shift;
            sums += vec3(gy, a, gy * a);
            precise float dxv = gy * coef;
            // dX may be bound over X and dY * coef does not depend on X: stored after X's load
            // (`reduced` <= 32: `reduced >> 16` is 0).
            if (!TRAINING) STORE(dx, o.z, after_read(dxv, a, reduced >> 16u))
        }
        const ChannelGrad g = channel_grad(sums, shift, m, ve, sc);
        STORE(dbias, b, g.dbias)
        STORE(dscale, s.w, g.dscale)
        if (TRAINING) {
            const vec4 a = dx_coefficients(g, shift);
            for (uint r = 0u; r < reduced; ++r) {
                const uvec3 o = t + r_offsets(r);
                STORE(dx, o.z, training_dx(LOAD(x, o.x), LOAD(dy, o.y), a, g.mean_dy))
            }
        }
    }
}
