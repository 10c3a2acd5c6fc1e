// DML_OPERATOR_AVERAGE_POOLING_GRAD (average_pooling_grad): the transpose of average pooling,
// gathered (include/pooling_grad.glsl: the geometry, the summation order, the dispatches).
//
//   dX[p] = sum over the windows o that contain p (ascending) of dY[o] / count(o)
//   count(o) = prod_d count_d(o),  with s = o S - P0 the window's start along axis d:
//     INCLUDE_PADDING: min(s + W, In + P1) - s   (positions inside the padded extent)
//     otherwise:       min(s + W, In) - max(s, 0) (real positions)
//
// The division is correctly rounded (`div_count`: cr_div's bits,
// include/correctly_rounded.glsl), the count an exact integer (the plan keeps the window's
// size below 2^24), the sum float32 in ascending output order, so the same bits on every
// device; float16 dY widens exactly and each dX rounds once (half_from_float). A window with
// no real element contains no dX element: it adds nothing.
//
// Constants: INCLUDE_PADDING, WHOLE_WINDOWS, RECIPROCAL, and include/pooling_grad.glsl's.
// Bindings: dy (InputGradientTensor), dx (OutputGradientTensor; float16 stores through word
//   atomics), accumulator (scratch: the running sums between dispatches, one float32 per dX
//   element; a word where the plan runs one dispatch per element).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "correctly_rounded.glsl"

layout(set = 0, binding = 0) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 1) buffer DX { uint dx[]; };
layout(set = 0, binding = 1) buffer DX_UVEC4 { uvec4 dx_uvec4[]; };  // the same
layout(set = 0, binding = 2) buffer ACCUMULATOR { uint accumulator[]; };

// The plan's: every window's count is WINDOW_CELLS (no count computed), and the float32 bits
// of 1 / WINDOW_CELLS rounded to nearest even (average_pooling_grad.py: whole_windows,
// reciprocal_bits).
layout(constant_id = 49) const bool WHOLE_WINDOWS = false;
layout(constant_id = 50) const uint RECIPROCAL = 0x3F800000u;

// pooling_grad.glsl's tiles: every position a window contains takes its term; a whole
// window of 2^k cells divides a float16 dY exactly (HALF_TERMS: half_term).
#define EVERY_CELL_WINS true
#define TERMS_ARE_HALVES WHOLE_WINDOWS && WINDOW_CELLS_POWER_OF_TWO  // (no parentheses)
#include "pooling_grad.glsl"

layout(constant_id = 48) const bool INCLUDE_PADDING = false;

uint x_slice_offset(uint n, uint c) { return 0u; }

// The divisor's factor along one axis for a window starting at s (an int: it may lie in
// the start padding). Only windows with a real element come here, so it is >= 1.
uint axis_count(int s, uint window, uint size, uint end_padding) {
    const int end = s + int(window);
    return INCLUDE_PADDING ? uint(min(end, int(size + end_padding)) - s)
                           : uint(min(end, int(size)) - max(s, 0));
}

// floor(n / d) for d in [1, 128] without an integer division by a variable (a long sequence
// on a GPU, a scalar loop on a CPU's vector lanes): a float estimate within 2^11 of it, a float
// step on the exact remainder to within 1, and one exact step.
uint quotient(uint n, uint d) {
    uint q = uint(min(float(n) / float(d), 4294967040.0));  // below 2^32 (d = 1)
    int r = int(n - q * d);  // |r| < 2^11 d: exact in wrapping 32-bit arithmetic
    const int step = int(floor(float(r) / float(d)));
    q += uint(step);
    r -= step * int(d);
    return r < 0 ? q - 1u : (r >= int(d) ? q + 1u : q);
}

