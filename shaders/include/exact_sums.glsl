// Exact sums of float32 values: the result does not depend on the order of the terms, so it is
// the same bits for any subgroup size, workgroup width or plan (docs/semantics.md §17).
//
// A sum is kept as EXACT_DIGITS signed 32-bit digits of radix 2^16, digit i weighing
// 2^(16 i - 149): every finite float32 is an integer multiple of 2^-149 (the smallest
// subnormal), below 2^128, so its exact value is an integer combination of digits. Integer
// addition is exact and associative, so lanes, subgroups and workgroups may add digits in any
// order. Non-finite terms set flags (NaN, +Inf, -Inf) that are ORed instead.
//
// A lane does not touch the digits for every term: it keeps an ExactWindow, a signed 96-bit
// integer W (w.x lowest word, two's complement) times 2^(anchor - 149), into which a term of
// significand m < 2^24 at bit p (its value m 2^(p - 149)) adds m << (p - anchor), exactly,
// while 0 <= p - anchor <= WINDOW_SPAN. A term outside the window flushes it into the digits
// (exact_flush) and re-anchors at the term. |W| < 2^(24 + WINDOW_SPAN) per term, so up to
// 2^16 terms fit in 96 bits between flushes.
//
// The including kernel defines EXACT_SLOTS (the number of sums a workgroup keeps) before
// including this; the digits of slot s are exact_digits[s * EXACT_DIGITS ...]. A flush adds
// 7 pieces of at most 2^16 each, so a digit takes at least 32768 flushes before its 32-bit
// integer could overflow: the plans bound flushes per workgroup and slot below that, and
// normalise (exact_normalize) before adding workgroups' digits together.

const uint EXACT_DIGITS = 24u;
const uint EXACT_NAN = 1u, EXACT_POS_INF = 2u, EXACT_NEG_INF = 4u;
const int WINDOW_SPAN = 55;
const int EMPTY_ANCHOR = -1000;  // no window yet: every term re-anchors

shared int exact_digits[EXACT_SLOTS * EXACT_DIGITS];
shared uint exact_flags[EXACT_SLOTS];

struct ExactWindow {
    uvec3 w;
    int anchor;
    uint flags;
};

ExactWindow exact_empty() { return ExactWindow(uvec3(0u), EMPTY_ANCHOR, 0u); }

// Zero the workgroup's digits and flags; every invocation calls it, a barrier must follow.
void exact_clear() {
    for (uint i = gl_LocalInvocationIndex; i < EXACT_SLOTS * EXACT_DIGITS; i += WG) {
        exact_digits[i] = 0;
    }
    for (uint i = gl_LocalInvocationIndex; i < EXACT_SLOTS; i += WG) exact_flags[i] = 0u;
}

// Add the window's value into slot `slot`'s digits and empty it: W << (anchor % 16) as six
// unsigned 16-bit pieces and a signed top piece, at digit anchor / 16 upwards.
void exact_flush(inout ExactWindow a, uint slot) {
    if (a.w == uvec3(0u)) return;
    const uint o = uint(a.anchor) & 15u, base = slot * EXACT_DIGITS + (uint(a.anchor) >> 4);
    const uint back = 32u - o;  // o = 0 shifts nothing in from below
    const uint s0 = a.w.x << o;
    const uint s1 = (a.w.y << o) | (o == 0u ? 0u : a.w.x >> back);
    const uint s2 = (a.w.z << o) | (o == 0u ? 0u : a.w.y >> back);
    const int s3 = o == 0u ? int(a.w.z) >> 31 : int(a.w.z) >> back;
    const uint pieces[6] = uint[6](s0 & 0xFFFFu, s0 >> 16, s1 & 0xFFFFu, s1 >> 16,
                                   s2 & 0xFFFFu, s2 >> 16);
    for (uint i = 0u; i < 6u; ++i) {
        if (pieces[i] != 0u) atomicAdd(exact_digits[base + i], int(pieces[i]));
    }
    if (s3 != 0) atomicAdd(exact_digits[base + 6u], s3);
    a.w = uvec3(0u);
}

// Add float32 x to the window (slot `slot` takes a flush when x lies outside it).
void exact_add(inout ExactWindow a, float x, uint slot) {
    const uint u = floatBitsToUint(x), magnitude = u & 0x7FFFFFFFu;
    if (magnitude == 0u) return;
    if (magnitude >= 0x7F800000u) {
        a.flags |= magnitude > 0x7F800000u ? EXACT_NAN
                                           : ((u >> 31) != 0u ? EXACT_NEG_INF : EXACT_POS_INF);
        return;
    }
    // x = m 2^(p - 149): the biased exponent less one, 0 for subnormals (and the smallest
    // normals), whose significand has no implicit 1.
    const uint biased = magnitude >> 23;
    const uint m = (magnitude & 0x7FFFFFu) | (biased != 0u ? 0x800000u : 0u);
    const int p = int(max(biased, 1u)) - 1;
    int shift = p - a.anchor;
    if (shift < 0 || shift > WINDOW_SPAN) {
        exact_flush(a, slot);
        a.anchor = max(p - 32, 0);  // room for terms 2^32 smaller and 2^23 larger
        shift = p - a.anchor;
    }
    // v = m << shift (shift in [0, WINDOW_SPAN]) as 96 bits, and W += v, or W += ~v + 1 (that
    // is, W -= v) for a negative x: selects rather than branches, so that lanes whose terms
    // differ in sign or position do not diverge.
    const uint within = uint(shift) & 31u;
    const uint low = m << within, high = within == 0u ? 0u : m >> (32u - within);
    uvec3 v = shift < 32 ? uvec3(low, high, 0u) : uvec3(0u, low, high);
    const bool negative = (u >> 31) != 0u;
    v = negative ? ~v : v;
    uint c0, c1, c2, c3;
    uint w0 = uaddCarry(a.w.x, v.x, c0);
    a.w.x = uaddCarry(w0, negative ? 1u : 0u, c1);
    uint w1 = uaddCarry(a.w.y, v.y, c2);
    a.w.y = uaddCarry(w1, c0 + c1, c3);  // c0 + c1 <= 1: x + v overflowing leaves room for + 1
    a.w.z = a.w.z + v.z + c2 + c3;
}

