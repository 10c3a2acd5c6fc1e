// What DML_OPERATOR_AVERAGE_POOLING_GRAD (average_pooling_grad) and MAX_POOLING_GRAD
// (max_pooling_grad) share: the pooling geometry, the deterministic gather and main().
//
// Tensors are {N, C, S0, S1, S2}: a 4-D problem arrives with a leading spatial axis of size 1
// (window 1, stride 1, no padding, dilation 1). Along spatial axis d the window of output o
// covers the input positions
//     p = o * STRIDES_d - START_PADDING_d + k * DILATION_d,   k in [0, WINDOW_d)
// (average pooling: dilation 1), and a position is real when 0 <= p < In_d (padding else).
//
// Gather: one invocation per dX element p sums the terms of every output window that contains
// it, in ascending row-major output order (o0, then o1, then o2), starting from +0, in
// float32 (`precise`: no contraction). Along each axis the outputs whose window span
// [o S - P0, o S - P0 + (W - 1) D] contains i form one contiguous range [lo, lo + n), computed
// in integers (`axis_range`); the element's windows are the n0 n1 n2 combinations, walked as
// one flat index t (row-major), so a plan may split them into consecutive runs of t
// [window_first, window_end) over several dispatches (where a driver ends long loops) and
// continue one running sum through the float32 `accumulator`: the same terms in the same order,
// so the same bits as one dispatch. Each kernel defines `window_term` (whether window o adds to
// the element, and what).
//
// Tiles (TILED, the plan's choice where a tile's work is small and one dispatch sums every
// window): one invocation computes a tile of dX, TILE_d = V_d S_d positions per axis
// (V_d = 1 but along the last axis), the same sums in the same order. Tile t along an axis
// covers i = t TILE + k, k in [0, TILE); since floor((t V S + x) / S) = t V + floor(x / S),
// the windows that may contain any of its positions are o = t V + FIRST_WINDOW + w
// (FIRST_WINDOW = ceil((P0 - (W - 1) D) / S) = -WINDOWS_BEHIND),
// w in [0, WINDOWS), and whether window w contains position k, and where in the window,
// depends on k and w alone (reach = k + P0 - (FIRST_WINDOW + w) S): constants once the
// loops unroll. Each window's term is computed once per tile (max pooling's argmax:
// `tile_window`; the average's division: `tile_term`), then every position adds the terms of
// its windows in ascending w, which is ascending o: the gather's order, so the gather's bits
// (or, with HALF_TERMS, takes its one window's half). No divisions by anything
// but specialization constants (the compiler makes them multiplications), no per-element
// loops of unknown length, and float16 pairs of a word stored whole.
//
// Constants: IS_F16; SIZES (dX: N, C, In0, In1, In2); OUT (dY's spatial sizes); WINDOW,
//   STRIDES, START_PADDING, END_PADDING, DILATIONS (per spatial axis); DY_STRIDES and
//   DX_STRIDES (5 dimensions, in elements); tiles: TILED, TILE, TILES (tiles per axis),
//   WINDOWS, WINDOWS_BEHIND. Kernel constants follow from id 48.
// Push constants: count and first (the dX elements [first, count) of this dispatch, row-major
//   logical order: plan.grid_slices; tiles where TILED), window_first and window_end (the run
//   of each element's windows it sums: 0 and 0xFFFFFFFF for all), stage (bit 0: continue the
//   sum held in the accumulator; bit 1: store the finished sum into dX, else into the
//   accumulator; TILED: always 2).
// Dispatch: up to 65535 workgroups, a grid-stride loop over the elements (or tiles).