// v / count correctly rounded: cr_div(v, float(count))'s bits (div_count's other roads).
// - Zeros, Inf and NaN as cr_div gives them (+-0, +-Inf, 0x7FC00000).
// - A normal v over a power of two with a normal quotient: the exponent less k (exact).
// - Otherwise, for a count up to 128, the quotient of v's significand in 32-bit integers (a
//   division by a specialization constant where count is a whole window's, which the
//   compiler makes a multiplication): v = m 2^(b - 150) with m in [2^23, 2^24) (b the biased
//   exponent; a subnormal v's fraction shifted up to m, b = 1 - shift), so n = m 2^8 is below
//   2^32 and q = floor(n / count) at least 2^24; q's bits past its 25th and the remainder are
//   the sticky bit of cr_round's rounding, as in cr_div (subnormal quotients included).
// - A count above 128 only where a window has more cells: cr_div itself. Where no window has
//   more than 128 cells, such a count is 0 or wrapped: a window all padding, in a tile, whose
//   term lands only on padding cells, never stored (wrapped counts from 1 to 128 take the
//   integer road, as unused); it gives v, and the kernel carries no general division (half
//   the code on an H200, 1-3% faster: benchmarks/RESULTS.md, 2026-12-03 (later)).
float div_count_of(float v, uint count) {
    const uint u = floatBitsToUint(v), magnitude = u & 0x7FFFFFFFu, biased = magnitude >> 23;
    if (count - 1u >= 128u) return WINDOW_CELLS > 128u ? cr_div(v, float(count)) : v;
    if (magnitude >= 0x7F800000u) {
        return magnitude > 0x7F800000u ? uintBitsToFloat(0x7FC00000u) : v;
    }
    if (magnitude == 0u) return v;
    if ((count & (count - 1u)) == 0u && biased > uint(findLSB(count))) {
        return uintBitsToFloat(u - (uint(findLSB(count)) << 23u));  // 2^k: exact, normal
    }
    // (cr_unpack's normalisation, written out: with cr_unpack called here the Khronos
    // validation layer 1.3.239's SPIR-V folding reports the specialised module invalid,
    // VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719)
    const int shift = biased == 0u ? 23 - findMSB(magnitude) : 0;
    const uint n = (biased == 0u ? magnitude << uint(shift)
                                 : (magnitude & 0x7FFFFFu) | 0x800000u) << 8u;
    const uint q = count == WINDOW_CELLS ? n / WINDOW_CELLS : quotient(n, count);
    const uint extra = uint(findMSB(q)) - 24u;  // q in [2^24, 2^32)
    const bool sticky = n != q * count || (q & ((1u << extra) - 1u)) != 0u;
    // |v| / count = (m + f) 2^e: m = q >> extra in [2^24, 2^25), e = b - 150 - 8 + extra.
    const uint m = q >> extra;
    const int e = (biased == 0u ? 1 - shift : int(biased)) - 158 + int(extra);
    if (e < -150) return uintBitsToFloat((u & 0x80000000u) | cr_round(m, e, sticky));
    // A normal quotient (cr_round's rounding with one bit below the last place): the last bit
    // of m rounds, to even where nothing is past it.
    const uint kept = (m >> 1u) + ((m & 1u) != 0u && (sticky || (m & 2u) != 0u) ? 1u : 0u);
    return uintBitsToFloat((u & 0x80000000u) | ((uint(e + 150) << 23u) + kept));
}

// The whole window's count d (WHOLE_BY_RECIPROCAL: not a power of two, at most 128, the
// common case): q0 = |v| * RECIPROCAL, one product, lies within 2 units of q0's last place
// from |v| / d (RECIPROCAL's half unit, and the product's rounding: Vulkan fixes the direction
// only under a RoundingModeRTE execution mode; to nearest, within 1.5 units). The exact
// remainder in those units, r = m 2^(ev - eq) - mq d in 32-bit integers (m, mq: v's and q0's
// significands; ev, eq: their biased exponents; ev - eq <= 8 for d <= 128), decides: one
// step up where 2r > d, down where 2r < -d (no quotient lies half-way: d is not a power of
// two). Where one step may not be enough (|2r| >= 3d: never when the product rounds to
// nearest) or the quotient lies below a q0 that is a power of two (finer units below it), and
// for a q0 outside binades 2 to 254 (zero and subnormal v below them: 0 < 1/d < 1/2; infinite
// and NaN v above), div_count_of decides. Otherwise the quotient lies within 1.5 units of q0,
// where the floats are q0's units apart (above the next power of two, no nearer float than
// it), so the step gives its correct rounding whatever q0 was.
// benchmarks/investigations/pooling_division.py checks the road for every such d and every
// significand, the product rounded to nearest, up and down.
//
// A float16 dY over such a d takes integers alone (HALF_BY_INTEGERS): |dY| = m 2^(b - 137)
// with m < 2^11, its significand's first 11 bits (a float16 widens to a normal float32 whose
// significand's last 13 bits are 0, a subnormal half's too), b its float32 biased exponent.
// With 2^(c - 1) < d < 2^c, n = m 2^s (s = 12 + c, or 13 + c where m < d 2^(11 - c)) puts
// n / d in [2^23, 2^24) and 2n + d below 2^32, so q = floor((2n + d) / 2d), one division by
// a constant (a product and a shift), is n / d rounded to nearest: no such quotient lies
// half-way (where d's odd factor divides m, n / d is an integer; else it is no dyadic
// fraction). The quotient is q at exponent b + 12 - s, always a normal float32. Its zeros,
// Inf and NaN are div_count_of's at once (v itself; the NaN 0x7FC00000), so that the float16
// kernel carries neither the reciprocal's road nor div_count_of for each tile window (binary
// 53.6 -> 38.9 KB, 3x3 tiles 48.8 -> 47.4 us on an H200: benchmarks/RESULTS.md,
// 2026-12-03 (late)).
const bool WHOLE_BY_RECIPROCAL = WINDOW_CELLS <= 128u && !WINDOW_CELLS_POWER_OF_TWO;

