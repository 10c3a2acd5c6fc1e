// What the general gather kernels of DML_OPERATOR_RESAMPLE_GRAD share (resample_grad_gather,
// resample_grad_gather_windowed): dX's sizes, dY's strides, the transposed per-axis tables and
// the contributor ranges read from them. The including kernel includes common.glsl and
// resample_grad.glsl first; its own constants follow from id 27.
//
// C_d(i) is the set of forward outputs o along axis d that read input i (nearest: i(o) == i;
// linear: a tap of o lands on i with a nonzero weight). The forward map is monotone, so C_d(i)
// is a contiguous range [BEGIN[i], BEGIN[i] + COUNTS[i+1] - COUNTS[i]); the host computes it,
// and the weights, in exact float32 (docs/semantics.md §6.2): no coordinate is computed here.
// Tables, per axis d (In_d = dX size): BEGIN_d[In_d] first o of each input index,
//   COUNTS_d[In_d+1] prefix counts (entry index base), WEIGHTS_d[entries] weights (linear
//   only). Nearest ranges partition [0, Out_d) in order, so there BEGIN_d == COUNTS_d (the
//   same words).
// Constants: DX_SIZES, DY_STRIDES (4 dimensions, right-aligned, in elements), BEGIN, COUNTS,
//   WEIGHTS (word offsets in tables).

DIMS4(uint, DX_SIZES, 7, 1)
DIMS4(uint, DY_STRIDES, 11, 0)
DIMS4_3(uint, BEGIN, COUNTS, WEIGHTS, 15, 0)

// The innermost resampled axis, along which linear sums a row first (0 when none is: every
// weight is then 1). A constant once the IDENTITY constants are.
const uint INNER = !IDENTITY3 ? 3u : !IDENTITY2 ? 2u : !IDENTITY1 ? 1u : 0u;

// Contributor range of input index i along axis D: first output ob, entry base wb, length n.
#define AXIS_RANGE(D, i, ob, wb, n)                                  \
    if (IDENTITY##D) {                                               \
        ob = (i); wb = 0u; n = 1u;                                   \
    } else {                                                         \
        ob = tables[BEGIN##D + (i)];                                 \
        wb = tables[COUNTS##D + (i)];                                \
        n = tables[COUNTS##D + (i) + 1u] - wb;                       \
    }
// The weight of entry k of axis D (1 for nearest and for identity axes).
#define WEIGHT(D, k) \
    ((IS_LINEAR && !IDENTITY##D) ? uintBitsToFloat(tables[WEIGHTS##D + (k)]) : 1.0)
