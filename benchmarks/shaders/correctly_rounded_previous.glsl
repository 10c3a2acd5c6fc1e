// The previous cr_div and cr_sqrt of shaders/include/correctly_rounded.glsl (before the fast
// paths: integer significands, int<->float conversions and umulExtended on every call),
// renamed with `_previous`, kept so that benchmarks/investigations/cr_throughput.py can time
// both on one device and tests/test_correctly_rounded.py can check that both give the same
// bits. Benchmark only (benchmarks/shaders/ is not shipped). The shim beside it,
// correctly_rounded.glsl, maps the usual names onto these for adam_optimizer_previous.comp.

// |x| (bits u: finite, nonzero) = m * 2^e, m in [2^23, 2^24) (subnormals normalised).
void cr_unpack_previous(uint u, out uint m, out int e) {
    const uint biased = (u >> 23) & 0xFFu, fraction = u & 0x7FFFFFu;
    if (biased == 0u) {
        const int shift = 23 - findMSB(fraction);
        m = fraction << uint(shift);
        e = -149 - shift;
    } else {
        m = fraction | 0x800000u;
        e = int(biased) - 150;
    }
}

// The float32 bits of (q + f) * 2^e for q in [2^24, 2^25) and some f in [0, 1), f > 0 exactly
// when `sticky`: rounded to nearest even, to a subnormal or 0 below 2^-126, to Inf above the
// largest float. Positive; the caller ORs in the sign.
uint cr_round_previous(uint q, int e, bool sticky) {
    if (e > 127 - 24) return 0x7F800000u;  // (q + f) * 2^e >= 2^128
    const uint d = uint(clamp(-149 - e, 1, 26));  // the bits below float32's last place
    uint kept = q >> d;
    const uint rest = q & ((1u << d) - 1u), half_place = 1u << (d - 1u);
    if (rest > half_place || (rest == half_place && (sticky || (kept & 1u) != 0u))) kept += 1u;
    // Normal: the exponent field plus the significand with its leading 1 (a carry out of the
    // significand moves into the exponent, and past the largest float gives Inf's bits).
    // Subnormal: the significand alone (rounding up to 2^23 gives the smallest normal).
    return d == 1u ? (uint(e + 24 + 126) << 23) + kept : kept;
}

float cr_div_previous(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint sign = (ua ^ ub) & 0x80000000u;
    const uint aa = ua & 0x7FFFFFFFu, ab = ub & 0x7FFFFFFFu;
    const uint inf = 0x7F800000u, nan = 0x7FC00000u;
    if (aa > inf || ab > inf) return uintBitsToFloat(nan);
    if (aa == inf) return uintBitsToFloat(ab == inf ? nan : sign | inf);
    if (ab == inf) return uintBitsToFloat(sign);
    if (ab == 0u) return uintBitsToFloat(aa == 0u ? nan : sign | inf);
    if (aa == 0u) return uintBitsToFloat(sign);
    uint ma, mb;
    int ea, eb;
    cr_unpack_previous(aa, ma, ea);
    cr_unpack_previous(ab, mb, eb);
    // q = floor(ma 2^s / mb) in [2^24, 2^25), the remainder r = ma 2^s - q mb in [0, mb).
    const uint s = ma >= mb ? 24u : 25u;
    uint q = uint(float(ma) / float(mb) * float(1u << s));
    uint high, low;
    umulExtended(q, mb, high, low);
    // The estimate is within a few units, so |r| < 2^31: wrapping 32-bit arithmetic is exact.
    int r = int((ma << s) - low);
    // One step moves q to within one unit (the float quotient of the small remainder), exact
    // steps finish: no loops, so no unrolled iterations that almost never run.
    const int step = int(floor(float(r) / float(mb)));
    q += uint(step);
    r -= step * int(mb);
    for (int i = 0; i < 2; ++i) {
        if (r < 0) {
            q -= 1u;
            r += int(mb);
        } else if (r >= int(mb)) {
            q += 1u;
            r -= int(mb);
        }
    }
    return uintBitsToFloat(sign | cr_round_previous(q, ea - eb - int(s), r != 0));
}

float cr_sqrt_previous(float a) {
    const uint u = floatBitsToUint(a);
    if ((u & 0x7FFFFFFFu) == 0u || u == 0x7F800000u) return a;  // +-0, +Inf
    if (u > 0x7F800000u) return uintBitsToFloat(0x7FC00000u);  // NaN, or below 0
    uint m;
    int e;
    cr_unpack_previous(u, m, e);
    // a = mk 2^(e - k) with e - k even and mk in [2^24, 2^26); n = mk 2^22 in [2^46, 2^48) has
    // the root s = floor(sqrt(n)) in [2^23, 2^24) and the remainder r = n - s^2 in [0, 2s].
    const uint k = (e & 1) != 0 ? 1u : 2u;
    const uint mk = m << k;
    uint s = uint(sqrt(float(mk)) * 2048.0);
    uint high, low;
    umulExtended(s, s, high, low);
    int r = int((mk << 22) - low);  // |r| < 2^31, as in cr_div_previous
    // One Newton step (r / 2s) brings s within a unit of the root; the remainder again exactly,
    // then exact steps finish, as in cr_div_previous.
    s = uint(int(s) + int(floor(float(r) / float(2u * s))));
    umulExtended(s, s, high, low);
    r = int((mk << 22) - low);
    for (int i = 0; i < 2; ++i) {
        if (r < 0) {
            s -= 1u;
            r += int(2u * s + 1u);
        } else if (r > int(2u * s)) {
            r -= int(2u * s + 1u);
            s += 1u;
        }
    }
    // sqrt(n) = s + f: the half bit is f >= 1/2, i.e. r > s (never a tie: n is an integer).
    const uint q = 2u * s + (r > int(s) ? 1u : 0u);
    return uintBitsToFloat(cr_round_previous(q, (e - int(k) - 22) / 2 - 1, r != 0));
}
