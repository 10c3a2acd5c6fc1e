// The body of the "walk" gather kernels of DML_OPERATOR_RESAMPLE_GRAD (resample_grad_walk,
// resample_grad_walk_pair): deterministic like resample_grad_gather (one invocation owns each dX
// element, which sums its contributors in the same order, with the same arithmetic), but each
// invocation owns a block of dX elements and loads every dY element its block reads once.
// The including kernel defines PAIR_LANES (1: float values; 2: vec2 values, two neighbouring
// elements along axis B per lane) and includes common.glsl and resample_grad.glsl first.
//
// Axes: the plan permutes dX's (and dY's) dimensions into kernel axes A, B, P, Q, where A and B
// are identity axes (o = i, weight 1, no table) and P, Q hold the resampled axes in logical
// order (P outer), so the summation order o_P ascending, then o_Q ascending (innermost) is the
// logical one, o0, o1, o2, o3 ascending (identity axes contribute one term each). A single
// resampled axis goes to P or Q; IDENTITY2 / IDENTITY3 say whether P / Q is one.
//
// An item: one A index, one B index (PAIR_LANES of them), ROWS consecutive rows (P) and COLS
// consecutive columns (Q) of dX. Its columns read a contiguous range of dY outputs along Q, the
// union [u0, u0 + nu) (COL_SPANS, nu <= MAXU), and its rows the range [lo, hi) along P
// (ROW_SPANS). The item walks o_P over [lo, hi) ascending; per o_P it loads the nu dY values of
// that row once, into registers, looks up which of its rows o_P reads through the forward table
// of P (FIRST[o]: the first tap, WEIGHT_FIRST[o] its weight, WEIGHT_NEXT[o] the weight of tap
// FIRST[o] + 1, 0 when there is none; the same taps and weights as the transposed tables, whose
// zero-weight taps the plan checks do not occur), and adds the values to those rows' columns
// in o_Q order, each column reading only its own contributors (a bit mask per column over the
// union, and its weights aligned to the union, loaded once per item from the transposed
// tables BEGIN / COUNTS / WEIGHTS of Q). So every element adds the same terms in the same
// order, with the same arithmetic, as resample_grad_gather: the canonical order of
// include/resample_grad.glsl. Nearest acc = acc + v; linear, per dY row and column,
// h = h + v * wQ over the column's contributors, computed once per row and added to each row
// that reads it as acc = acc + h * wP (weights of identity axes are 1.0: where P is the only
// resampled axis, h = v and acc = acc + v * wP, the canonical row sum along P); float32
// accumulation from 0, one rounding to float16.
//
// Lanes: consecutive items differ in their column group (LANES_ON_B false: a warp covers
// consecutive columns of the same rows) or in B (LANES_ON_B: B is memory-innermost, e.g. the
// channels of NHWC, and a warp's loads are contiguous). COL_SLOTS >= COL_GROUPS pads the
// column groups (the extra items do nothing) so that warps need not straddle row blocks.
// Float16 stores: PAIR_Q (PAIR_LANES 1, COLS 2, both columns in one 32-bit word) and
// PAIR_LANES 2 (both B elements in one word) store whole words; otherwise element stores go
// through STORE (integer atomics on shared words). DY_WORDS: float16 dY whose Q stride is 1
// (PAIR_LANES 1) or whose B stride is 1 (PAIR_LANES 2), with every other stride even, is read
// by words.
//
// Bindings: tables, dy (include/resample_grad.glsl), dx (OutputGradientTensor).
// Push constants: count (items). Dispatch: up to 65535 workgroups, grid-stride loop over items.

#define MAX_ROWS 16u
#define MAX_COLS 2u
#define MAX_U 12u
#define MAX_WORDS 7u  // MAX_U / 2 + 1: the 32-bit words that hold MAX_U float16 values

