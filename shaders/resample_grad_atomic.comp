// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), atomic scatter:
// one invocation per dY element, each adds its weighted value into every input element its forward
// taps read.
//
//   accumulator[i0,i1,i2,i3] += dY[o0,o1,o2,o3] * w0*w1*w2*w3     for each tap (i_d, w_d) of o_d
//
// Float adds go through an atomicCompSwap loop on the float32 bit pattern, which is core
// Vulkan; resample_grad_atomic_native.comp, the same scatter with native float atomics, runs
// where the device's shaderBufferFloat32AtomicAdd is enabled. The accumulator (float32 dX
// itself, any strides, or a packed float32 scratch for float16 dX) is zero-filled by
// resample_grad_fill first. Summation order is whatever the atomics give: results may differ in
// the last bits from run to run; use the gather kernel for bitwise reproducibility.
//
// Bindings: tables, dy and IDENTITY as in include/resample_grad.glsl; accumulator (float32:
//   OutputGradientTensor or scratch).
// Tables, per axis d (Out_d = dY size): FORWARD_d[Out_d] first tap i0, then (linear only)
//   FORWARD_d + Out_d: weight of i0, FORWARD_d + 2*Out_d: weight of i0 + 1 (0 = single tap;
//   taps clamped onto one element are merged on the host). Computed in exact float32 on the
//   host.
// Constants: DY_SIZES, DY_STRIDES, ACCUMULATOR_STRIDES (4 dimensions, right-aligned, in
//   elements), FORWARD (word offsets in tables).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dY elements.
// The scatter itself lives in include/resample_grad_scatter.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(set = 0, binding = 2) buffer ACCUMULATOR { uint accumulator[]; };

// accumulator[idx] += v as a float32 add, through compare-and-swap on the bit pattern. The
// first guess is a plain read; a stale guess only costs one more round.
void atomic_add_f32(uint idx, float v) {
    uint old = accumulator[idx];
    for (;;) {
        uint assumed = old;
        old = atomicCompSwap(accumulator[idx], assumed,
                             floatBitsToUint(uintBitsToFloat(assumed) + v));
        if (old == assumed) {
            break;
        }
    }
}

#include "resample_grad_scatter.glsl"
