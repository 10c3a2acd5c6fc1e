// DML_OPERATOR_RANDOM_GENERATOR (random_generator), the new state:
//
//   new_state = ((C + blocks) mod 2^128 in four words, s4, s5),  blocks = ceil(E / 4)
//
// (include/random_generator.glsl). The plan dispatches it after every block of
// random_generator.comp, so an OutputStateTensor bound over the InputStateTensor (in place)
// changes only after the last read of the blocks (the device's barrier between the two: it
// writes what they read); its one invocation reads all six words before it stores any (the
// build decorates bindings Aliased, so the compiler keeps that order).
// Constants: WG; STATE_STRIDE, NEW_STATE_STRIDE (the two state tensors' element strides).
// Push constants: blocks. Dispatch: one workgroup; invocation 0 does the work.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const uint STATE_STRIDE = 1u;
layout(constant_id = 2) const uint NEW_STATE_STRIDE = 1u;

layout(set = 0, binding = 0) readonly buffer STATE { uint state[]; };  // InputStateTensor
layout(set = 0, binding = 1) writeonly buffer NEW_STATE { uint new_state[]; };  // OutputStateTensor
layout(push_constant) uniform Push { uint blocks; };

#include "random_generator.glsl"

void main() {
    if (gl_GlobalInvocationID.x == 0u) {
        STORE_NEW_STATE(uvec4(STATE(0), STATE(1), STATE(2), STATE(3)), blocks,
                        uvec2(STATE(4), STATE(5)))
    }
}
