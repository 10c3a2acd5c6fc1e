// DML_OPERATOR_MAX_POOLING_GRAD (max_pooling_grad): dY routed to each window's maximum,
// gathered (include/pooling_grad.glsl: the geometry, the summation order, the dispatches).
//
//   a(o)  = the real position of window o whose X is largest: ties to the first in the
//           window's row-major scan order (the lowest logical index); a NaN beats every
//           number and the first NaN wins; padding never wins
//   dX[p] = sum over the windows o with a(o) = p (ascending) of dY[o]
//
// X is compared through integer order keys of its bits (`order_key`: -0 as +0, every NaN the
// largest key), so the comparisons are exact and NaN-safe on every device; float16 X is keyed
// from its 16 bits. The element's own key decides: p is a(o) when every real position before
// it in window o has a smaller key and none after it a larger one. In the per-element gather
// each dX element rescans, for every window containing it, that window's X (up to
// prod(WINDOW) loads per window): the price of a gather without atomics or stored indices.
//
// Tiles with ARGMAX (the plan's choice where windows overlap): a first dispatch finds every
// window's winner once, by the same scan (`window_winner`), and stores it as a byte; the
// tiles then read the bytes instead of X's footprint (which a tile re-reads where tiles
// overlap, and whose keys cost it registers). The same winners, so the same bits.
//
// Constants: X_STRIDES (5 dimensions, in elements), ARGMAX, ARGMAX_ROWS, and
//   include/pooling_grad.glsl's.
// Bindings: x (InputTensor), dy (InputGradientTensor), dx (OutputGradientTensor; float16
//   stores through word atomics), accumulator (scratch, as in average_pooling_grad.comp),
//   window_winners (scratch: ARGMAX's bytes; 16 bytes where unused).
// Push constants (ARGMAX 1): count and first, the winners' words [first, count) of this
//   dispatch.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 0) readonly buffer X_UVEC4 { uvec4 x_uvec4[]; };  // the same
layout(set = 0, binding = 1) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 2) buffer DX { uint dx[]; };
layout(set = 0, binding = 2) buffer DX_UVEC4 { uvec4 dx_uvec4[]; };  // the same
layout(set = 0, binding = 3) buffer ACCUMULATOR { uint accumulator[]; };
layout(set = 0, binding = 4) buffer WINDOW_WINNERS { uint window_winners[]; };

// pooling_grad.glsl's tiles: only its winner; its term dY itself (HALF_TERMS: half_term).
#define EVERY_CELL_WINS false
#define TERMS_ARE_HALVES true
#include "pooling_grad.glsl"

DIMS5(X_STRIDES, 48)  // DEFAULT_ is 0 here
// ARGMAX: 0, the tiles (or the gather) find each window's winner from X; 1, this dispatch
// stores every window's winner into window_winners, byte e % 4 of word e / 4 for dY's
// element e (row-major over N, C and OUT): its window cell in row-major scan order, or
// NO_WINNER where every cell is padding; 2, the tiles read them.
layout(constant_id = 53) const uint ARGMAX = 0u;
const uint NO_WINNER = 0xFFu;  // (the plan uses ARGMAX where windows hold at most 64 cells)

uint x_slice_offset(uint n, uint c) { return n * X_STRIDES0 + c * X_STRIDES1; }

// The scans' rule (the tiles' and ARGMAX 1's): cells in row-major scan order, a strictly
// larger key taking over, so the first largest wins (a NaN's key is the largest: the first
// NaN; padding's key, 0, never).
void take_larger(uint key, uint f, inout uint best, inout uint winner) {
    if (key > best) {
        best = key;
        winner = f;
    }
}

// An order key of X's element at offset i: keys compare as the values do, with -0 = +0 and
// every NaN above every number (and equal to each other). A number of magnitude a keys as
// sign + a, or sign - a when negative (-0 and +0 both `sign`). Every key is above 0 (-Inf's
// is 0x800000, float16's 0x400), the tiles' key of padding.
uint key_of_bits(uint bits) {
    const uint sign = IS_F16 ? 0x8000u : 0x80000000u;
    const uint nan_above = IS_F16 ? 0x7C00u : 0x7F800000u;
    if ((bits & ~sign) > nan_above) return 0xFFFFFFFFu;
    // Negative: sign - a = 2 sign - bits (0 - bits for float32, in wrapping arithmetic).
    return (bits & sign) != 0u ? (sign << 1u) - bits : bits + sign;
}

uint order_key(uint i) { return key_of_bits(IS_F16 ? HALF_BITS(x, i) : x[i]); }