#include "half_rows.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
// Per-axis groups of 3 (spatial) and 5 (N, C, spatial) constants, NAME0 the outermost.
#define POOLING_CONSTANT(NAME, ID) layout(constant_id = ID) const uint NAME = DEFAULT_;
#define DIMS3(NAME, ID) POOLING_CONSTANT(NAME##0, ID) POOLING_CONSTANT(NAME##1, ID + 1) \
    POOLING_CONSTANT(NAME##2, ID + 2)
#define DIMS5(NAME, ID) DIMS3(NAME, ID) POOLING_CONSTANT(NAME##3, ID + 3) \
    POOLING_CONSTANT(NAME##4, ID + 4)
#define DEFAULT_ 1u
DIMS5(SIZES, 2)
DIMS3(OUT, 7) DIMS3(WINDOW, 10) DIMS3(STRIDES, 13)
DIMS3(DILATIONS, 16)
#undef DEFAULT_
#define DEFAULT_ 0u
DIMS3(START_PADDING, 19) DIMS3(END_PADDING, 22)
DIMS5(DY_STRIDES, 25) DIMS5(DX_STRIDES, 30)
layout(constant_id = 35) const bool TILED = false;
#undef DEFAULT_
#define DEFAULT_ 1u
DIMS3(TILE, 36) DIMS3(TILES, 39) DIMS3(WINDOWS, 42)
#undef DEFAULT_
#define DEFAULT_ 0u
DIMS3(WINDOWS_BEHIND, 45)
// The tile's first window relative to t V (ceil((P0 - (W - 1) D) / S) <= 0: the plan tiles
// only where P0 <= (W - 1) D).
// Built component by component at run time, not as an expression of specialization constants:
// the Khronos validation layer 1.3.239 folds such vector expressions through spirv-opt passes
// that can drop a constant still in use (a 5x5 window's span did), and then reports the
// pipeline's SPIR-V invalid (as for LRN's window steps).
ivec3 first_window_index() {
    ivec3 first;
    first.x = -int(WINDOWS_BEHIND0);
    first.y = -int(WINDOWS_BEHIND1);
    first.z = -int(WINDOWS_BEHIND2);
    return first;
}
#define FIRST_WINDOW first_window_index()

layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint window_first;
    uint window_end;
    uint stage;
};

const uint WINDOW_CELLS = WINDOW0 * WINDOW1 * WINDOW2;
const bool WINDOW_CELLS_POWER_OF_TWO = (WINDOW_CELLS & (WINDOW_CELLS - 1u)) == 0u;

// dY's element o of the (n, c) slice at dy_base.
uint dy_offset(uint dy_base, uvec3 o) {
    return dy_base + o.x * DY_STRIDES2 + o.y * DY_STRIDES3 + o.z * DY_STRIDES4;
}

// A dX element: its spatial coordinates, and the offsets of its (n, c) slice in dY and X.
struct Element {
    uvec3 i;
    uint dy_base;
    uint x_base;  // max pooling's X (its kernel's X_STRIDES); 0 for average pooling
};

uint x_slice_offset(uint n, uint c);  // each kernel's: X's offset of slice (n, c), or 0

// Element e (row-major over SIZES); dx_offset gets its offset in dX.
Element element_at(uint e, out uint dx_offset) {
    Element el;
    uint rest = e;
    el.i.z = rest % SIZES4; rest /= SIZES4;
    el.i.y = rest % SIZES3; rest /= SIZES3;
    el.i.x = rest % SIZES2; rest /= SIZES2;
    const uint c = rest % SIZES1, n = rest / SIZES1;
    dx_offset = n * DX_STRIDES0 + c * DX_STRIDES1 + el.i.x * DX_STRIDES2 + el.i.y * DX_STRIDES3
        + el.i.z * DX_STRIDES4;
    el.dy_base = n * DY_STRIDES0 + c * DY_STRIDES1;
    el.x_base = x_slice_offset(n, c);
    return el;
}

// The outputs [lo, lo + n) of one axis whose window span contains input index i:
// o S - P0 <= i <= o S - P0 + (W - 1) D, i.e. ceil((i + P0 - (W - 1) D) / S) <= o <=
// floor((i + P0) / S), within [0, out).
void axis_range(uint i, uint window, uint stride, uint start, uint dilation, uint out_size,
                out uint lo, out uint n) {
    const uint a = i + start, span = (window - 1u) * dilation;
    lo = a >= span ? (a - span + stride - 1u) / stride : 0u;
    const uint hi = min(a / stride + 1u, out_size);
    n = hi > lo ? hi - lo : 0u;
}

// Whether window o adds to element el, and the term it adds (each kernel's).
bool window_term(Element el, uvec3 o, out float term);

// -0 made +0 (a sum from +0 is never -0, but a compiler may fold the first `+0 + v` to v).
float plus_zero_sum(float v) {
    const uint bits = floatBitsToUint(v);
    return uintBitsToFloat(bits == 0x80000000u ? 0u : bits);
}

// The sum of element e's terms over its windows [window_first, window_end), after `start`.
float gather(Element el, float start) {
    uint lo0, n0, lo1, n1, lo2, n2;
    axis_range(el.i.x, WINDOW0, STRIDES0, START_PADDING0, DILATIONS0, OUT0, lo0, n0);
    axis_range(el.i.y, WINDOW1, STRIDES1, START_PADDING1, DILATIONS1, OUT1, lo1, n1);
    axis_range(el.i.z, WINDOW2, STRIDES2, START_PADDING2, DILATIONS2, OUT2, lo2, n2);
    const uint total = n0 * n1 * n2;
    const uint t_end = min(window_end, total);
    uint t = min(window_first, total);
    precise float acc = start;
    if (t >= t_end) return acc;
    // The flat index t as (k0, k1, k2), then stepped row-major (divisions only where a run
    // starts past the first window: a plan under a loop limit).
    uint k2 = 0u, k1 = 0u, k0 = 0u;
    if (t != 0u) {
        k2 = t % n2;
        k1 = (t / n2) % n1;
        k0 = t / (n2 * n1);
    }
    for (; t < t_end; ++t) {
        float term;
        if (window_term(el, uvec3(lo0 + k0, lo1 + k1, lo2 + k2), term)) acc = acc + term;
        if (++k2 == n2) {
            k2 = 0u;
            if (++k1 == n1) {
                k1 = 0u;
                ++k0;
            }
        }
    }
    return acc;
}

// The gather, one dX element per invocation.
void element_main() {
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        uint off;
        const Element el = element_at(e, off);
        const float start = (stage & 1u) != 0u ? uintBitsToFloat(accumulator[e]) : 0.0;
        const float sum = gather(el, start);
        if ((stage & 2u) == 0u) {
            accumulator[e] = floatBitsToUint(sum);
        } else if (IS_F16) {
            STORE_HALF_BITS(dx, off, half_from_float(plus_zero_sum(sum)));
        } else {
            dx[off] = floatBitsToUint(plus_zero_sum(sum));
        }
    }
}