layout(constant_id = 7) const uint ROWS = 1u;  // rows per item, <= MAX_ROWS
layout(constant_id = 8) const uint COLS = 1u;  // columns per item, <= MAX_COLS
layout(constant_id = 9) const uint MAXU = 1u;  // the largest union of an item's columns, <= MAX_U
layout(constant_id = 10) const bool LANES_ON_B = false;
layout(constant_id = 11) const bool PAIR_Q = false;
layout(constant_id = 12) const bool DY_WORDS = false;
DIMS4(uint, SIZES, 13, 1)  // dX sizes along A, B, P, Q
DIMS4_2(uint, DX_STRIDES, DY_STRIDES, 17, 0)
// Word offsets in tables: the forward table of P, the row spans of the row blocks (lo, hi per
// block), the transposed tables of Q, the column spans of the column groups (u0, nu per group).
layout(constant_id = 25) const uint FIRST = 0u;
layout(constant_id = 26) const uint WEIGHT_FIRST = 0u;
layout(constant_id = 27) const uint WEIGHT_NEXT = 0u;
layout(constant_id = 28) const uint ROW_SPANS = 0u;
layout(constant_id = 29) const uint BEGIN = 0u;
layout(constant_id = 30) const uint COUNTS = 0u;
layout(constant_id = 31) const uint WEIGHTS = 0u;
layout(constant_id = 32) const uint COL_SPANS = 0u;
layout(constant_id = 33) const uint ROW_BLOCKS = 1u;
layout(constant_id = 34) const uint COL_GROUPS = 1u;
layout(constant_id = 35) const uint COL_SLOTS = 1u;
// How a dY row finds the rows it adds to: a switch on the first tap's row (true), or a test of
// every row of the item (false). Same additions in the same order either way.
layout(constant_id = 36) const bool ROW_SWITCH = true;
// How a column skips the union positions it does not read: per dY row, a copy of the values
// with those positions zeroed, then every position added unconditionally (true), or each
// addition under a test (false). The same bits: a skipped term adds +0 * w (weights are
// positive and finite) to an accumulator that is never -0 (it starts at +0, and a float sum is
// -0 only when both terms are; plus_zero undoes a compiler's folding of the first addition),
// which leaves it unchanged.
layout(constant_id = 37) const bool SELECT_VALUES = true;
// With several columns, a third way (taking precedence over SELECT_VALUES): every column adds
// every union position, multiplied by its weight there, or by 0 where it does not read it
// (nearest: by 1 or 0), with no test; s + v * 0 is s for finite v (up to the sign of a zero
// s, which no later nonzero term keeps and plus_zero clears at the store), and v * 1 is v, so
// a finite sum gives the bits of the tested one. A column sum that comes out NaN or infinite (a dY value that is, in
// or next to the column's range) is done again from its start value the tested way. This
// saves a test per position, about half a float16 pair's per-row instructions.
layout(constant_id = 38) const bool ZERO_WEIGHTS = false;
// DY_WORDS along Q (PAIR_LANES 1, COLS > 1) with every union starting at an even element (the
// plan rounds the column spans down): a dY row's values are the halves of whole words in order.
layout(constant_id = 39) const bool DY_ALIGNED = false;

layout(set = 0, binding = 2) buffer DX { uint dx[]; };  // OutputGradientTensor
layout(push_constant) uniform Push { uint count; };

const uint WORDS = (MAXU + 2u) >> 1u;
const uint LANES_B = SIZES1 / PAIR_LANES;


#if PAIR_LANES == 2
#define VALUE vec2
// Two B-neighbours of dY element `off`.
vec2 load_value(uint off) {
    if (IS_F16 && DY_WORDS) {
        return unpackHalf2x16(dy[off >> 1u]);
    }
    return vec2(LOAD(dy, off), LOAD(dy, off + DY_STRIDES1));
}
void store_value(uint off, vec2 v) {
    if (IS_F16) {  // the plan pairs float16 only where both halves are one word of dX
        dx[off >> 1u] = pack_halves(v);
    } else {
        dx[off] = floatBitsToUint(v.x);
        dx[off + DX_STRIDES1] = floatBitsToUint(v.y);
    }
}
#else
#define VALUE float
float load_value(uint off) { return LOAD(dy, off); }
void store_value(uint off, float v) { STORE(dx, off, v) }
#endif

