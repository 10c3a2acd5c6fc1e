// Shared GLSL for pyvkgrad kernels: every kernel includes this first; never compiled alone.
//
// One name per concept, in every kernel and in the plans that pass values by these names
// (pyvkgrad/kernels.py resolves them against the manifest tools/build_shaders.py writes):
//   bindings   the tensors x, dy, dx, mean, variance, scale, dscale, dbias (DirectML's
//              InputTensor, InputGradientTensor, OutputGradientTensor, MeanTensor,
//              VarianceTensor, ScaleTensor, OutputScaleGradientTensor,
//              OutputBiasGradientTensor) and scratch buffers by their plan names (partials,
//              coefficients, tables, accumulator). A binding viewed through several blocks
//              names the other views <name>_<view> (x_uvec4).
//   WG         the workgroup width, specialization constant 0 (local_size_x_id), declared here
//   IS_F16     the float tensors are float16, packed two per 32-bit word (load_store.glsl)
//   DATA_TYPE  the tensors' DML_TENSOR_DATA_TYPE, where integers may come too (the element-wise
//              template: 8- and 16-bit elements pack four and two per word, SUB_BITS)
//   SIZES      the sizes a kernel iterates over; <TENSOR>_SIZES where its tensors differ
//   <TENSOR>_STRIDES  a tensor's element strides (DX_STRIDES, MEAN_STRIDES, ...)
//   K_, R_     prefixes for the kept and the reduced dimensions of a reduction (K_SIZES,
//              R_X_STRIDES, ...)
//   count      push constant: the items of the grid-stride loop
// Per-dimension constants are groups NAME0..NAME7 (or NAME0..NAME3), outermost first,
// right-aligned, in elements (indexing.glsl); a plan passes a group as one name.

layout(local_size_x_id = 0) in;
const uint WG = gl_WorkGroupSize.x;

#include "load_store.glsl"
#include "indexing.glsl"

// Grid-stride loop over [0, count): any element count with at most 65535 workgroups.
// Callers guarantee count <= 2^31 so `i += stride` cannot wrap.
#define GRID_STRIDE_LOOP(i, count)                                                  \
    for (uint i = gl_GlobalInvocationID.x; i < (count);                             \
         i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)

// A specialization constant as the arithmetic sees it. A constant +-0 may let the compiler
// fold x * 0.0 to 0, or x + 0.0 to x (Vulkan allows that without the SignedZeroInfNanPreserve
// execution mode, and llvmpipe does it), which drops an Inf or NaN x that IEEE arithmetic
// turns into NaN, or a sign. So a zero comes as its bits ORed with a zero the compiler cannot
// see (an invocation runs only where its dispatch has workgroups); any other constant stays a
// constant (the test on c folds when the pipeline is specialised), and the code for it is
// what it was. A kernel whose float scalar may be 0 (a scale, a Beta, 1 - Beta, Alpha)
// multiplies by run_time(scalar).
float run_time(float c) {
    return (floatBitsToUint(c) << 1) != 0u ? c
        : uintBitsToFloat(floatBitsToUint(c) | uint(gl_NumWorkGroups.x == 0u));
}

// A loop of n iterations running STATEMENT (one statement, commas only within parentheses),
// [[unroll]] where `unrolled` (a specialization constant), else as the compiler chooses: a
// device whose compiler leaves short loops rolled and indexes arrays by their counter
// through memory (llvmpipe; Limits.unroll_loops) takes the first. The including kernel
// enables GL_EXT_control_flow_attributes.
#define FIXED_LOOP(unrolled, i, n, STATEMENT)                                          \
    if (unrolled) { [[unroll]] for (uint i = 0u; i < (n); ++i) STATEMENT; }            \
    else { for (uint i = 0u; i < (n); ++i) STATEMENT; }

// The same over [first, end): one of the dispatches a plan splits a loop into where the
// driver ends long loops (lavapipe: 65535 iterations per invocation); first = 0 and end =
// count in one dispatch. Kernels taking it declare the push constant `first`.
#define GRID_STRIDE_LOOP_FROM(i, first, end)                                        \
    for (uint i = (first) + gl_GlobalInvocationID.x; i < (end);                     \
         i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)