// -- Tiles --

// Bounds the plan keeps (_pooling_grad.py: TILE_MAX_CELLS, TILE_MAX_WINDOWS): arrays indexed
// by unrolled loops stay in registers.
#define TILE_MAX_CELLS 16
#define TILE_MAX_WINDOWS 32
const uint TILE_CELLS = TILE0 * TILE1 * TILE2;
const uint TILE_WINDOWS = WINDOWS0 * WINDOWS1 * WINDOWS2;
// A window's span (W - 1) D per axis, built at run time as first_window_index.
ivec3 window_span() {
    ivec3 span;
    span.x = int(WINDOW0) - 1;
    span.x *= int(DILATIONS0);
    span.y = int(WINDOW1) - 1;
    span.y *= int(DILATIONS1);
    span.z = int(WINDOW2) - 1;
    span.z *= int(DILATIONS2);
    return span;
}
// `tile_window`'s winner where every position its window contains takes the term (average:
// the kernel defines EVERY_CELL_WINS true, so that the tiles test no winner; max: false).
const uint EVERY_CELL = 0xFFFFFFFFu;

// Flat index f of a row-major box of sizes (n0, n1, n2) as (f0, f1, f2).
uvec3 unflatten(uint f, uint n1, uint n2) { return uvec3(f / (n1 * n2), (f / n2) % n1, f % n2); }

