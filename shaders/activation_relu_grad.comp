// DML_OPERATOR_ACTIVATION_RELU_GRAD (activation_relu_grad), strided form: any strides on X,
// dY and dX. The element-wise template (include/elementwise_grad.glsl) with the formula of
// include/activation_relu_grad.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "elementwise_grad.glsl"
#include "activation_relu_grad.glsl"
