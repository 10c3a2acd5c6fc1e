// Float32 arithmetic that every conforming Vulkan device rounds the same way.
//
// Vulkan rounds +, - and * correctly (to nearest, ties to even), but allows 2.5 ulp for
// division and about 3 ulp for sqrt, leaves float16 conversion's rounding to the
// implementation (load_store.glsl's half_from_float rounds exactly), and lets compilers
// contract a * b + c into an fma (GLSL's fma() itself need not be fused). A kernel that must give the same bits everywhere computes:
//   cr_div(a, b)      a / b, correctly rounded (round to nearest even), IEEE special cases
//   cr_sqrt(a)        sqrt(a), correctly rounded; NaN for a < 0, -0 for -0
//   ieee_mul(a, b)    a * b and a + b with IEEE subnormals, by integers (for devices that
//   ieee_add(a, b)    flush subnormals in float arithmetic)
//   pow_uint(b, t)    b^t as square-and-multiply: one fixed sequence of correctly rounded
//                     products (least significant bit of t first), so the same bits everywhere
// and marks its own products and sums `precise`, so that none is contracted.
//
// Division and square root have two paths. The fast one (normal operands, a normal result: a
// uniformly rare branch leaves it) works on the significands as floats in [1, 2) or [1, 4),
// with no int<->float conversion and no umulExtended (quarter-rate or several instructions
// on GPUs):
//   1. a float estimate (Vulkan: within a few ulp) gives the result's 24-bit significand y
//      from its bits, within a few units;
//   2. the exact remainder in 32-bit integers (the true value fits in an int, so the low 32
//      bits of wrapping products are all it needs), then one correction step in float (the
//      remainder over the divisor, or over twice the root, through the estimate's reciprocal;
//      rounded to an integer by adding 1.5 2^23), bring y within 1/2 unit and a hair (the
//      step's own float errors are tiny against a unit);
//   3. the exact remainder of that y decides between y - 1, y and y + 1 (no quotient or root
//      of normal float32 lies exactly half-way between two: no ties).
// Only the integer remainders decide the bits, so a device's float errors within Vulkan's
// bounds (and far past them) never change them. The general path (every other input: zeros,
// Inf, NaN, subnormal operands or results, near overflow) works on the integer significands:
// a float32 estimate, then the exact remainder in integers corrects it (one float step, then
// at most two exact unit steps), and the remainder decides the rounding.
// Subnormal operands are normalised as integers, and subnormal results rounded as integers, so
// a device that flushes subnormals in its float arithmetic still gives these functions' bits
// (the fast path's float arithmetic never meets a subnormal).

