// DML_OPERATOR_BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD, reduction stage 2 of 2: per
// channel, the fixed-order sum of the stage-1 partials (batch_normalization_partials), the
// scale and bias gradients, and the per-channel coefficients of the training grad's dX.
//
//   (Sdy, Sa, Sdya) = sum over chunks of part[k * chunks + j]     a = X - Mean, n = N_R
//   c0 = 1 / sqrt(Variance + Epsilon)
//   OutputBiasGradient[k]  = Sdy
//   OutputScaleGradient[k] = Sdya * c0                              (docs/semantics.md §4, §5)
//   mean_R(dY) = Sdy / n;  ma = mean_R(X) - Mean = Sa / n
//   mean_R(Coef1) = mean_R(dY * (X - mean_R(X))) = Sdya / n - mean_R(dY) * ma
//   table[2k]     = (alpha = Scale * c0, q = mean_R(Coef1) / (Variance + Epsilon), Mean, ma)
//   table[2k + 1] = (mean_R(dY), 0, 0, 0)
// so that the training grad's dX = alpha * ((dY - mean_R(dY)) - ((X - Mean) - ma) * q)
// (batch_normalization_training_grad_output). The constant-statistics grad ignores the table.
//
// Each work item is LC channels by LP = WG / LC lanes; lane p adds partials p, p + LP, ... of
// its channel in order, then the lanes are added with subgroupAdd and shared memory in a
// fixed order (the same scheme as stage 1). Deterministic; no atomics except float16 stores.
//
// Bindings (set 0):
//   0  part    scratch partials          read
//   1  mean    MeanTensor                read
//   2  var     VarianceTensor            read
//   3  scale   ScaleTensor               read
//   4  dscale  OutputScaleGradientTensor write (float16: integer atomics on shared words)
//   5  dbias   OutputBiasGradientTensor  write (float16: integer atomics on shared words)
//   6  table   scratch coefficients      write (2 vec4 per channel)
// Specialization constants: 0 workgroup width WG, 1 IS_F16, 2 LC, 3 EPS (float bits),
//   4 NR (N_R as a float), 5..12 K sizes, then strides over K of Mean 13..20, Variance 21..28,
//   Scale 29..36, OutputScaleGradient 37..44, OutputBiasGradient 45..52 (8 dimensions,
//   right-aligned, in elements).
// Push constants: channels, chunks (partials per channel).
// Dispatch: up to 65535 workgroups; workgroup-stride loop over ceil(channels / LC) items.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

#define DIMS8(NAME, ID, DEF)                                                            \
    layout(constant_id = ID + 0) const uint NAME##0 = DEF;                              \
    layout(constant_id = ID + 1) const uint NAME##1 = DEF;                              \
    layout(constant_id = ID + 2) const uint NAME##2 = DEF;                              \
    layout(constant_id = ID + 3) const uint NAME##3 = DEF;                              \
    layout(constant_id = ID + 4) const uint NAME##4 = DEF;                              \
    layout(constant_id = ID + 5) const uint NAME##5 = DEF;                              \
    layout(constant_id = ID + 6) const uint NAME##6 = DEF;                              \
    layout(constant_id = ID + 7) const uint NAME##7 = DEF;

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const uint LC = 1;
layout(constant_id = 3) const float EPS = 0.0;
layout(constant_id = 4) const float NR = 1.0;
DIMS8(KN, 5, 1)
DIMS8(MS, 13, 0)
DIMS8(VS, 21, 0)
DIMS8(SS, 29, 0)
DIMS8(DSS, 37, 0)
DIMS8(DBS, 45, 0)

const uint WG = gl_WorkGroupSize.x;
const uint LP = WG / LC;

layout(set = 0, binding = 0) readonly buffer PART { vec4 part[]; };
layout(set = 0, binding = 1) readonly buffer MEAN { uint mean_[]; };
layout(set = 0, binding = 2) readonly buffer VAR { uint var_[]; };
layout(set = 0, binding = 3) readonly buffer SCALE { uint scale[]; };
layout(set = 0, binding = 4) buffer DSCALE { uint dscale[]; };
layout(set = 0, binding = 5) buffer DBIAS { uint dbias[]; };
layout(set = 0, binding = 6) writeonly buffer TABLE { vec4 table[]; };
layout(push_constant) uniform Push { uint channels; uint chunks; };

