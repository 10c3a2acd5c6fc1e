// Shared GLSL for pyvkgrad kernels: included by the .comp files, never compiled alone.
//
// Float16 tensors travel packed two to a 32-bit word (kp has no half type, and reading
// words with unpackHalf2x16 needs no 16-bit storage feature). Element i lives in word i/2,
// low half when i is even.

#define HALF_SHIFT(i) (((i) & 1u) * 16u)
#define HALF_BITS(words, i) (((words)[(i) >> 1u] >> HALF_SHIFT(i)) & 0xFFFFu)
#define LOAD_HALF(words, i) unpackHalf2x16(HALF_BITS(words, i)).x
#define HALF_FROM_FLOAT(v) (packHalf2x16(vec2((v), 0.0)) & 0xFFFFu)

// Store float16 bits into element i. The other half of the word may belong to another
// invocation, so only our 16 bits are cleared and set, each with an integer atomic (core
// Vulkan, no feature needed). Final contents are right whatever the interleaving.
#define STORE_HALF_BITS(words, i, bits)                                   \
    {                                                                     \
        atomicAnd((words)[(i) >> 1u], ~(0xFFFFu << HALF_SHIFT(i)));       \
        atomicOr((words)[(i) >> 1u], (bits) << HALF_SHIFT(i));            \
    }

// Grid-stride loop over [0, count): any element count with at most 65535 workgroups.
// Callers guarantee count <= 2^31 so `i += stride` cannot wrap.
#define GRID_STRIDE_LOOP(i, count)                                                  \
    for (uint i = gl_GlobalInvocationID.x; i < (count);                             \
         i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)