bool window_term(Element el, uvec3 o, out float term) {
    term = 0.0;
    const uvec3 stride = uvec3(STRIDES0, STRIDES1, STRIDES2);
    const uvec3 start = uvec3(START_PADDING0, START_PADDING1, START_PADDING2);
    const uvec3 dilation = uvec3(DILATIONS0, DILATIONS1, DILATIONS2);
    const uvec3 window = uvec3(WINDOW0, WINDOW1, WINDOW2);
    const uvec3 size = uvec3(SIZES2, SIZES3, SIZES4);
    // The element's place in the window: (i + P0 - o S) / D, on the window's grid or not.
    const uvec3 reach = el.i + start - o * stride;
    if (any(notEqual(reach % dilation, uvec3(0u)))) return false;
    const uvec3 k = reach / dilation;
    const uint own = (k.x * window.y + k.y) * window.z + k.z;
    const uvec3 xs = uvec3(X_STRIDES2, X_STRIDES3, X_STRIDES4);
    const uint key = order_key(el.x_base + el.i.x * xs.x + el.i.y * xs.y + el.i.z * xs.z);
    const uint cells = window.x * window.y * window.z;
    // The window's positions in row-major scan order, f = (f0, f1, f2) stepped with it.
    uvec3 f = uvec3(0u);
    for (uint t = 0u; t < cells; ++t) {
        const ivec3 p = ivec3(o * stride + f * dilation) - ivec3(start);
        if (t != own && all(greaterThanEqual(p, ivec3(0))) && all(lessThan(p, ivec3(size)))) {
            const uint other = order_key(el.x_base + uint(p.x) * xs.x + uint(p.y) * xs.y
                                         + uint(p.z) * xs.z);
            if (t < own ? other >= key : other > key) return false;
        }
        if (++f.z == window.z) {
            f.z = 0u;
            if (++f.y == window.y) {
                f.y = 0u;
                ++f.x;
            }
        }
    }
    term = LOAD(dy, dy_offset(el.dy_base, o));
    return true;
}

// Tiles: X's footprint, the positions the tile's windows cover, FOOT_d = (WINDOWS_d - 1) S_d
// + (W_d - 1) D_d + 1 per axis from the first window's start; its keys are loaded once, 0 for
// padding (below every real key: padding never wins), and each window's argmax found once.
#define TILE_MAX_FOOTPRINT 64
// Scalar specialization-constant expressions (the validation layer mishandles vector ones:
// pooling_grad.glsl's window_span), so that the driver sees the unrolled loops' bounds and
// tile_keys' indices as constants and keeps tile_keys in registers: built at run time
// instead, the float16 3x3 stride-2 tiles ran 29% slower on an H200.
const uint FOOT0 = (WINDOWS0 - 1u) * STRIDES0 + (WINDOW0 - 1u) * DILATIONS0 + 1u;
const uint FOOT1 = (WINDOWS1 - 1u) * STRIDES1 + (WINDOW1 - 1u) * DILATIONS1 + 1u;
const uint FOOT2 = (WINDOWS2 - 1u) * STRIDES2 + (WINDOW2 - 1u) * DILATIONS2 + 1u;
const uint FOOT_CELLS = FOOT0 * FOOT1 * FOOT2;
uint tile_keys[TILE_MAX_FOOTPRINT];
uint winner_base;  // ARGMAX 2: the tile's slice's first winner
// ARGMAX 2: the index in window_winners (row-major over dY) of the tile slice's window (x, y, z).
#define WINNER_INDEX(x, y, z) (winner_base + (uint(x) * OUT1 + uint(y)) * OUT2 + uint(z))
// ARGMAX 2 by words (WINNER_WORDS): where each row of a tile's windows starts on a word of
// window_winners (windows step by a multiple of 4 along the last axis from 0, OUT2 % 4 = 0,
// and dY's rows start on words) and holds at most 8 windows, the row's bytes are its first
// two words, loaded once per row instead of one word per window (float16 3x3 stride 2: 4
// loads a tile instead of 10). The plan gives window_winners a word past its last, which the
// second word of the last row's windows past OUT2 may read (the windows outside dY, unused).
const uint WINDOWS_STEP2 = TILE2 / STRIDES2;
const uint WINDOWS_STEP2_REST = WINDOWS_STEP2 % 4u;
const uint OUT2_REST = OUT2 % 4u;
const bool WINNER_WORDS = ARGMAX == 2u && WINDOWS_STEP2_REST == 0u && WINDOWS_BEHIND2 == 0u
    && OUT2_REST == 0u && WINDOWS2 <= 8u;
