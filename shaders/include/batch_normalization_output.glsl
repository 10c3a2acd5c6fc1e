// BATCH_NORMALIZATION_TRAINING's Output of one element (docs/semantics.md §18), for the
// element-wise Output pass (batch_normalization_training_output) and the sums kernel's
// OUTPUT_HERE (batch_normalization_training_sums):
//
//   Output = Act((X - Mean) * c + Bias [+ FusedAdd]),  c = Scale / sqrt(Variance + Epsilon)
//
// from the channel's coefficients (Mean, c, Bias, 0); Act is the identity or ReLU (RELU:
// x <= 0 gives +0, NaN stays NaN). Each step `precise`: the same bits on every device. The
// including kernel declares FUSED_ADD and RELU.

// v < 0 (below_zero) and v <= 0 (at_most_zero) from v's bits, false for NaN whatever a
// compiler makes of the comparison: without SignedZeroInfNanPreserve a device may assume no
// NaN, and an H200 compiled `v < 0.0 ? 0.0 : v` into a max that gave 0 for a NaN variance.
bool below_zero(float v) {
    const uint u = floatBitsToUint(v);
    return u > 0x80000000u && u <= 0xFF800000u;
}

bool at_most_zero(float v) { return (floatBitsToUint(v) & 0x7FFFFFFFu) == 0u || below_zero(v); }

float output_value(float xv, float fv, vec4 c) {
    precise float v = (xv - c.x) * c.y;
    v = v + c.z;
    if (FUSED_ADD) v = v + fv;
    if (RELU && at_most_zero(v)) v = 0.0;
    return v;
}
