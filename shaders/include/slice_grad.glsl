// SLICE_GRAD (slice_grad): what its kernels slice_grad and slice_grad_packed share: the
// window's constants in the canonical form of pyvkgrad/ops/slice_grad.py (`Window`), and the
// test of one dX coordinate against it. Included after common.glsl.
//
// LANES_LOG2: elements per 32-bit word as a power of two (0: 32-bit, 1: 16-bit, 2: 8-bit
//   elements; SUB_BITS' L). A copy needs the elements' width only, not their type.
// Per dimension (8, right-aligned, outermost first): SIZES, dX's sizes; FIRSTS, the first dX
//   index the window reaches; STEPS (>= 1), the step between the indices it reaches; DY_SIZES;
//   DY_STRIDES, dY's element strides as uint32 (a window running backwards reads dY with a
//   negative stride: two's complement, and the uint arithmetic wraps to the right offset).
// DY_BASE: dY's element at the window's first dX index along every dimension.

layout(constant_id = 1) const uint LANES_LOG2 = 0u;
DIMS8(uint, SIZES, 2, 1u)
DIMS8(uint, FIRSTS, 10, 0u)
DIMS8(uint, STEPS, 18, 1u)
DIMS8(uint, DY_SIZES, 26, 1u)
DIMS8(uint, DY_STRIDES, 34, 0u)
layout(constant_id = 42) const uint DY_BASE = 0u;

// dX coordinate c along dimension D is on the window when c = FIRSTS + STEPS k with
// 0 <= k < DY_SIZES; dY's element then moves by k DY_STRIDES. The caller declares
// `bool on_window` (true) and `uint source` (DY_BASE) and reads `source` only when on_window
// holds at the end.
#define SLICE_MAP(D, c)                                                                 \
    {                                                                                   \
        const uint r_ = (c) - FIRSTS##D, k_ = r_ / STEPS##D;                            \
        on_window = on_window && (c) >= FIRSTS##D && k_ * STEPS##D == r_                \
                    && k_ < DY_SIZES##D;                                                \
        source += k_ * DY_STRIDES##D;                                                   \
    }
