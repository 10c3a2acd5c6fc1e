// DML_OPERATOR_ACTIVATION_RELU_GRAD (activation_relu_grad): the formula, on the element-wise
// template (include/elementwise_grad.glsl), from which the build generates the kernels
// activation_relu_grad (any strides on X, dY and dX) and activation_relu_grad_packed (one
// packed layout, 16-byte vectors).
//
//   dX = X > 0 ? dY : +0        (a select, so NaN in dY passes only where X > 0)
//
// On bit patterns: results are bit copies of dY or +0, exact in float32 and float16 alike.
// X is positive when its sign is clear and it is neither zero nor NaN (at most +Inf):
// bits - 1 is then below the +Inf pattern (0 wraps to the top).

uint grad_bits(uint x, uint dy) {
    return x - 1u < (DATA_TYPE == TYPE_FLOAT16 ? 0x7C00u : 0x7F800000u) ? dy : 0u;
}