uvec2 winner_rows[TILE_MAX_WINDOWS];  // WINNER_WORDS: each window row's two words
const uint VECTOR = IS_F16 ? 8u : 4u;  // elements in 16 bytes
// Element k of a 16-byte vector of X's words: its bits.
uint vector_bits(uvec4 words, uint k) {
    return IS_F16 ? (words[k >> 1u] >> (16u * (k & 1u))) & 0xFFFFu : words[k];
}
// Footprint rows of one 16-byte vector (the 2x2 stride-2 tiles): X's rows packed and every
// footprint row's offset a multiple of the vector's from the first's, so where the first
// starts on a vector each row is one vector load.
const bool KEY_VECTORS = FOOT2 == VECTOR && X_STRIDES4 == 1u && X_STRIDES3 % VECTOR == 0u
    && (FOOT0 == 1u || X_STRIDES2 % VECTOR == 0u);

void tile_prepare(ivec3 origin, uint n, uint c) {
    if (ARGMAX == 2u) {
        winner_base = (n * SIZES1 + c) * (OUT0 * OUT1 * OUT2);  // row-major over dY
        if (!WINNER_WORDS) return;
        // The tile's first window o0 = origin / S (FIRST_WINDOW is 0 along the last axis).
        // Rows outside dY, or whose windows all lie past OUT2, are not loaded: a row's first
        // word then lies in dY's row, and the second at most one word past it.
        const ivec3 o0 = origin / ivec3(STRIDES0, STRIDES1, STRIDES2) + FIRST_WINDOW;
        [[unroll]] for (uint r = 0u; r < WINDOWS0 * WINDOWS1; ++r) {
            const ivec2 o = o0.xy + ivec2(r / WINDOWS1, r % WINDOWS1);
            winner_rows[r] = uvec2(0u);
            if (o.x < 0 || o.x >= int(OUT0) || o.y < 0 || o.y >= int(OUT1)
                || o0.z >= int(OUT2)) continue;
            const uint word = WINNER_INDEX(o.x, o.y, o0.z) >> 2u;
            winner_rows[r] = uvec2(window_winners[word],
                                   WINDOWS2 > 4u ? window_winners[word + 1u] : 0u);
        }
        return;
    }
    const uint x_base = x_slice_offset(n, c);
    const ivec3 start = origin + FIRST_WINDOW * ivec3(STRIDES0, STRIDES1, STRIDES2)
        - ivec3(START_PADDING0, START_PADDING1, START_PADDING2);
    const ivec3 size = ivec3(SIZES2, SIZES3, SIZES4);
    const uint first = x_base + uint(start.x) * X_STRIDES2 + uint(start.y) * X_STRIDES3
        + uint(start.z) * X_STRIDES4;  // wraps where start < 0: used only inside X
    ivec3 end = start;  // (component by component: no vector of specialization constants)
    end.x += int(FOOT0);
    end.y += int(FOOT1);
    end.z += int(FOOT2);
    if (all(greaterThanEqual(start, ivec3(0))) && all(lessThanEqual(end, size))) {
        // Inside X (most tiles): no position tests, offsets constant from `first`.
        if (KEY_VECTORS && (first & (VECTOR - 1u)) == 0u) {
            [[unroll]] for (uint r = 0u; r < FOOT0 * FOOT1; ++r) {
                const uvec4 words = x_uvec4[(first + (r / FOOT1) * X_STRIDES2
                                             + (r % FOOT1) * X_STRIDES3) / VECTOR];
                [[unroll]] for (uint k = 0u; k < VECTOR; ++k) {
                    tile_keys[r * VECTOR + k] = key_of_bits(vector_bits(words, k));
                }
            }
            return;
        }
        [[unroll]] for (uint f = 0u; f < FOOT_CELLS; ++f) {
            const uvec3 q = unflatten(f, FOOT1, FOOT2);
            tile_keys[f] = order_key(first + q.x * X_STRIDES2 + q.y * X_STRIDES3
                                     + q.z * X_STRIDES4);
        }
        return;
    }
    [[unroll]] for (uint f = 0u; f < FOOT_CELLS; ++f) {
        const ivec3 p = start + ivec3(unflatten(f, FOOT1, FOOT2));
        tile_keys[f] = all(greaterThanEqual(p, ivec3(0))) && all(lessThan(p, size))
            ? order_key(x_base + uint(p.x) * X_STRIDES2 + uint(p.y) * X_STRIDES3
                        + uint(p.z) * X_STRIDES4)
            : 0u;
    }
}