// Flush the window and OR its flags into the slot: the lane's last step before the barrier
// after which the slot's digits are complete.
void exact_finish(inout ExactWindow a, uint slot) {
    exact_flush(a, slot);
    if (a.flags != 0u) atomicOr(exact_flags[slot], a.flags);
}

// Slot `slot`'s digits carried so that every digit but the top one lies in [0, 2^16) and the
// top one carries the sign; the value is unchanged (arithmetic shifts floor). In registers:
// the loops are unrolled, so that the carries are a chain of integer operations rather than
// of shared-memory round trips (one invocation per slot, after the barrier that completes its
// digits).
void exact_normalized(uint slot, out int d[EXACT_DIGITS]) {
    const uint base = slot * EXACT_DIGITS;
    [[unroll]] for (uint i = 0u; i < EXACT_DIGITS; ++i) d[i] = exact_digits[base + i];
    [[unroll]] for (uint i = 0u; i + 1u < EXACT_DIGITS; ++i) {
        d[i + 1u] += d[i] >> 16;
        d[i] &= 0xFFFF;
    }
}

// The same, stored back in place (the digits a work item hands on in `partials`).
void exact_normalize(uint slot) {
    int d[EXACT_DIGITS];
    exact_normalized(slot, d);
    const uint base = slot * EXACT_DIGITS;
    [[unroll]] for (uint i = 0u; i < EXACT_DIGITS; ++i) exact_digits[base + i] = d[i];
}

// The float32 nearest to slot `slot`'s exact sum (ties to even), or its flags' NaN or Inf
// (NaN for a NaN term or for both infinities); an exact zero gives +0. The digits, normalised,
// stay in registers (every index below is a constant after unrolling); shared memory is read,
// not written.
float exact_round(uint slot) {
    const uint flags = exact_flags[slot];
    if ((flags & EXACT_NAN) != 0u || (flags & (EXACT_POS_INF | EXACT_NEG_INF)) ==
                                         (EXACT_POS_INF | EXACT_NEG_INF)) {
        return uintBitsToFloat(0x7FC00000u);
    }
    if (flags != 0u) return uintBitsToFloat(flags == EXACT_POS_INF ? 0x7F800000u : 0xFF800000u);
    int d[EXACT_DIGITS];
    exact_normalized(slot, d);
    const bool negative = d[EXACT_DIGITS - 1u] < 0;
    if (negative) {  // two's complement negation, digit by digit
        uint carry = 1u;
        [[unroll]] for (uint i = 0u; i + 1u < EXACT_DIGITS; ++i) {
            const uint v = (~uint(d[i]) & 0xFFFFu) + carry;
            d[i] = int(v & 0xFFFFu);
            carry = v >> 16;
        }
        d[EXACT_DIGITS - 1u] = ~d[EXACT_DIGITS - 1u] + int(carry);
    }
    // h: the top nonzero digit; hi, mid, lo: digits h, h - 1, h - 2 (0 below digit 0); below
    // them, whether any digit is nonzero (each chosen by comparisons, not by a dynamic index).
    int h = -1;
    [[unroll]] for (uint i = 0u; i < EXACT_DIGITS; ++i) h = d[i] != 0 ? int(i) : h;
    if (h < 0) return 0.0;
    const uint sign = negative ? 0x80000000u : 0u;
    // Digit 18 weighs 2^139: a value that reaches it overflows float32.
    if (h >= 18) return uintBitsToFloat(sign | 0x7F800000u);
    uint hi = 0u, mid = 0u, lo = 0u;
    bool below = false;
    [[unroll]] for (uint i = 0u; i < 18u; ++i) {
        const uint v = uint(d[i]);
        hi = int(i) == h ? v : hi;
        mid = int(i) + 1 == h ? v : mid;
        lo = int(i) + 2 == h ? v : lo;
        below = below || (int(i) + 2 < h && v != 0u);
    }
    // The top 25 bits q in [2^24, 2^25) from digits h, h - 1, h - 2, the rest as sticky.
    const uint top = uint(findMSB(hi));
    const uint low32 = (mid << 16) | lo, cut = top + 8u;
    const uint q = (hi << (24u - top)) | (low32 >> cut);
    const bool sticky = below || (low32 & ((1u << cut) - 1u)) != 0u;
    return uintBitsToFloat(sign | cr_round(q, 16 * (h - 2) + int(cut) - 149, sticky));
}
