// What the kernels of DML_OPERATOR_BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD
// (batch_normalization_grad, batch_normalization_training_grad) compute from a channel's sums.
// The including kernel declares TRAINING and N_R (N_R as a float) and includes
// correctly_rounded.glsl; one that defines BATCH_NORMALIZATION_FINISH first also declares
// dscale, dbias and the coefficients scratch, and gets finish_channel, which stores a channel's
// results (the kernels that end a reduction: batch_normalization_training_sums and
// batch_normalization_grad_direct).
// A kernel that only applies the training grad's dX formula (the output kernels) defines
// BATCH_NORMALIZATION_TRAINING_DX_ONLY first and gets TRAINING_DX alone.
//
// The sums are taken around a shift: s = (sum dY, sum a, sum dY * a) with a = X - shift.
// BATCH_NORMALIZATION_GRAD shifts by the supplied Mean, so that s.z is its scale gradient's
// own sum. The training grad recentres with the batch's own mean_R(X) (docs/semantics.md §5), so its dX
// must not depend on the Mean passed in. Any shift gives the same result in exact arithmetic;
// in float32 the covariance loses about |shift - mean_R(X)| |mean_R(dY)| / |covariance| of
// its precision, so the best shift is the batch mean. `training_shift` takes the supplied Mean
// when it lies within 8 standard deviations (from the supplied Variance) of the channel's first
// X, as the training forward's batch mean does, and that first X otherwise (a Mean far off,
// NaN or infinite): dX stays within float32 rounding of the formula for any Mean.
//
// Every operation below rounds once, the same way on every device (`precise`, cr_div,
// cr_sqrt; docs/semantics.md §17):
//   c0 = 1 / sqrt(Variance + Epsilon)
//   OutputBiasGradient  = sum dY = s.x
//   OutputScaleGradient = sum dY (X - Mean) c0 = (s.z + (shift - Mean) s.x) c0
//   mean_R(dY) = s.x / N_R;  ma = mean_R(X) - shift = s.y / N_R
//   q = (mean_R(dY (X - mean_R(X)))) / (Variance + Epsilon) = (s.z / N_R - mean_R(dY) ma) / ve
//   training dX = alpha ((dY - mean_R(dY)) - ((X - shift) - ma) q),  alpha = Scale c0
//
// A non-finite X or dY in a training channel makes every dX of that channel NaN (the
// formula's Inf - Inf would give a mix of NaN and +-Inf that depends on the order of the
// sums); OutputScaleGradient and OutputBiasGradient follow their sums.

// The training grad's dX of X value(s) xv and dY value(s) gy (float, vec2 or vec4) from the
// channel's coefficients a = (alpha, q, shift, ma) and mean_R(dY) mdy; every kernel that
// stores a training dX uses this one expression, `precise` (no contraction), so that they
// agree in their bits on every device.
#define TRAINING_DX(xv, gy, a, mdy) ((a).x * (((gy) - (mdy)) - (((xv) - (a).z) - (a).w) * (a).y))
float training_dx(float xv, float gy, vec4 a, float mdy) {
    precise float v = TRAINING_DX(xv, gy, a, mdy);
    return v;
}
vec2 training_dx(vec2 xv, vec2 gy, vec4 a, float mdy) {
    precise vec2 v = TRAINING_DX(xv, gy, a, mdy);
    return v;
}
vec4 training_dx(vec4 xv, vec4 gy, vec4 a, float mdy) {
    precise vec4 v = TRAINING_DX(xv, gy, a, mdy);
    return v;
}

#ifndef BATCH_NORMALIZATION_TRAINING_DX_ONLY
// distance <= bound compared by the magnitudes' bits (distance is |.| or NaN, bound 8 sqrt(.),
// +-0 or NaN), so that a NaN or far-off Mean takes first_x whatever a compiler that may assume
// no NaN makes of the comparison (docs/semantics.md §5).
float training_shift(float mean_value, float ve, float first_x) {
    precise float distance = abs(mean_value - first_x);
    precise float bound = 8.0 * cr_sqrt(ve);
    const uint d = floatBitsToUint(distance) & 0x7FFFFFFFu;
    const uint b = floatBitsToUint(bound) & 0x7FFFFFFFu;
    return d <= b && b <= 0x7F800000u ? mean_value : first_x;
}

struct ChannelGrad {
    float dscale;
    float dbias;
    float alpha;  // training dX, as above
    float q;
    float mean_dy;
    float ma;
};

ChannelGrad channel_grad(vec3 s, float shift, float mean_value, float ve, float scale_value) {
    ChannelGrad g;
    const float c0 = cr_div(1.0, cr_sqrt(ve));
    g.dbias = s.x;
    precise float centred = TRAINING ? s.z + (shift - mean_value) * s.x : s.z;
    precise float dscale = centred * c0;
    g.dscale = dscale;
    g.mean_dy = cr_div(s.x, N_R);
    g.ma = cr_div(s.y, N_R);
    precise float covariance = cr_div(s.z, N_R) - g.mean_dy * g.ma;
    g.q = cr_div(covariance, ve);
    precise float alpha = scale_value * c0;
    g.alpha = alpha;
    if (TRAINING && !finite(s)) g.q = uintBitsToFloat(0x7FC00000u);  // a non-finite sum
    return g;
}

// TRAINING_DX's `a` for channel grad g, summed around `shift`.
vec4 dx_coefficients(ChannelGrad g, float shift) { return vec4(g.alpha, g.q, shift, g.ma); }

#ifdef BATCH_NORMALIZATION_FINISH
// Channel k's OutputBiasGradient and OutputScaleGradient (at offsets dscale_at, dbias_at) and
// the coefficients of the training grad's dX, from its sums s around `shift`:
//   coefficients[2k]     = (alpha, q, shift, ma)  (BATCH_NORMALIZATION_GRAD: (its dX factor, 0, 0, 0))
//   coefficients[2k + 1] = (mean_R(dY), 0, 0, 0)
void finish_channel(uint k, vec3 s, float shift, float mean_value, float ve, float scale_value,
                    uint dscale_at, uint dbias_at) {
    const ChannelGrad g = channel_grad(s, shift, mean_value, ve, scale_value);
    STORE(dbias, dbias_at, g.dbias)
    STORE(dscale, dscale_at, g.dscale)
    // BATCH_NORMALIZATION_GRAD's dX factor Scale / sqrt(Variance + Epsilon), for its output
    // kernel (CONSTANT_STATISTICS).
    coefficients[2u * k] = TRAINING ? dx_coefficients(g, shift)
                                    : vec4(cr_div(scale_value, cr_sqrt(ve)), 0.0, 0.0, 0.0);
    coefficients[2u * k + 1u] = vec4(g.mean_dy, 0.0, 0.0, 0.0);
}
#endif
#endif