// The nu dY values from element y on along Q (v[u] for u < nu; 0 for the rest, but see
// ZERO_WEIGHTS below).
void load_row(uint y, uint nu, out VALUE v[MAX_U]) {
#if PAIR_LANES == 1
    if (IS_F16 && DY_WORDS) {  // Q stride 1: element y + u lives in word (y + u) / 2
        uint par = DY_ALIGNED ? 0u : y & 1u;
        uint first = y >> 1u;
        uint words = (par + nu + 1u) >> 1u;
        uint w[MAX_WORDS];
        [[unroll]] for (uint k = 0u; k < WORDS; ++k) {
            w[k] = k < words ? dy[first + k] : 0u;
        }
        [[unroll]] for (uint u = 0u; u < MAXU; ++u) {
            vec2 even = unpackHalf2x16(w[u >> 1u]);
            vec2 odd = unpackHalf2x16(w[(u + 1u) >> 1u]);
            float h = par == 0u ? ((u & 1u) == 0u ? even.x : even.y)
                                : ((u & 1u) == 0u ? odd.y : odd.x);
            // ZERO_WEIGHTS: a position past the union has weight 0 in every column, so its
            // value need not be 0 (a loaded word's other half; a non-finite one is redone).
            v[u] = u < nu || (ZERO_WEIGHTS && COLS > 1u) ? h : 0.0;
        }
        return;
    }
#endif
    [[unroll]] for (uint u = 0u; u < MAXU; ++u) {
        v[u] = u < nu ? load_value(y + u * DY_STRIDES3) : VALUE(0.0);
    }
}

// Whether union position u is one of column e's contributors (one column: the union is its
// contributors, so the test is the load's).
#define READS(e, u) (COLS == 1u ? (u) < nu : ((mask[e] >> (u)) & 1u) != 0u)
// With SELECT_VALUES: union position u's value for column e, 0 where e does not read it.
#define COLUMN_VALUE(e, u) (COLS == 1u ? v[u] : ve[(e) * MAX_U + (u)])
// Add column e's contributors of dY row v into `sum`, in o_Q order (ACCUMULATE: linear
// weights them by wq, nearest adds them; SELECT_VALUES: ve holds v with the others zeroed;
// ZERO_WEIGHTS: wq is 0 at the others, and nearest's is 1 at its own).
#define ADD_COLUMN_TESTED(sum, e)                                                         \
    [[unroll]] for (uint u = 0u; u < MAXU; ++u) {                                         \
        if (READS(e, u)) {                                                                \
            ACCUMULATE(sum, v[u], VALUE(wq[(e) * MAX_U + u]))                             \
        }                                                                                 \
    }
#define ADD_COLUMN(sum, e)                                                                \
    if (ZERO_WEIGHTS && COLS > 1u) {                                                      \
        VALUE start = sum;                                                                \
        [[unroll]] for (uint u = 0u; u < MAXU; ++u) {                                     \
            sum = sum + v[u] * VALUE(wq[(e) * MAX_U + u]);                                \
        }                                                                                 \
        if (!finite(sum)) {                                                               \
            sum = start;                                                                  \
            ADD_COLUMN_TESTED(sum, e)                                                     \
        }                                                                                 \
    } else if (SELECT_VALUES) {                                                           \
        [[unroll]] for (uint u = 0u; u < MAXU; ++u) {                                     \
            ACCUMULATE(sum, COLUMN_VALUE(e, u), VALUE(wq[(e) * MAX_U + u]))               \
        }                                                                                 \
    } else {                                                                              \
        ADD_COLUMN_TESTED(sum, e)                                                         \
    }
