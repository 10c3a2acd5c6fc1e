// DML_OPERATOR_BATCH_NORMALIZATION_TRAINING_GRAD (batch_normalization_training_grad) in one
// dispatch whose second read of X and dY comes from the cache: the reduction and OutputGradient
// of a channel a few channels apart in time, on devices that run started workgroups to the end
// whatever others do (GPUs; not lavapipe, which ends any loop after 65535 iterations).
//
//   per channel c, as include/batch_normalization_grad.glsl says:
//   s = (sum dY, sum a, sum dY a), a = X - shift;  dX = alpha ((dY - mean(dY)) - (a - ma) q)
//
// Jobs, in ticket order: a workgroup takes a ticket with an atomic add before each job, so every
// smaller ticket belongs to a workgroup that has started (it will finish: waits only ever look
// at smaller tickets). With C channels of `chunks` chunks and L = min(LAG, C):
//   REDUCE jobs of channels 0..L-1, then for each channel c >= L the REDUCE jobs of c followed
//   by the FINISH jobs of c - L, then the FINISH jobs of the last L channels.
// REDUCE(c, j): the sums of chunk j (WG lanes x ITERS vectors of VEC elements, in a fixed
//   order, then include/workgroup_sums.glsl) into partials[c * chunks + j] (w: the shift), then
//   done[c] += 1 (counters[1 + c]).
// FINISH(c, j): waits for done[c] == chunks, sums the channel's partials in a fixed order,
//   and writes dX over chunk j; FINISH(c, 0) also writes OutputScaleGradient and
//   OutputBiasGradient. L channels' X and dY stay in the cache between the two.
// RESET: the same kernel's first dispatch zeroes the counters (ticket and done[]).
// A wait gives up after SPIN_LIMIT polls rather than hang the device if the order were ever
// broken; results would then be wrong, never a hung GPU.
//
// Layout (the plan checks it): the reduced dimensions R end in a contiguous run that vectors of
// VEC elements (8 or 16 bytes) tile, and dX is laid out like dY.
// Constants: K_SIZES and the strides over the kept dimensions of X, dY, dX, Mean, Variance,
//   Scale, OutputScaleGradient, OutputBiasGradient; R_SIZES and the strides over the reduced
//   dimensions of X and dY (dX's are dY's) (8 dimensions, right-aligned, in elements).
// Push constants: channels, reduced (elements per channel), chunks (per channel), jobs (2 *
//   channels * chunks), lag.
// Dispatch: RESET one workgroup; else up to 65535 workgroups, each taking tickets until none
//   are left.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool RESET = false;
layout(constant_id = 3) const uint ITERS = 16;
layout(constant_id = 4) const uint VEC = 4;
layout(constant_id = 5) const float EPSILON = 0.0;
layout(constant_id = 6) const float N_R = 1.0;
DIMS8(uint, K_SIZES, 7, 1)
DIMS8_8(uint, K_X_STRIDES, K_DY_STRIDES, K_DX_STRIDES, K_MEAN_STRIDES, K_VARIANCE_STRIDES,
        K_SCALE_STRIDES, K_DSCALE_STRIDES, K_DBIAS_STRIDES, 15, 0)
DIMS8(uint, R_SIZES, 79, 1)
DIMS8_2(uint, R_X_STRIDES, R_DY_STRIDES, 87, 0)