#define LOAD(buf, o) (IS_F16 ? LOAD_HALF(buf, o) : uintBitsToFloat(buf[o]))
#define STORE(buf, o, v)                                                                \
    if (IS_F16) {                                                                       \
        STORE_HALF_BITS(buf, o, HALF_FROM_FLOAT(v));                                    \
    } else {                                                                            \
        buf[o] = floatBitsToUint(v);                                                    \
    }

#define K_STEP(D) c = rem % KN##D; rem /= KN##D;                                        \
    a += c * uvec3(MS##D, VS##D, SS##D); b += c * uvec2(DSS##D, DBS##D);

// Offsets of channel k in Mean, Variance, Scale (a) and the two gradients (b).
void k_offsets(uint k, out uvec3 a, out uvec2 b) {
    uint rem = k, c;
    a = uvec3(0u);
    b = uvec2(0u);
    K_STEP(7) K_STEP(6) K_STEP(5) K_STEP(4) K_STEP(3) K_STEP(2) K_STEP(1)
    a += rem * uvec3(MS0, VS0, SS0);
    b += rem * uvec2(DSS0, DBS0);
}

shared vec4 sh[WG];
shared vec4 res[WG];

// Sum v over the LP lanes of every channel slot kl < LC into res[kl], in a fixed order for
// any subgroup size (lanes of a channel are consecutive invocations). Called by every
// invocation (it holds barriers).
void column_sums(vec4 v, uint kl, uint pl) {
    if (LP == 1u) {
        if (kl < LC) res[kl] = v;
    } else if (LC == 1u) {
        v = subgroupAdd(v);
        if (gl_SubgroupInvocationID == 0u) sh[gl_SubgroupID] = v;
        barrier();
        if (gl_SubgroupID == 0u) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) {
                acc += sh[i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[0] = acc;
        }
    } else {
        if (kl < LC) sh[kl * LP + pl] = v;
        barrier();
        for (uint col = gl_SubgroupID; col < LC; col += gl_NumSubgroups) {
            vec4 acc = vec4(0.0);
            for (uint i = gl_SubgroupInvocationID; i < LP; i += gl_SubgroupSize) {
                acc += sh[col * LP + i];
            }
            acc = subgroupAdd(acc);
            if (gl_SubgroupInvocationID == 0u) res[col] = acc;
        }
    }
    barrier();
}

void main() {
    const uint t = gl_LocalInvocationIndex;
    const uint kl = t / LP;
    const uint pl = t % LP;
    const uint groups = (channels + LC - 1u) / LC;
    for (uint w = gl_WorkGroupID.x; w < groups; w += gl_NumWorkGroups.x) {
        const uint k = w * LC + kl;
        vec4 acc = vec4(0.0);
        if (k < channels && kl < LC) {
            for (uint p = pl; p < chunks; p += LP) acc += part[k * chunks + p];
        }
        column_sums(acc, kl, pl);
        const uint kt = w * LC + t;
        if (t < LC && kt < channels) {
            const vec4 s = res[t];
            uvec3 a;
            uvec2 b;
            k_offsets(kt, a, b);
            const float m = LOAD(mean_, a.x);
            const float ve = LOAD(var_, a.y) + EPS;
            const float c0 = 1.0 / sqrt(ve);
            STORE(dbias, b.y, s.x)
            STORE(dscale, b.x, s.z * c0)
            const float mdy = s.x / NR;
            const float ma = s.y / NR;
            const float mc1 = s.z / NR - mdy * ma;
            table[2u * kt] = vec4(LOAD(scale, a.z) * c0, mc1 / ve, m, ma);
            table[2u * kt + 1u] = vec4(mdy, 0.0, 0.0, 0.0);
        }
    }
}