// Add dY row v, times row weight W, into row J of the item: nearest adds each column's
// contributors, linear the column's row sum h (ROW_SUM).
#define ADD_ROW(J, W)                                                                     \
    if ((J) < ROWS) {                                                                     \
        [[unroll]] for (uint e = 0u; e < COLS; ++e) {                                     \
            if (IS_LINEAR) {                                                              \
                ROW_SUM(acc[(J) * MAX_COLS + e], h[e], VALUE(W))                          \
            } else {                                                                      \
                ADD_COLUMN(acc[(J) * MAX_COLS + e], e)                                    \
            }                                                                             \
        }                                                                                 \
    }
// The dY row's first tap is row J of the item (and, with `next`, its second row J + 1).
#define ROW_CASE(J)                                                                       \
    case J:                                                                               \
        ADD_ROW(J, wa)                                                                    \
        if (next) {                                                                       \
            ADD_ROW(J + 1u, wn)                                                           \
        }                                                                                 \
        break;

void walk(uint a, uint b, uint rb, uint cg) {
    uint r0 = rb * ROWS, c0 = cg * COLS;
    // Columns: the union of their contributors, and per column its positions in the union (a
    // bit mask) and its weights there.
    uint u0, nu;
    if (IDENTITY3) {
        u0 = c0;
        nu = min(COLS, SIZES3 - c0);
    } else {
        u0 = tables[COL_SPANS + 2u * cg];
        nu = tables[COL_SPANS + 2u * cg + 1u];
    }
    uint mask[MAX_COLS];
    float wq[MAX_COLS * MAX_U];
    [[unroll]] for (uint e = 0u; e < COLS; ++e) {
        uint c = c0 + e;
        uint s = e, n = 0u, wb = 0u;
        if (c < SIZES3) {
            if (IDENTITY3) {
                n = 1u;
            } else {
                wb = tables[COUNTS + c];
                n = tables[COUNTS + c + 1u] - wb;
                s = tables[BEGIN + c] - u0;
            }
        }
        mask[e] = n == 0u ? 0u : ((1u << n) - 1u) << s;
        [[unroll]] for (uint u = 0u; u < MAXU; ++u) {
            wq[e * MAX_U + u] = ZERO_WEIGHTS && ((mask[e] >> u) & 1u) == 0u ? 0.0 : 1.0;
            if (IS_LINEAR && !IDENTITY3 && ((mask[e] >> u) & 1u) != 0u) {
                wq[e * MAX_U + u] = uintBitsToFloat(tables[WEIGHTS + wb + (u - s)]);
            }
        }
    }
    // Rows.
    uint lo, hi;
    if (IDENTITY2) {
        lo = r0;
        hi = min(r0 + ROWS, SIZES2);
    } else {
        lo = tables[ROW_SPANS + 2u * rb];
        hi = tables[ROW_SPANS + 2u * rb + 1u];
    }
    precise VALUE acc[MAX_ROWS * MAX_COLS];  // no compiler may contract or reorder its sums
    [[unroll]] for (uint k = 0u; k < MAX_ROWS * MAX_COLS; ++k) {
        acc[k] = VALUE(0.0);
    }
    uint ybase = a * DY_STRIDES0 + b * DY_STRIDES1 + u0 * DY_STRIDES3;
    for (uint o = lo; o < hi; ++o) {
        VALUE v[MAX_U];
        load_row(ybase + o * DY_STRIDES2, nu, v);
        VALUE ve[MAX_COLS * MAX_U];  // SELECT_VALUES with several columns: column e's values
        if (SELECT_VALUES && !ZERO_WEIGHTS && COLS > 1u) {
            [[unroll]] for (uint e = 0u; e < COLS; ++e) {
                [[unroll]] for (uint u = 0u; u < MAXU; ++u) {
                    ve[e * MAX_U + u] = READS(e, u) ? v[u] : VALUE(0.0);
                }
            }
        }
        precise VALUE h[MAX_COLS];  // linear: each column's sum of this row, h = h + v * wQ
        if (IS_LINEAR) {
            [[unroll]] for (uint e = 0u; e < COLS; ++e) {
                h[e] = VALUE(0.0);
                ADD_COLUMN(h[e], e)
            }
        }
        uint ja;  // the row of tap FIRST[o] (wraps when it lies before the block)
        float wa = 1.0, wn = 0.0;
        if (IDENTITY2) {
            ja = o - r0;
        } else {
            ja = tables[FIRST + o] - r0;
            if (IS_LINEAR) {
                wa = uintBitsToFloat(tables[WEIGHT_FIRST + o]);
                wn = uintBitsToFloat(tables[WEIGHT_NEXT + o]);
            }
        }
        bool next = IS_LINEAR && !IDENTITY2 && wn != 0.0;  // tap FIRST[o] + 1 too
        if (ROW_SWITCH) {
            switch (ja) {
                ROW_CASE(0u) ROW_CASE(1u) ROW_CASE(2u) ROW_CASE(3u)
                ROW_CASE(4u) ROW_CASE(5u) ROW_CASE(6u) ROW_CASE(7u)
                ROW_CASE(8u) ROW_CASE(9u) ROW_CASE(10u) ROW_CASE(11u)
                ROW_CASE(12u) ROW_CASE(13u) ROW_CASE(14u) ROW_CASE(15u)
                default:
                    if (ja == ~0u && next) {  // the first tap is the row before the block's
                        ADD_ROW(0u, wn)
                    }
            }
        } else {
            [[unroll]] for (uint j = 0u; j < ROWS; ++j) {
                bool at_first = j == ja;
                if (at_first || (next && j == ja + 1u)) {
                    ADD_ROW(j, at_first ? wa : wn)
                }
            }
        }
    }
    uint xbase = a * DX_STRIDES0 + b * DX_STRIDES1 + c0 * DX_STRIDES3;
    [[unroll]] for (uint j = 0u; j < ROWS; ++j) {
        if (r0 + j < SIZES2) {
            uint x = xbase + (r0 + j) * DX_STRIDES2;
#if PAIR_LANES == 1
            if (PAIR_Q) {  // float16, both columns in word x / 2
                dx[x >> 1u] = pack_halves(plus_zero(vec2(acc[j * MAX_COLS],
                                                          acc[j * MAX_COLS + 1u])));
                continue;
            }
#endif
            [[unroll]] for (uint e = 0u; e < COLS; ++e) {
                if (c0 + e < SIZES3) {
                    store_value(x + e * DX_STRIDES3, plus_zero(acc[j * MAX_COLS + e]));
                }
            }
        }
    }
}

// Mixed-radix split of `item`, innermost first: (item % n0, (item / n0) % n1,
// (item / (n0 n1)) % n2, what is left).
uvec4 split3(uint item, uint n0, uint n1, uint n2) {
    const uint r0 = item / n0, r1 = r0 / n1;
    return uvec4(item % n0, r0 % n1, r1 % n2, r1 / n2);
}

void main() {
    GRID_STRIDE_LOOP(item, count) {
        uint a, b, rb, cg;
        if (LANES_ON_B) {
            const uvec4 d = split3(item, LANES_B, COL_SLOTS, ROW_BLOCKS);
            b = d.x; cg = d.y; rb = d.z; a = d.w;
        } else {
            const uvec4 d = split3(item, COL_SLOTS, ROW_BLOCKS, LANES_B);
            cg = d.x; rb = d.y; b = d.z; a = d.w;
        }
        if (cg < COL_GROUPS) {
            walk(a, b * PAIR_LANES, rb, cg);
        }
    }
}