// Each kernel's: before the windows, what they share (max: the keys of X's footprint, or
// where the winners are stored); origin is the tile's first position, (n, c) its slice.
void tile_prepare(ivec3 origin, uint n, uint c);
// Window o (the tile's window w): whether it adds to any position, and the window cell
// (row-major index) whose position takes its term (EVERY_CELL: all it contains).
bool tile_window(uint w, ivec3 o, out uint winner);
// Window o's term (where tile_window said it adds).
float tile_term(uint dy_base, ivec3 o);

// Float16 tiles on halves (HALF_TERMS). Where windows do not overlap along any axis
// ((W - 1) D < S), a position lies in at most one window, so its sum is +0 or +0 + one term.
// Where that term is a float16 already (each kernel's TERMS_ARE_HALVES: max pooling's dY; the
// average's dY over a whole window of 2^k cells, an exact quotient), the tile works on dY's
// bits h: the kernel's half_term(h) is half_from_float(+0 + term), with no float arithmetic
// and no conversions. The same bits as the sums (tests/test_pooling_grad_tiles.py: every
// float16 as dY).
// (A chain of named constants and comparisons: with arithmetic such as a product or `%`, or a
// parenthesised `&&` or `||`, after `&&`, glslang 11 computes the condition at run time in the
// function that first reads it, which spirv-val rejects where another function reads it too.)
const uint SPAN0 = (WINDOW0 - 1u) * DILATIONS0;
const uint SPAN1 = (WINDOW1 - 1u) * DILATIONS1;
const uint SPAN2 = (WINDOW2 - 1u) * DILATIONS2;
const bool HALF_TERMS = IS_F16 && TERMS_ARE_HALVES && SPAN0 < STRIDES0 && SPAN1 < STRIDES1
    && SPAN2 < STRIDES2;
uint half_term(uint h);

// tile_window, and where the window adds, its term. (The float road computes the term within
// `adds`' condition: computed in a branch of its own after it, the float16 3x3 average's tiles
// took 80.6 us against 48.9 on an H200, and max pooling's float32 3x3 ones 98.2 against 93.2;
// the halves road the other way round, max pooling's float16 2x2 tiles 38.9 against 40.3:
// benchmarks/RESULTS.md, 2026-12-03 (evening).) The term comes first: max pooling's dY load
// is then in flight with its winner's byte, not after it (float16 3x3 87.3 -> 82.9 us;
// 2026-12-03 (late)); the window lies in dY, so the load is in bounds either way.
bool tile_window_term(uint w, ivec3 o, uint dy_base, out float term, out uint winner) {
    term = tile_term(dy_base, o);
    if (tile_window(w, o, winner)) return true;
    term = 0.0;
    return false;
}

