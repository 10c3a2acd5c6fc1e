// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING (batch_normalization_training), OutputTensor,
// element-wise after stage 2 (docs/semantics.md §18):
//
//   Output = Act((X - Mean) * c + Bias [+ FusedAdd]),  c = Scale / sqrt(Variance + Epsilon)
//
// with (Mean, c, Bias) from coefficients[k] of the element's channel k; Act is the identity
// or ReLU (RELU: x <= 0 gives +0, NaN stays NaN). Each step `precise`: the same bits on every
// device. Float16 results round once (half_from_float).
//
// PAIRS (float16 with a packed Output): an item is one Output word, its two elements stored
// at once; otherwise an item is one element (float16 stores then use integer atomics on
// shared words).
// Constants: SIZES, the strides of X, FusedAdd and Output, and CHANNEL_STRIDES (the channel
// index's stride per dimension: 0 on reduced dimensions); 8 dimensions, right-aligned.
// Dispatch: up to 65535 workgroups; grid-stride loop over the items [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool FUSED_ADD = false;
layout(constant_id = 3) const bool RELU = false;
layout(constant_id = 4) const bool PAIRS = false;
DIMS8(uint, SIZES, 5, 1)
DIMS8_4(uint, X_STRIDES, FUSED_ADD_STRIDES, Y_STRIDES, CHANNEL_STRIDES, 13, 0)

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 1) readonly buffer FUSED { uint fused_add[]; };  // FusedAddTensor
layout(set = 0, binding = 2) readonly buffer COEFFICIENTS { vec4 coefficients[]; };  // scratch
layout(set = 0, binding = 3) buffer Y { uint y[]; };  // OutputTensor
layout(push_constant) uniform Push { uint count; uint first; uint elements; };

#define ADD_OFFSETS(D, c)                                                               \
    o += (c) * uvec4(X_STRIDES##D, FUSED_ADD_STRIDES##D, Y_STRIDES##D, CHANNEL_STRIDES##D);

uvec4 offsets(uint e) {
    uvec4 o = uvec4(0u);
    FOR_EACH_COORDINATE8(SIZES, e, ADD_OFFSETS)
    return o;
}

// Element e's Output, and its offset in Output.
float value(uvec4 o) {
    const vec4 c = coefficients[o.w];
    precise float v = (LOAD(x, o.x) - c.x) * c.y;
    v = v + c.z;
    if (FUSED_ADD) v = v + LOAD(fused_add, o.y);
    if (RELU && v <= 0.0) v = 0.0;
    return v;
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        if (PAIRS) {
            const uint e = 2u * i;
            const uint low = half_from_float(value(offsets(e)));
            if (e + 1u < elements) {
                y[i] = low | (half_from_float(value(offsets(e + 1u))) << 16);
            } else {
                STORE_HALF_BITS(y, e, low)
            }
        } else {
            const uvec4 o = offsets(i);
            const float v = value(o);
            if (IS_F16) {
                STORE_HALF_BITS(y, o.z, half_from_float(v))
            } else {
                y[o.z] = floatBitsToUint(v);
            }
        }
    }
}