bool tile_window(uint w, ivec3 o, out uint winner) {
    if (WINNER_WORDS) {
        const uint j = w % WINDOWS2;  // the window's byte in its row's words
        const uvec2 words = winner_rows[w / WINDOWS2];
        winner = ((j < 4u ? words.x : words.y) >> (8u * (j & 3u))) & 0xFFu;
        return winner != NO_WINNER;
    }
    if (ARGMAX == 2u) {
        const uint e = WINNER_INDEX(o.x, o.y, o.z);
        winner = (window_winners[e >> 2u] >> (8u * (e & 3u))) & 0xFFu;
        return winner != NO_WINNER;
    }
    // The window's cells through take_larger.
    const uvec3 from = unflatten(w, WINDOWS1, WINDOWS2) * uvec3(STRIDES0, STRIDES1, STRIDES2);
    const uvec3 dilation = uvec3(DILATIONS0, DILATIONS1, DILATIONS2);
    uint best = 0u;
    winner = EVERY_CELL;
    [[unroll]] for (uint f = 0u; f < WINDOW0 * WINDOW1 * WINDOW2; ++f) {
        const uvec3 q = from + unflatten(f, WINDOW1, WINDOW2) * dilation;
        take_larger(tile_keys[(q.x * FOOT1 + q.y) * FOOT2 + q.z], f, best, winner);
    }
    return best != 0u;  // else every cell padding
}

float tile_term(uint dy_base, ivec3 o) { return LOAD(dy, dy_offset(dy_base, uvec3(o))); }

// HALF_TERMS: half_from_float(+0 + dY) from dY's float16 bits h: h itself, but +0 for -0 and
// dY's sign | 0x7E00 for a NaN (the float road's +0 + NaN takes the device's sign for it:
// outside the contract, docs/semantics.md §17).
uint half_term(uint h) {
    const uint magnitude = h & 0x7FFFu;
    return magnitude > 0x7C00u ? (h & 0x8000u) | 0x7E00u : (magnitude == 0u ? 0u : h);
}

// ARGMAX 1: the winner of the window starting at s (s = o S - P0 per axis) in X's slice at
// x_base: its real cells through take_larger. `checked`: test each cell against X's bounds
// (a window inside X needs none); its cells' offsets are constants from its first.
uint window_winner(uint x_base, ivec3 s, bool checked) {
    const ivec3 size = ivec3(SIZES2, SIZES3, SIZES4);
    const ivec3 dilation = ivec3(DILATIONS0, DILATIONS1, DILATIONS2);
    // (Wraps where s < 0; origin plus cell q's offset is still p = s + q's, modulo 2^32.)
    const uint origin = x_base + uint(s.x) * X_STRIDES2 + uint(s.y) * X_STRIDES3
        + uint(s.z) * X_STRIDES4;
    uint best = 0u, winner = NO_WINNER;
    [[unroll]] for (uint f = 0u; f < WINDOW0 * WINDOW1 * WINDOW2; ++f) {
        const ivec3 q = ivec3(unflatten(f, WINDOW1, WINDOW2)) * dilation;
        const ivec3 p = s + q;
        if (!checked || (all(greaterThanEqual(p, ivec3(0))) && all(lessThan(p, size)))) {
            take_larger(order_key(origin + uint(q.x) * X_STRIDES2 + uint(q.y) * X_STRIDES3
                                  + uint(q.z) * X_STRIDES4), f, best, winner);
        }
    }
    return winner;
}

// ARGMAX 1 by rows (ARGMAX_ROWS, where X's rows are whole 16-byte vectors: the common 3x3
// stride-2 poolings): the 4 windows of a word lie in one row of dY (OUT2 % 4 = 0), and
// their cells in one X row are the span [s, s + 3 S + (W - 1) D] from the first window's
// start s, which starts ROW_LEAD elements into a 16-byte vector (4 S and P0 + ROW_LEAD whole
// vectors). So the word loads each X row it scans once, as ROW_VECTORS vector loads, instead
// of every window its own cells one by one (36 loads for 4 3x3 windows, 9 vectors here): its
// keys once, a vector outside X all padding (rows start on vectors and hold whole ones, so a
// vector lies wholly inside or outside its row). Each window still takes its cells in its
// row-major scan order, rows outer: the same winners.
const uint ROW_LEAD = (VECTOR - START_PADDING2 % VECTOR) % VECTOR;
const uint ROW_VECTORS = (ROW_LEAD + 3u * STRIDES2 + (WINDOW2 - 1u) * DILATIONS2 + VECTOR)
    / VECTOR;