const bool TRAINING = true;
const uint LK = 1u;
const uint LR = WG;
const bool K_FAST = false;
const uint SPIN_LIMIT = 1u << 22;
#include "workgroup_sums.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };  // InputTensor
layout(set = 0, binding = 0) readonly buffer X_UVEC2 { uvec2 x_uvec2[]; };
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };  // InputGradientTensor
layout(set = 0, binding = 1) readonly buffer DY_UVEC2 { uvec2 dy_uvec2[]; };
layout(set = 0, binding = 1) readonly buffer DY_UVEC4 { uvec4 dy_uvec4[]; };
layout(set = 0, binding = 2) readonly buffer MEAN { uint mean[]; };  // MeanTensor
layout(set = 0, binding = 3) readonly buffer VARIANCE { uint variance[]; };  // VarianceTensor
layout(set = 0, binding = 4) readonly buffer SCALE { uint scale[]; };  // ScaleTensor
layout(set = 0, binding = 5) writeonly buffer DX { uint dx[]; };  // OutputGradientTensor
layout(set = 0, binding = 5) writeonly buffer DX_UVEC2 { uvec2 dx_uvec2[]; };
layout(set = 0, binding = 5) writeonly buffer DX_UVEC4 { uvec4 dx_uvec4[]; };
layout(set = 0, binding = 6) buffer DSCALE { uint dscale[]; };  // OutputScaleGradientTensor
layout(set = 0, binding = 7) buffer DBIAS { uint dbias[]; };  // OutputBiasGradientTensor
layout(set = 0, binding = 8) coherent buffer PARTIALS { vec4 partials[]; };  // scratch
layout(set = 0, binding = 9) coherent buffer COUNTERS { uint counters[]; };  // scratch
layout(push_constant) uniform Push {
    uint channels; uint reduced; uint chunks; uint jobs; uint lag;
};

#include "batch_normalization_grad.glsl"

#define ADD_K_OFFSETS(D, c)                                                             \
    t += (c) * uvec3(K_X_STRIDES##D, K_DY_STRIDES##D, K_DX_STRIDES##D);                 \
    s += (c) * uvec4(K_MEAN_STRIDES##D, K_VARIANCE_STRIDES##D, K_SCALE_STRIDES##D,      \
                     K_DSCALE_STRIDES##D);                                              \
    b += (c) * K_DBIAS_STRIDES##D;
#define ADD_R_OFFSETS(D, c) o += (c) * uvec2(R_X_STRIDES##D, R_DY_STRIDES##D);

// Offsets of channel k: t = (X, dY, dX), s = (Mean, Variance, Scale, OutputScaleGradient),
// b = OutputBiasGradient.
void k_offsets(uint k, out uvec3 t, out uvec4 s, out uint b) {
    t = uvec3(0u);
    s = uvec4(0u);
    b = 0u;
    FOR_EACH_COORDINATE8(K_SIZES, k, ADD_K_OFFSETS)
}

// Offsets of reduced index r in X and dY (dX: dY's), relative to the channel's.
uvec2 r_offsets(uint r) {
    uvec2 o = uvec2(0u);
    FOR_EACH_COORDINATE8(R_SIZES, r, ADD_R_OFFSETS)
    return o;
}

const bool WIDE = VEC * (IS_F16 ? 2u : 4u) == 16u;  // 16-byte vectors, else 8-byte

// The elements of a vector as up to 8 floats (lo, hi); an 8-byte float32 vector fills lo.xy.
void unpack4(uvec4 w, out vec4 lo, out vec4 hi) {
    if (IS_F16) {
        lo = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
        hi = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
    } else {
        lo = uintBitsToFloat(w);
        hi = vec4(0.0);
    }
}
uvec4 x_vector(uint o) { return WIDE ? x_uvec4[o / VEC] : uvec4(x_uvec2[o / VEC], 0u, 0u); }
uvec4 dy_vector(uint o) { return WIDE ? dy_uvec4[o / VEC] : uvec4(dy_uvec2[o / VEC], 0u, 0u); }
void store_dx(uint o, vec4 lo, vec4 hi) {
    uvec4 w = IS_F16 ? uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy),
                             packHalf2x16(hi.zw))
                     : floatBitsToUint(lo);
    if (WIDE) {
        dx_uvec4[o / VEC] = w;
    } else {
        dx_uvec2[o / VEC] = w.xy;
    }
}

// (sum g, sum a, sum g a, 0) of four elements, pairwise.
vec4 sums4(vec4 g, vec4 a) {
    const vec4 ga = g * a;
    return vec4((g.x + g.y) + (g.z + g.w), (a.x + a.y) + (a.z + a.w),
                (ga.x + ga.y) + (ga.z + ga.w), 0.0);
}

shared uint job;
shared float shift_shared;

float channel_shift(uint k) {
    uvec3 t;
    uvec4 s;
    uint b;
    k_offsets(k, t, s, b);
    return training_shift(LOAD(mean, s.x), LOAD(variance, s.y) + EPSILON, LOAD(x, t.x));
}

