// BATCH_NORMALIZATION_TRAINING's Output of one element (docs/semantics.md §18), for the
// element-wise Output pass (batch_normalization_training_output) and the sums kernel's
// OUTPUT_HERE (batch_normalization_training_sums):
//
//   Output = Act((X - Mean) * c + Bias [+ FusedAdd]),  c = Scale / sqrt(Variance + Epsilon)
//
// from the channel's coefficients (Mean, c, Bias, 0); Act is the identity or ReLU (RELU:
// x <= 0 gives +0, NaN stays NaN: at_most_zero, load_store.glsl). Each step `precise`: the
// same bits on every device. The including kernel declares FUSED_ADD and RELU.
float output_value(float xv, float fv, vec4 c) {
    precise float v = (xv - c.x) * c.y;
    v = v + c.z;
    if (FUSED_ADD) v = v + fv;
    if (RELU && at_most_zero(v)) v = 0.0;
    return v;
}