// The tile's positions' sums (float32, from +0, terms in ascending window order), or with
// HALF_TERMS their float16 bits (`halves`; `sums` unset).
void tile_sums(ivec3 origin, ivec3 first_window, uint dy_base, out float sums[TILE_MAX_CELLS],
               out uint halves[TILE_MAX_CELLS]) {
    float terms[TILE_MAX_WINDOWS];
    uint half_terms[TILE_MAX_WINDOWS];
    uint winners[TILE_MAX_WINDOWS];
    bool adds[TILE_MAX_WINDOWS];
    const ivec3 out_size = ivec3(OUT0, OUT1, OUT2);
    [[unroll]] for (uint w = 0u; w < TILE_WINDOWS; ++w) {
        const ivec3 o = first_window + ivec3(unflatten(w, WINDOWS1, WINDOWS2));
        terms[w] = 0.0;
        half_terms[w] = 0u;
        winners[w] = EVERY_CELL;
#define IN_DY(o) (all(greaterThanEqual(o, ivec3(0))) && all(lessThan(o, out_size)))  // o is dY's
        if (HALF_TERMS) {
            adds[w] = IN_DY(o) && tile_window(w, o, winners[w]);
            if (adds[w]) half_terms[w] = half_term(HALF_BITS(dy, dy_offset(dy_base, uvec3(o))));
        } else {
            adds[w] = IN_DY(o) && tile_window_term(w, o, dy_base, terms[w], winners[w]);
        }
#undef IN_DY
    }
    const ivec3 stride = ivec3(STRIDES0, STRIDES1, STRIDES2);
    const ivec3 dilation = ivec3(DILATIONS0, DILATIONS1, DILATIONS2);
    const ivec3 window = ivec3(WINDOW0, WINDOW1, WINDOW2);
    const ivec3 reach0 = ivec3(START_PADDING0, START_PADDING1, START_PADDING2)
        - FIRST_WINDOW * stride;
    const ivec3 span = window_span();
    [[unroll]] for (uint k = 0u; k < TILE_CELLS; ++k) {
        const ivec3 kk = ivec3(unflatten(k, TILE1, TILE2));
        precise float acc = 0.0;
        halves[k] = 0u;
        [[unroll]] for (uint w = 0u; w < TILE_WINDOWS; ++w) {
            // Position k in window w: reach = k + P0 - (FIRST_WINDOW + w) S, on the window's
            // grid and within its span (constants once unrolled).
            const ivec3 reach = kk + reach0 - ivec3(unflatten(w, WINDOWS1, WINDOWS2)) * stride;
            if (any(lessThan(reach, ivec3(0))) || any(greaterThan(reach, span))
                || any(notEqual(reach % dilation, ivec3(0)))) continue;
            const ivec3 cell = reach / dilation;
            const uint own = uint((cell.x * window.y + cell.y) * window.z + cell.z);
            if (!adds[w] || !(EVERY_CELL_WINS || winners[w] == own)) continue;
            if (HALF_TERMS) {
                halves[k] = half_terms[w];  // this position's one window
            } else {
                acc = acc + terms[w];
            }
        }
        sums[k] = acc;
    }
}

// A tile row of 16 bytes (4 float32 or 8 float16 positions) laid out contiguously in dX, and
// whether the row at offset off, `left` positions of it dX's, is one aligned 16-byte store.
const bool ROW_VECTOR = TILE2 == (IS_F16 ? 8u : 4u) && DX_STRIDES4 == 1u;
#define WHOLE_ROW(off, left) (ROW_VECTOR && (left) >= int(TILE2) && ((off) & (TILE2 - 1u)) == 0u)
// The word of `halves`' positions i and i + 1.
#define HALF_PAIR(halves, i) ((halves)[i] | ((halves)[(i) + 1u] << 16u))

// The float16 bits of a tile row (positions k0 .. k0 + TILE2 - 1 of `halves`) into dX from
// offset off, the first `left` of them dX's: the row one 16-byte store where whole and
// aligned, pairs of one word one store, halves alone through STORE_HALF_BITS's atomics.
void store_row_halves(uint off, int left, uint halves[TILE_MAX_CELLS], uint k0) {
    if (WHOLE_ROW(off, left)) {
        uvec4 words;
        [[unroll]] for (uint j = 0u; j < 4u; ++j) words[j] = HALF_PAIR(halves, k0 + 2u * j);
        dx_uvec4[off / TILE2] = words;
        return;
    }
    [[unroll]] for (uint z = 0u; z < TILE2; ++z) {
        if (int(z) >= left) break;
        const uint at = off + z * DX_STRIDES4;
        if (DX_STRIDES4 == 1u && (TILE2 & 1u) == 0u) {
            // Positions z and z + 1 share a word when `at` is even and both are dX's.
            if ((z & 1u) != 0u) continue;  // the pair's second, stored with the first
            if ((at & 1u) == 0u && int(z) + 1 < left) {
                dx[at >> 1u] = HALF_PAIR(halves, k0 + z);
            } else {
                STORE_HALF_BITS(dx, at, halves[k0 + z]);
                if (int(z) + 1 < left) STORE_HALF_BITS(dx, at + 1u, halves[k0 + z + 1u]);
            }
        } else {
            STORE_HALF_BITS(dx, at, halves[k0 + z]);
        }
    }
}