void reduce_chunk(uint c, uint j, uint lane) {
    uvec3 t;
    uvec4 s;
    uint b;
    k_offsets(c, t, s, b);
    if (lane == 0u) shift_shared = channel_shift(c);
    barrier();
    const float m = shift_shared;
    vec4 acc = vec4(0.0);
    for (uint i = 0u; i < ITERS; ++i) {
        const uint r = ((j * ITERS + i) * WG + lane) * VEC;
        if (r < reduced) {
            const uvec2 ro = t.xy + r_offsets(r);
            vec4 xl, xh, gl, gh;
            unpack4(x_vector(ro.x), xl, xh);
            unpack4(dy_vector(ro.y), gl, gh);
            vec4 a = xl - m;
            if (!IS_F16 && !WIDE) a.zw = vec2(0.0);  // an 8-byte float32 vector: 2 elements
            acc += sums4(gl, a);
            if (IS_F16 && WIDE) acc += sums4(gh, xh - m);
        }
    }
    column_sums(acc, 0u, lane);
    if (lane == 0u) {
        partials[c * chunks + j] = vec4(res[0].xyz, m);
        memoryBarrierBuffer();
        atomicAdd(counters[1u + c], 1u);
    }
}

void finish_chunk(uint c, uint j, uint lane) {
    if (lane == 0u) {
        for (uint spin = 0u; spin < SPIN_LIMIT && atomicOr(counters[1u + c], 0u) < chunks;
             ++spin) {
        }
    }
    barrier();
    memoryBarrierBuffer();
    vec4 acc = vec4(0.0);
    for (uint p = lane; p < chunks; p += WG) acc += partials[c * chunks + p];
    column_sums(acc, 0u, lane);
    uvec3 t;
    uvec4 s;
    uint b;
    k_offsets(c, t, s, b);
    const float shift = partials[c * chunks].w;
    const ChannelGrad g = channel_grad(res[0].xyz, shift, LOAD(mean, s.x),
                                       LOAD(variance, s.y) + EPSILON, LOAD(scale, s.z));
    if (j == 0u && lane == 0u) {
        STORE(dbias, b, g.dbias)
        STORE(dscale, s.w, g.dscale)
    }
    for (uint i = 0u; i < ITERS; ++i) {
        const uint r = ((j * ITERS + i) * WG + lane) * VEC;
        if (r < reduced) {
            const uvec2 ro = r_offsets(r);
            vec4 xl, xh, gl, gh;
            unpack4(x_vector(t.x + ro.x), xl, xh);
            unpack4(dy_vector(t.y + ro.y), gl, gh);
            store_dx(t.z + ro.y,
                     g.alpha * ((gl - g.mean_dy) - ((xl - shift) - g.ma) * g.q),
                     g.alpha * ((gh - g.mean_dy) - ((xh - shift) - g.ma) * g.q));
        }
    }
}

void main() {
    const uint lane = gl_LocalInvocationIndex;
    if (RESET) {
        for (uint i = lane; i <= channels; i += WG) counters[i] = 0u;
        return;
    }
    const uint l = min(lag, channels);
    const uint per = chunks;
    for (;;) {
        if (lane == 0u) job = atomicAdd(counters[0], 1u);
        barrier();
        const uint ticket = job;
        barrier();  // every lane has read `job` before lane 0 takes the next ticket
        if (ticket >= jobs) break;
        // Decode: l channels of REDUCE, then (REDUCE c, FINISH c - l) pairs, then FINISH.
        bool reduce;
        uint c, j;
        if (ticket < l * per) {
            reduce = true; c = ticket / per; j = ticket % per;
        } else if (ticket < l * per + (channels - l) * 2u * per) {
            const uint u = ticket - l * per;
            const uint step = l + u / (2u * per);
            const uint q = u % (2u * per);
            reduce = q < per;
            c = reduce ? step : step - l;
            j = reduce ? q : q - per;
        } else {
            const uint u = ticket - l * per - (channels - l) * 2u * per;
            reduce = false; c = channels - l + u / per; j = u % per;
        }
        if (reduce) {
            reduce_chunk(c, j, lane);
        } else {
            finish_chunk(c, j, lane);
        }
    }
}