float div_count(float v, uint count) {
    if (WHOLE_BY_RECIPROCAL && count == WINDOW_CELLS) {
        const uint u = floatBitsToUint(v), a = u & 0x7FFFFFFFu;  // |v|
        if (IS_F16 && a - 1u < 0x7F7FFFFFu) {  // HALF_BY_INTEGERS: nonzero and finite
            const uint c = uint(findMSB(WINDOW_CELLS)) + 1u;
            const uint m = ((a & 0x7FFFFFu) | 0x800000u) >> 13u;
            const uint s = m < (WINDOW_CELLS << (11u - c)) ? 13u + c : 12u + c;
            const uint q = ((m << s) * 2u + WINDOW_CELLS) / (2u * WINDOW_CELLS);
            return uintBitsToFloat((u & 0x80000000u) | ((((a >> 23u) + 12u - s) << 23u) + q));
        }
        if (IS_F16) return a > 0x7F800000u ? uintBitsToFloat(0x7FC00000u) : v;
        precise float q0 = uintBitsToFloat(a) * uintBitsToFloat(RECIPROCAL);
        const uint bits = floatBitsToUint(q0), eq = bits >> 23;
        const uint mq = (bits & 0x7FFFFFu) | 0x800000u;
        const int r = int((((a & 0x7FFFFFu) | 0x800000u) << ((a >> 23) - eq)) - mq * WINDOW_CELLS);
        const bool up = 2 * r > int(WINDOW_CELLS), down = 2 * r < -int(WINDOW_CELLS);
        if (eq - 2u < 253u && abs(2 * r) < 3 * int(WINDOW_CELLS) && !(r < 0 && mq == 0x800000u)) {
            const uint step = up ? 1u : (down ? 0xFFFFFFFFu : 0u);  // +1, -1 or 0
            return uintBitsToFloat((u & 0x80000000u) | (bits + step));
        }
    }
    return div_count_of(v, count);
}

// Window o's term: dY[o] / count(o).
float average_term(uint dy_base, uvec3 o) {
    const ivec3 s = ivec3(o * uvec3(STRIDES0, STRIDES1, STRIDES2))
        - ivec3(START_PADDING0, START_PADDING1, START_PADDING2);
    const uint count = WHOLE_WINDOWS ? WINDOW_CELLS
        : axis_count(s.x, WINDOW0, SIZES2, END_PADDING0)
            * axis_count(s.y, WINDOW1, SIZES3, END_PADDING1)
            * axis_count(s.z, WINDOW2, SIZES4, END_PADDING2);
    return div_count(LOAD(dy, dy_offset(dy_base, o)), count);
}

bool window_term(Element el, uvec3 o, out float term) {
    term = average_term(el.dy_base, o);
    return true;
}

void tile_prepare(ivec3 origin, uint n, uint c) {}

bool own_pass() { return false; }

bool tile_window(uint w, ivec3 o, out uint winner) {
    winner = EVERY_CELL;
    return true;
}

float tile_term(uint dy_base, ivec3 o) { return average_term(dy_base, uvec3(o)); }

// HALF_TERMS (a whole window of 2^k cells): half_from_float(+0 + dY / 2^k) from dY's float16
// bits h. The quotient is exact in float32. Where it is a normal half, that is h with an
// exponent k lower. Below, it is m 2^-24 / 2^k (m 2^-24 is |dY|: a subnormal h's fraction,
// else its significand shifted), rounded to a subnormal half by integers, to nearest even,
// with dY's sign (a zero so rounded keeps it, as half_from_float's does). +-0 give +0 (the
// sum from +0), Inf stays, a NaN gives 0x7E00 (div_count's NaN is 0x7FC00000).
uint half_term(uint h) {
    const uint k = uint(findLSB(WINDOW_CELLS)), magnitude = h & 0x7FFFu, e = magnitude >> 10u;
    if (magnitude >= 0x7C00u) return magnitude > 0x7C00u ? 0x7E00u : h;
    if (e > k) return h - (k << 10u);
    if (magnitude == 0u) return 0u;
    const uint m = e == 0u ? magnitude : ((magnitude & 0x3FFu) | 0x400u) << (e - 1u);
    const uint q = k == 0u ? m : (m + (1u << (k - 1u)) - 1u + ((m >> k) & 1u)) >> k;
    return (h & 0x8000u) | q;
}