// One row of the tile into dX: its positions k0 .. k0 + TILE2 - 1 of `sums` from offset off,
// the first `left` of them dX's. A whole row of 16 bytes (4 float32 or 8 float16) at an
// aligned offset is one vector store (dx_uvec4, each kernel's view of dx); float16 rounds
// once (a whole row through halves_from_floats8, else pairs through halves_from_floats) and
// goes through store_row_halves.
void store_tile_row(uint off, int left, float sums[TILE_MAX_CELLS], uint k0) {
    if (WHOLE_ROW(off, left)) {
        vec4 row[2] = vec4[2](vec4(0.0), vec4(0.0));
        [[unroll]] for (uint j = 0u; j < TILE2; ++j) {
            row[j >> 2u][j & 3u] = plus_zero_sum(sums[k0 + j]);
        }
        dx_uvec4[off / TILE2] = IS_F16 ? halves_from_floats8(row[0], row[1])
                                       : floatBitsToUint(row[0]);
        return;
    }
    if (!IS_F16) {
        [[unroll]] for (uint z = 0u; z < TILE2; ++z) {
            if (int(z) >= left) break;
            dx[off + z * DX_STRIDES4] = floatBitsToUint(plus_zero_sum(sums[k0 + z]));
        }
        return;
    }
    uint halves[TILE_MAX_CELLS];
    [[unroll]] for (uint z = 0u; z < TILE2; z += 2u) {
        if (z + 1u == TILE2) {
            halves[z] = half_from_float(plus_zero_sum(sums[k0 + z]));
        } else {
            const uint pair = halves_from_floats(vec2(plus_zero_sum(sums[k0 + z]),
                                                      plus_zero_sum(sums[k0 + z + 1u])));
            halves[z] = pair & 0xFFFFu;
            halves[z + 1u] = pair >> 16u;
        }
    }
    store_row_halves(off, left, halves, 0u);
}

void tile_main() {
    const ivec3 tile = ivec3(TILE0, TILE1, TILE2);
    const ivec3 size = ivec3(SIZES2, SIZES3, SIZES4);
    // V per axis: windows step by TILE / S from one tile to the next.
    const ivec3 windows_step = tile / ivec3(STRIDES0, STRIDES1, STRIDES2);
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        uint rest = e;
        ivec3 t;
        t.z = int(rest % TILES2); rest /= TILES2;
        t.y = int(rest % TILES1); rest /= TILES1;
        t.x = int(rest % TILES0); rest /= TILES0;
        const uint c = rest % SIZES1, n = rest / SIZES1;
        const ivec3 origin = t * tile;
        tile_prepare(origin, n, c);
        float sums[TILE_MAX_CELLS];
        uint halves[TILE_MAX_CELLS];
        tile_sums(origin, t * windows_step + FIRST_WINDOW,
                  n * DY_STRIDES0 + c * DY_STRIDES1, sums, halves);
        const uint base = n * DX_STRIDES0 + c * DX_STRIDES1 + uint(origin.x) * DX_STRIDES2
            + uint(origin.y) * DX_STRIDES3 + uint(origin.z) * DX_STRIDES4;
        [[unroll]] for (uint r = 0u; r < TILE0 * TILE1; ++r) {
            const ivec2 rr = ivec2(r / TILE1, r % TILE1);
            if (any(greaterThanEqual(origin.xy + rr, size.xy))) continue;
            const uint off = base + uint(rr.x) * DX_STRIDES2 + uint(rr.y) * DX_STRIDES3;
            if (HALF_TERMS) {
                store_row_halves(off, size.z - origin.z, halves, r * TILE2);
            } else {
                store_tile_row(off, size.z - origin.z, sums, r * TILE2);
            }
        }
    }
}

// Each kernel's: a pass of its own that this dispatch runs instead of the gather (max: the
// windows' winners, ARGMAX), true where it ran it.
bool own_pass();

void main() {
    if (own_pass()) return;
    if (TILED) {
        tile_main();
    } else {
        element_main();
    }
}
