// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), deterministic
// gather by blocks: each invocation owns ROWS x COLS dX elements of two resampled axes (P, Q) and
// walks the dY rows they read, loading each dY value once; same terms, order and arithmetic per
// element as resample_grad_gather, so the same bits. See include/resample_grad_walk.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define PAIR_LANES 1
#include "common.glsl"
#include "resample_grad.glsl"
#include "resample_grad_walk.glsl"
