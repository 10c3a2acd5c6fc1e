// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING (batch_normalization_training), OutputTensor,
// element-wise after the sums (docs/semantics.md §18), where the sums kernel does not write it
// itself (its OUTPUT_HERE): output_value (batch_normalization_output.glsl) with (Mean, c,
// Bias) from coefficients[k] of the element's channel k. Float16 results round once
// (half_from_float).
//
// An item is VEC elements: 1 (any strides; float16 stores then use integer atomics on shared
// words), 2 (PAIRS: float16 with a packed Output, one Output word) or a 16-byte vector (4
// float32 or 8 float16 elements) where X, Output and FusedAdd are all packed (SAME: the
// vector's elements share one channel, found once; else with RUN, a vector's elements lie
// in at most two channels, each found once).
// Constants: SIZES, the strides of X, FusedAdd and Output, and CHANNEL_STRIDES (the channel
// index's stride per dimension: 0 on reduced dimensions); 8 dimensions, right-aligned. RUN:
// the plan's channel_run (consecutive elements sharing a channel, run after run, where at
// least VEC; else 0).
// Dispatch: up to 65535 workgroups; grid-stride loop over the items [first, count).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "half_rows.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool FUSED_ADD = false;
layout(constant_id = 3) const bool RELU = false;
layout(constant_id = 4) const uint VEC = 1u;
layout(constant_id = 5) const bool SAME = false;
DIMS8(uint, SIZES, 6, 1)
DIMS8_4(uint, X_STRIDES, FUSED_ADD_STRIDES, Y_STRIDES, CHANNEL_STRIDES, 14, 0)
layout(constant_id = 46) const uint RUN = 0u;
// A vector item in two channels at most: the first element's, and from element `split` on
// (where its run ends) the last element's.
const bool TWO = !SAME && RUN >= VEC;

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };
layout(set = 0, binding = 1) readonly buffer FUSED { uint fused_add[]; };  // FusedAddTensor
layout(set = 0, binding = 1) readonly buffer FUSED_UVEC4 { uvec4 fused_add_uvec4[]; };
layout(set = 0, binding = 2) readonly buffer COEFFICIENTS { vec4 coefficients[]; };  // scratch
layout(set = 0, binding = 3) buffer Y { uint y[]; };  // OutputTensor
layout(set = 0, binding = 3) buffer Y_UVEC4 { uvec4 y_uvec4[]; };
layout(push_constant) uniform Push { uint count; uint first; uint elements; };

#include "batch_normalization_output.glsl"

#define ADD_OFFSETS(D, c)                                                               \
    o += (c) * uvec4(X_STRIDES##D, FUSED_ADD_STRIDES##D, Y_STRIDES##D, CHANNEL_STRIDES##D);
#define ADD_CHANNEL(D, c) k += (c) * CHANNEL_STRIDES##D;

uvec4 offsets(uint e) {
    uvec4 o = uvec4(0u);
    FOR_EACH_COORDINATE8(SIZES, e, ADD_OFFSETS)
    return o;
}

uint channel(uint e) {
    uint k = 0u;
    FOR_EACH_COORDINATE8(SIZES, e, ADD_CHANNEL)
    return k;
}


// Element e + t's coefficients: c_first (SAME; TWO: before `split`), c_last (TWO, from
// `split` on), else its own channel's.
vec4 element_coefficients(uint e, uint t, vec4 c_first, vec4 c_last, uint split) {
    if (SAME) return c_first;
    if (TWO) return t < split ? c_first : c_last;
    return coefficients[channel(e + t)];
}

// A vector item: VEC packed elements from element e on, the 4 words w of X and f of FusedAdd.
// Float16: the eight results rounded as one row (halves_from_floats8).
uvec4 vector_value(uint e, uvec4 w, uvec4 f) {
    uvec4 out_words;
    vec4 row[2] = vec4[2](vec4(0.0), vec4(0.0));
    const vec4 c_first = SAME || TWO ? coefficients[channel(e)] : vec4(0.0);
    const vec4 c_last = TWO ? coefficients[channel(e + VEC - 1u)] : vec4(0.0);
    const uint split = TWO ? RUN - e % RUN : VEC;
    for (uint j = 0u; j < 4u; ++j) {
        if (IS_F16) {
            const vec2 xv = unpackHalf2x16(w[j]), fv = unpackHalf2x16(f[j]);
            const vec4 c0 = element_coefficients(e, 2u * j, c_first, c_last, split);
            const vec4 c1 = element_coefficients(e, 2u * j + 1u, c_first, c_last, split);
            row[j >> 1u][2u * (j & 1u)] = output_value(xv.x, fv.x, c0);
            row[j >> 1u][2u * (j & 1u) + 1u] = output_value(xv.y, fv.y, c1);
        } else {
            const vec4 c = element_coefficients(e, j, c_first, c_last, split);
            out_words[j] = floatBitsToUint(output_value(uintBitsToFloat(w[j]),
                                                        uintBitsToFloat(f[j]), c));
        }
    }
    return IS_F16 ? halves_from_floats8(row[0], row[1]) : out_words;
}

void main() {
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        if (VEC > 2u) {
            const uvec4 w = x_uvec4[i];
            y_uvec4[i] = vector_value(i * VEC, w, FUSED_ADD ? fused_add_uvec4[i] : w);
        } else if (VEC == 2u) {
            const uint e = 2u * i;
            const uvec4 o0 = offsets(e);
            const vec4 c0 = coefficients[o0.w];
            const uint low =
                half_from_float(output_value(LOAD(x, o0.x), LOAD(fused_add, o0.y), c0));
            if (e + 1u < elements) {
                const uvec4 o1 = offsets(e + 1u);
                const vec4 c1 = coefficients[o1.w];
                y[i] = low | (half_from_float(
                                  output_value(LOAD(x, o1.x), LOAD(fused_add, o1.y), c1)) << 16);
            } else {
                STORE_HALF_BITS(y, e, low)
            }
        } else {
            const uvec4 o = offsets(i);
            const float v = output_value(LOAD(x, o.x), LOAD(fused_add, o.y), coefficients[o.w]);
            if (IS_F16) {
                STORE_HALF_BITS(y, o.z, half_from_float(v))
            } else {
                y[o.z] = floatBitsToUint(v);
            }
        }
    }
}