// |x| (bits u: finite, nonzero) = m * 2^e, m in [2^23, 2^24) (subnormals normalised).
void cr_unpack(uint u, out uint m, out int e) {
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
uint cr_round(uint q, int e, bool sticky) {
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

// cr_div for every input (the fast path's exceptions).
float cr_div_general(float a, float b) {
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
    cr_unpack(aa, ma, ea);
    cr_unpack(ab, mb, eb);
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
    return uintBitsToFloat(sign | cr_round(q, ea - eb - int(s), r != 0));
}

// cr_sqrt for every input (the fast path's exceptions).
float cr_sqrt_general(float a) {
    const uint u = floatBitsToUint(a);
    if ((u & 0x7FFFFFFFu) == 0u || u == 0x7F800000u) return a;  // +-0, +Inf
    if (u > 0x7F800000u) return uintBitsToFloat(0x7FC00000u);  // NaN, or below 0
    uint m;
    int e;
    cr_unpack(u, m, e);
    // a = mk 2^(e - k) with e - k even and mk in [2^24, 2^26); n = mk 2^22 in [2^46, 2^48) has
    // the root s = floor(sqrt(n)) in [2^23, 2^24) and the remainder r = n - s^2 in [0, 2s].
    const uint k = (e & 1) != 0 ? 1u : 2u;
    const uint mk = m << k;
    uint s = uint(sqrt(float(mk)) * 2048.0);
    uint high, low;
    umulExtended(s, s, high, low);
    int r = int((mk << 22) - low);  // |r| < 2^31, as in cr_div
    // One Newton step (r / 2s) brings s within a unit of the root; the remainder again exactly,
    // then exact steps finish, as in cr_div.
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
    return uintBitsToFloat(cr_round(q, (e - int(k) - 22) / 2 - 1, r != 0));
}

// 1.5 2^23: a float in [2^23, 2^24) has unit spacing, so x + MAGIC rounds x (|x| < 2^22) to an
// integer k, and the sum's bits are 0x4B400000 + k (two's complement, wrapping): float to int
// with an add. The reverse, an integer k (|k| < 2^22) to float: uintBitsToFloat(0x4B400000 +
// k) - MAGIC, exact.
const float CR_MAGIC = 12582912.0;
const uint CR_MAGIC_BITS = 0x4B400000u;

// tests/test_correctly_rounded.py (through benchmarks/shaders/cr_ops.comp) defines CR_SKEW(y)
// to move the fast paths' first estimates by up to 15 units and CR_SKEW_RECIPROCAL(x) to make
// their reciprocals (1 / b, 1 / sqrt(a)) up to 15 ulp wrong, far past what Vulkan's error
// bounds allow, and checks that the steps after them still give the same bits.
#ifndef CR_SKEW
#define CR_SKEW(y) (y)
#endif
#ifndef CR_SKEW_RECIPROCAL
#define CR_SKEW_RECIPROCAL(x) (x)
#endif

// round((r >> 9) scale) as an integer, for |r| < 2^31: the fast paths' correction step (r >> 9
// loses less than 2^9 of r, where a unit of y is worth at least 2^23: negligible).
int cr_step(int r, float scale) {
    precise float shifted = uintBitsToFloat(uint(r >> 9) + CR_MAGIC_BITS) - CR_MAGIC;
    precise float rounded = shifted * scale + CR_MAGIC;
    return int(floatBitsToUint(rounded) - CR_MAGIC_BITS);
}

float cr_div(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint fa = (ua >> 23) & 0xFFu, fb = (ub >> 23) & 0xFFu;  // exponent fields
    // Biased exponent of a / b when ma >= mb (one less otherwise); the fast path wants both
    // operands normal (fields 1 to 254) and this in [2, 253], so the result is normal and
    // no carry reaches Inf (one vector comparison: no short-circuit branches).
    const int d = int(fa) - int(fb) + 127;
    if (any(greaterThanEqual(uvec3(fa - 1u, fb - 1u, uint(d - 2)), uvec3(254u, 254u, 252u))))
        return cr_div_general(a, b);
    const uint sign = (ua ^ ub) & 0x80000000u;
    // |a| / |b| = X 2^(fa - fb), X = ma / mb in (1/2, 2); the significands as integers (in
    // [2^23, 2^24)) and as floats in [1, 2) (exponent field 127: exact, no conversion).
    const uint ma = (ua & 0x7FFFFFu) | 0x800000u, mb = (ub & 0x7FFFFFu) | 0x800000u;
    const float xa = uintBitsToFloat(ma + (126u << 23)), xb = uintBitsToFloat(mb + (126u << 23));
    // X's binade: [1, 2) when ma >= mb, then y = X 2^23 rounded; else (1/2, 1), y = X 2^24.
    const bool high = ma >= mb;
    const uint shift = high ? 23u : 24u;
    // 1. The estimate (a few ulp), clamped into X's binade (X and its rounding lie there, so
    //    clamping only brings it closer), read as y in [2^23, 2^24) from its bits.
    precise float reciprocal = CR_SKEW_RECIPROCAL(1.0 / xb);
    precise float estimate = xa * reciprocal;
    estimate = clamp(estimate, high ? 1.0 : 0.5,
                     uintBitsToFloat(high ? 0x3FFFFFFFu : 0x3F7FFFFFu));  // 2 - 2^-23, 1 - 2^-24
    uint y = CR_SKEW((floatBitsToUint(estimate) & 0x7FFFFFu) | 0x800000u);
    // 2. r = ma 2^shift - y mb = (X 2^shift - y) mb: |r| < 2^31 while y is within 127 units,
    //    so the wrapping 32-bit products give it exactly. X 2^shift - y = r / mb = r
    //    reciprocal 2^-23, rounded: y within 1/2 unit (the float errors are tiny against that).
    int r = int((ma << shift) - y * mb);
    y += uint(cr_step(r, reciprocal * (1.0 / 16384.0)));  // 2^9 2^-23
    r = int((ma << shift) - y * mb);
    // 3. X is above y + 1/2 when 2r > mb, below y - 1/2 when 2r < -mb. Never a tie: 2r = +-mb
    //    would make ma 2^(shift + 1) = (2y +- 1) mb, so the 24-bit mb a multiple of 2^24.
    const int delta = int(2 * r > int(mb)) - int(2 * r < -int(mb));
    // The exponent field of the result's binade's lower end, plus the significand with its
    // leading 1 (a carry to 2^24 moves into the exponent).
    const uint field = uint(d) - (high ? 1u : 2u);
    return uintBitsToFloat(sign | ((field << 23) + uint(int(y) + delta)));
}

float cr_sqrt(float a) {
    const uint u = floatBitsToUint(a);
    if (u - 0x800000u >= 0x7F000000u) return cr_sqrt_general(a);  // not a positive normal
    // a = x 2^(2k), x in [1, 4): the significand times 2 when a's exponent (field - 127) is
    // odd, i.e. the field even. sqrt(x) in [1, 2) has the significand y = sqrt(n), n = mx 2^23
    // (x = mx 2^-23), rounded.
    const uint field = u >> 23, odd = (field & 1u) ^ 1u;
    const uint mx = ((u & 0x7FFFFFu) | 0x800000u) << odd;
    const float x = uintBitsToFloat((u & 0x7FFFFFu) + ((127u + odd) << 23));
    // 1. The estimate x / sqrt(x) (a few ulp) clamped to [1, 2), read as y in [2^23, 2^24).
    precise float inverse_root = CR_SKEW_RECIPROCAL(inversesqrt(x));
    precise float estimate = x * inverse_root;
    estimate = clamp(estimate, 1.0, uintBitsToFloat(0x3FFFFFFFu));
    uint y = CR_SKEW((floatBitsToUint(estimate) & 0x7FFFFFu) | 0x800000u);
    // 2. r = n - y^2 = (sqrt(n) - y)(sqrt(n) + y): |r| < 2^31 while y is within 63 units, so
    //    exact in wrapping 32-bit arithmetic. sqrt(n) - y ~ r / 2y = r inverse_root 2^-24
    //    (2^23 / y ~ inverse_root), rounded: y within 1/2 unit and a hair (the step misses by
    //    about (sqrt(n) - y)^2 / 2^24 units).
    const uint n = mx << 23;
    int r = int(n - y * y);
    y += uint(cr_step(r, inverse_root * (1.0 / 32768.0)));  // 2^9 2^-24
    r = int(n - y * y);
    // 3. sqrt(n) > y + 1/2 exactly when n > y^2 + y + 1/4, i.e. r > y (integers); sqrt(n) <
    //    y - 1/2 when r <= -y. Never a tie: n is an integer.
    const int delta = int(r > int(y)) - int(r <= -int(y));
    // The result's exponent field is floor((field - 127) / 2) + 127 = (field + 127 - odd) / 2;
    // that minus 1, plus the significand with its leading 1.
    return uintBitsToFloat((((field + 125u - odd) >> 1) << 23) + uint(int(y) + delta));
}

// a * b and a + b as IEEE 754 float32 (round to nearest even, subnormal operands and results
// kept) by integer arithmetic alone: Vulkan lets a device flush subnormals to zero in its float
// arithmetic (an NVIDIA H200 does; lavapipe keeps them), so a kernel whose operands or results
// may lie below 2^-126 takes these where its checks see that (adam_optimizer.comp), and gives
// the same bits on both kinds of device. NaN results are 0x7FC00000.
float ieee_mul(float a, float b) {
    const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    const uint sign = (ua ^ ub) & 0x80000000u;
    const uint aa = ua & 0x7FFFFFFFu, ab = ub & 0x7FFFFFFFu;
    const uint inf = 0x7F800000u;
    if (aa > inf || ab > inf) return uintBitsToFloat(0x7FC00000u);
    if (aa == inf || ab == inf) {
        return uintBitsToFloat(aa == 0u || ab == 0u ? 0x7FC00000u : sign | inf);
    }
    if (aa == 0u || ab == 0u) return uintBitsToFloat(sign);
    uint ma, mb;
    int ea, eb;
    cr_unpack(aa, ma, ea);
    cr_unpack(ab, mb, eb);
    // The exact product P = ma mb in [2^46, 2^48) (high and low words); q = P >> s in
    // [2^24, 2^25), the bits shifted out as sticky.
    uint high, low;
    umulExtended(ma, mb, high, low);
    const uint s = high >= (1u << 15) ? 23u : 22u;
    const uint q = (high << (32u - s)) | (low >> s);
    return uintBitsToFloat(sign | cr_round(q, ea + eb + int(s), (low & ((1u << s) - 1u)) != 0u));
}

float ieee_add(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint aa = ua & 0x7FFFFFFFu, ab = ub & 0x7FFFFFFFu;
    const uint inf = 0x7F800000u;
    if (aa > inf || ab > inf) return uintBitsToFloat(0x7FC00000u);
    if (aa == inf || ab == inf) {  // Inf - Inf is NaN
        return aa == inf && ab == inf && ua != ub ? uintBitsToFloat(0x7FC00000u)
                                                  : (aa == inf ? a : b);
    }
    if (ab == 0u) return aa == 0u ? uintBitsToFloat(ua & ub) : a;  // -0 only for -0 + -0
    if (aa == 0u) return b;
    if (aa < ab) {  // |a| >= |b| (the magnitudes' bits order them)
        const uint t = ua;
        ua = ub;
        ub = t;
        aa = ua & 0x7FFFFFFFu;
        ab = ub & 0x7FFFFFFFu;
    }
    uint ma, mb;
    int ea, eb;
    cr_unpack(aa, ma, ea);
    cr_unpack(ab, mb, eb);
    // A = ma 2^6 and B = mb 2^6 aligned to A's exponent (the bits shifted out as sticky):
    // |a| +- |b| = (A +- B) 2^(ea - 6), below 2^31.
    const uint d = uint(ea - eb);
    const uint big = ma << 6u, small = mb << 6u;
    const uint aligned = d >= 31u ? 0u : small >> d;
    bool sticky = d >= 31u ? true : (small & ((1u << d) - 1u)) != 0u;
    uint sum;
    if (((ua ^ ub) & 0x80000000u) == 0u) {
        sum = big + aligned;
    } else {
        // The shifted-out bits f in (0, 1) are subtracted too: A - B - f = (A - B - 1) + (1 - f).
        sum = big - aligned - (sticky ? 1u : 0u);
        if (sum == 0u && !sticky) return 0.0;  // x - x is +0
    }
    // q in [2^24, 2^25): the sum shifted right (more sticky bits) or, where exact, left (a
    // cancellation leaves the sum below 2^24 only when d <= 1, with no bits shifted out).
    const int top = findMSB(sum);
    uint q;
    int e = ea - 6;
    if (top >= 24) {
        const uint k = uint(top - 24);
        sticky = sticky || (sum & ((1u << k) - 1u)) != 0u;
        q = sum >> k;
        e += int(k);
    } else {
        q = sum << uint(24 - top);
        e -= 24 - top;
    }
    return uintBitsToFloat((ua & 0x80000000u) | cr_round(q, e, sticky));
}

float pow_uint(float b, uint t) {
    precise float result = 1.0;
    precise float power = b;
    for (uint bits = t; bits != 0u; bits >>= 1u) {
        if ((bits & 1u) != 0u) result = result * power;
        if (bits > 1u) power = power * power;
    }
    return result;
}
