// DML_OPERATOR_ACTIVATION_RELU_GRAD (activation_relu_grad), packed form: X, dY and dX in one
// packed layout, 16-byte vectors. The element-wise template (include/elementwise_grad.glsl)
// with the formula of include/activation_relu_grad.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#define ELEMENTWISE_PACKED
#include "elementwise_grad.glsl"
#include "activation_relu_grad.glsl"