#define ROW_MAX_VECTORS 4
// The plan sets ARGMAX_ROWS only where X is laid out so (max_pooling_grad.py: argmax_rows):
// rows (X_STRIDES4 1) starting on vectors (X_STRIDES0-3 and SIZES4 multiples of VECTOR),
// OUT2 % 4 = 0, 4 S2 a multiple of VECTOR and ROW_VECTORS <= ROW_MAX_VECTORS.
layout(constant_id = 54) const bool ARGMAX_ROWS = false;

// The word of the 4 windows from the one starting at s in X's slice at x_base (ARGMAX_ROWS).
uint row_winners(uint x_base, ivec3 s) {
    const int first_column = s.z - int(ROW_LEAD);  // a multiple of VECTOR (floor)
    uint best[4], winner[4];
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
        best[j] = 0u;
        winner[j] = NO_WINNER;
    }
    [[unroll]] for (uint r = 0u; r < WINDOW0 * WINDOW1; ++r) {
        const int px = s.x + int((r / WINDOW1) * DILATIONS0);
        const int py = s.y + int((r % WINDOW1) * DILATIONS1);
        const bool row_inside = px >= 0 && px < int(SIZES2) && py >= 0 && py < int(SIZES3);
        const uint row = x_base + uint(px) * X_STRIDES2 + uint(py) * X_STRIDES3;
        uint keys[ROW_MAX_VECTORS * 8];
        [[unroll]] for (uint v = 0u; v < ROW_VECTORS; ++v) {
            const int column = first_column + int(v * VECTOR);
            const bool inside = row_inside && column >= 0
                && column + int(VECTOR) <= int(SIZES4);
            uvec4 words = uvec4(0u);
            if (inside) words = x_uvec4[(row + uint(column)) / VECTOR];
            [[unroll]] for (uint k = 0u; k < VECTOR; ++k) {
                // 0: padding
                keys[v * VECTOR + k] = inside ? key_of_bits(vector_bits(words, k)) : 0u;
            }
        }
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            [[unroll]] for (uint f = 0u; f < WINDOW2; ++f) {
                take_larger(keys[ROW_LEAD + j * STRIDES2 + f * DILATIONS2], r * WINDOW2 + f,
                            best[j], winner[j]);
            }
        }
    }
    return winner[0] | (winner[1] << 8u) | (winner[2] << 16u) | (winner[3] << 24u);
}

// ARGMAX 1: word i of window_winners, the winners of dY's elements 4i .. 4i + 3 (row-major
// over N, C and OUT: the coordinates of the first, then stepped).
bool own_pass() {
    if (ARGMAX != 1u) return false;
    const uint windows = SIZES0 * SIZES1 * OUT0 * OUT1 * OUT2;  // dY's elements, < 2^31
    const ivec3 stride = ivec3(STRIDES0, STRIDES1, STRIDES2);
    const ivec3 start = ivec3(START_PADDING0, START_PADDING1, START_PADDING2);
    const ivec3 last = ivec3(SIZES2, SIZES3, SIZES4) - window_span();  // inside: s <= last - 1
    GRID_STRIDE_LOOP_FROM(i, first, count) {
        uint rest = 4u * i;
        uvec3 o;
        o.z = rest % OUT2; rest /= OUT2;
        o.y = rest % OUT1; rest /= OUT1;
        o.x = rest % OUT0; rest /= OUT0;
        uint c = rest % SIZES1, n = rest / SIZES1;
        if (ARGMAX_ROWS) {
            window_winners[i] = row_winners(x_slice_offset(n, c), ivec3(o) * stride - start);
            continue;
        }
        uint word = 0u;
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            if (4u * i + j >= windows) break;
            const uint x_base = x_slice_offset(n, c);
            const ivec3 s = ivec3(o) * stride - start;
            const bool inside = all(greaterThanEqual(s, ivec3(0))) && all(lessThan(s, last));
            word |= (inside ? window_winner(x_base, s, false)
                            : window_winner(x_base, s, true)) << (8u * j);
            // The next element's coordinates, row-major.
            if (++o.z == OUT2) {
                o.z = 0u;
                if (++o.y == OUT1) {
                    o.y = 0u;
                    if (++o.x == OUT0) {
                        o.x = 0u;
                        if (++c == SIZES1) {
                            c = 0u;
                            ++n;
                        }
                    }
                }
            }
        }
        window_winners[i] = word;
    }
    return true;
}
