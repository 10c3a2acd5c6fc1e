// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), atomic scatter
// with native float atomics: the kernel of resample_grad_atomic.comp (bindings, tables, constants,
// dispatch: see there), adding with atomicAdd on float32 (GL_EXT_shader_atomic_float). Used only
// where the device reports VK_EXT_shader_atomic_float's shaderBufferFloat32AtomicAdd and
// pyvkgrad's kp patch has enabled it at device creation; declaring the capability anywhere else is
// invalid.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_atomic_float : require
#include "common.glsl"

layout(set = 0, binding = 2) buffer ACCUMULATOR { float accumulator[]; };

void atomic_add_f32(uint idx, float v) {
    atomicAdd(accumulator[idx], v);
}

#include "resample_grad_scatter.glsl"
