// What the direct and finalize kernels of DML_OPERATOR_BATCH_NORMALIZATION_GRAD and
// _TRAINING_GRAD (batch_normalization_grad, batch_normalization_training_grad) compute from a
// channel's sums. The including kernel declares TRAINING and N_R (N_R as a float), or defines
// BATCH_NORMALIZATION_SHIFT_ONLY first and declares TRAINING.
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

float training_shift(float mean_value, float ve, float first_x) {
    return abs(mean_value - first_x) <= 8.0 * sqrt(ve) ? mean_value : first_x;
}

#ifndef BATCH_NORMALIZATION_SHIFT_ONLY  // stage 1 needs only the shift (and has no N_R)
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
    const float c0 = 1.0 / sqrt(ve);
    g.dbias = s.x;
    g.dscale = (TRAINING ? s.z + (shift - mean_value) * s.x : s.z) * c0;
    g.mean_dy = s.x / N_R;
    g.ma = s.y / N_R;
    g.q = (s.z / N_R - g.mean_dy * g.ma) / ve;
    g.alpha = scale_value * c0;
    if (TRAINING && (any(isnan(s)) || any(isinf(s)))) g.q = uintBitsToFloat(0x7FC00000u);
    return g;
}
#endif
