// DML_OPERATOR_RANDOM_GENERATOR (random_generator), the output: Philox 4x32-10 blocks.
//
//   y[n] = philox_4x32_10((C + floor(n/4)) mod 2^128, key)[n mod 4]
//
// for the logical row-major index n of OutputTensor (E elements); C and the key are the
// InputStateTensor's words (include/random_generator.glsl). The four words of block b go to
// elements 4b..4b+3 that exist (the last block of an E that is not a multiple of 4 writes
// fewer). An invocation computes BLOCKS blocks a pass, b, b + L, ..., b + (BLOCKS - 1) L for
// the grid's L invocations: the rounds of independent blocks interleave (the ten rounds of one
// block are a chain of dependent multiplications), the state is read once for all of them,
// and every store of a pass is still one contiguous run across the lanes.
// STATE_HERE (the plan's one dispatch over every block, with an OutputStateTensor): this
// dispatch also stores the new state, ((C + count) mod 2^128, key), from the workgroup that
// finishes last. Each workgroup, once all its invocations have read the state, takes a ticket
// (an atomic add on a scratch word): the workgroup whose ticket is the last
// (gl_NumWorkGroups - 1) knows every workgroup has read the state, so an OutputStateTensor
// bound over the InputStateTensor (in place) may change then; it stores the new state and
// puts the ticket word back to 0 for the next run. Otherwise the plan dispatches
// random_generator_state after every block (a second dispatch behind a barrier: 2-4 us on an
// H200, a quarter of a 16 MiB output's time).
// Constants: WG; PACKED (y is one packed run: a whole block is one 16-byte store); STATE_STRIDE
// (the state's element stride); SIZES, Y_STRIDES (y's coalesced sizes and element strides,
// 8 dimensions, right-aligned); BLOCKS (1 to 4); STATE_HERE, NEW_STATE_STRIDE.
// Bindings: state, y, new_state (OutputStateTensor), tickets (scratch, one word, 0 between
// runs); without STATE_HERE the plan binds the last two to y, and they are not touched.
// Push constants: count (the block this dispatch ends at; at most 2^30), elements (E), first
// (the block it starts at). Dispatch: up to 65535 workgroups; a grid-stride loop over the
// blocks [first, count), BLOCKS at a time, split into several dispatches under a loop limit
// (plan.grid_slices).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool PACKED = false;
layout(constant_id = 2) const uint STATE_STRIDE = 1u;
DIMS8_2(uint, SIZES, Y_STRIDES, 3, 1u)
layout(constant_id = 19) const uint BLOCKS = 1u;
layout(constant_id = 20) const bool STATE_HERE = false;
layout(constant_id = 21) const uint NEW_STATE_STRIDE = 1u;

layout(set = 0, binding = 0) readonly buffer STATE { uint state[]; };  // InputStateTensor
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };  // OutputTensor
layout(set = 0, binding = 1) writeonly buffer Y_UVEC4 { uvec4 y_uvec4[]; };  // the same, packed
layout(set = 0, binding = 2) writeonly buffer NEW_STATE { uint new_state[]; };
layout(set = 0, binding = 3) buffer TICKETS { uint tickets[]; };
layout(push_constant) uniform Push { uint count; uint elements; uint first; };

#include "random_generator.glsl"

#define ADD_OFFSET(D, c) o += (c) * Y_STRIDES##D;

void store(uint n, uint word) {
    uint o = 0u;
    FOR_EACH_COORDINATE8(SIZES, n, ADD_OFFSET)
    y[o] = word;
}

// Block b's four words into y (b < count).
void store_block(uint b, uvec4 words) {
    const uint n = 4u * b;  // < elements; n + 3 <= 2^32 - 1 (E < 2^32)
    if (PACKED && n + 3u < elements) {
        y_uvec4[b] = words;
    } else {
        store(n, words.x);
        if (n + 1u < elements) store(n + 1u, words.y);
        if (n + 2u < elements) store(n + 2u, words.z);
        if (n + 3u < elements) store(n + 3u, words.w);
    }
}

// STATE_HERE, at the end: every invocation of the workgroup has read the state (the barrier:
// each has used it), so invocation 0 takes the workgroup's ticket; the last stores the new
// state (c, k: the state it read) and puts the ticket word back to 0 for the next run.
// Tickets at the workgroups' ends: taken at their starts, they queued on the one word (about
// 0.9 ns each on an H200) and held up every workgroup's start.
// The order rests on dependencies, not on fences: each invocation uses the state words it
// loads before the barrier, invocation 0's add takes its operand from its own words, and the
// last workgroup's stores depend on the add's result, so no device can let a load see them.
// (Under the Vulkan memory model's letter, which asks for release and acquire semantics, the
// loads and the stores are not ordered; storage fences around the tickets would make them so,
// and cost a wait for every workgroup's stores: a design with such fences was up to 42 us
// slower at 256 MiB on an H200.)
void take_ticket(uvec4 c, uvec2 k) {
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        // 0 at run time (count <= 2^30), which the compiler cannot see: the add waits for the
        // words read.
        const uint zero = (c.x | c.y | c.z | c.w | k.x | k.y) & (count >> 31);
        const uint ticket = atomicAdd(tickets[0], 1u + zero);
        if (ticket == gl_NumWorkGroups.x - 1u) {
            STORE_NEW_STATE(c, count, k)
            tickets[0] = 0u;
        }
    }
}

void main() {
    const uvec4 counter = uvec4(STATE(0), STATE(1), STATE(2), STATE(3));
    const uvec2 key = uvec2(STATE(4), STATE(5));
    const uint lanes = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    // Written out, not a loop (a driver counting iterations sees only the grid loop); every
    // block of a pass is computed before any is stored, so that the chains can interleave
    // (a block past count is computed and dropped). b + 3 lanes < 2^32: count < 2^30 and
    // lanes < 2^27.
    for (uint b = first + gl_GlobalInvocationID.x; b < count; b += BLOCKS * lanes) {
        const uvec4 w0 = philox_4x32_10(counter_plus(counter, b), key);
        uvec4 w1, w2, w3;
        if (BLOCKS > 1u) w1 = philox_4x32_10(counter_plus(counter, b + lanes), key);
        if (BLOCKS > 2u) w2 = philox_4x32_10(counter_plus(counter, b + 2u * lanes), key);
        if (BLOCKS > 3u) w3 = philox_4x32_10(counter_plus(counter, b + 3u * lanes), key);
        store_block(b, w0);
        if (BLOCKS > 1u && b + lanes < count) store_block(b + lanes, w1);
        if (BLOCKS > 2u && b + 2u * lanes < count) store_block(b + 2u * lanes, w2);
        if (BLOCKS > 3u && b + 3u * lanes < count) store_block(b + 3u * lanes, w3);
    }
    if (STATE_HERE) take_ticket(counter, key);
}
