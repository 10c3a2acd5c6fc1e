// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1):
// resample_grad_walk with two neighbouring elements along the memory-innermost identity axis B per
// invocation (vec2 values): a float16 dX then stores whole 32-bit words (NHWC channels, say). See
// include/resample_grad_walk.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define PAIR_LANES 2
#include "common.glsl"
#include "resample_grad.glsl"
#include "resample_grad_walk.glsl"
