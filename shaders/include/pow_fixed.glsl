// pow_fixed(x, y): x^y for a real exponent y as one fixed sequence of correctly rounded float32
// operations (+, -, * marked `precise`, and cr_div), so the same bits on every device, where
// GLSL's pow, exp2 and log2 are loose and differ between drivers. Include after
// correctly_rounded.glsl.
//
//   x = f 2^k, f in [sqrt(1/2), sqrt(2)]          (exact, from the bits; subnormals too)
//   log2 f = (2 / ln 2) atanh(s), s = (f - 1) / (f + 1)     (|s| <= 0.172: odd series to s^9)
//   y log2 x = y k + y log2 f = n + g, n an integer, |g| <= about 0.5: y k exactly as the two
//     products of k with y's upper 12 significant bits and the rest
//   2^g by its Taylor series in g ln 2 to degree 7, then times 2^n exactly (cr_round rounds a
//     subnormal result once, overflow gives +Inf)
//
// Accuracy: within a few float32 ulps of the real x^y while |y log2 x| is moderate (the tests
// measure it; docs/semantics.md §15 states the bound). Special cases: y = 0 gives 1 (any x);
// x or y NaN, or x < 0 (whatever y), give NaN; x = 0 gives +Inf (y < 0) or 0 (y > 0); x = +Inf
// gives 0 (y < 0) or +Inf (y > 0).

#define POW_NAN uintBitsToFloat(0x7FC00000u)
#define POW_INF uintBitsToFloat(0x7F800000u)

float pow_fixed(float x, float y) {
    const uint ux = floatBitsToUint(x), uy = floatBitsToUint(y);
    if ((uy & 0x7FFFFFFFu) == 0u) return 1.0;
    if ((ux & 0x7FFFFFFFu) > 0x7F800000u || (uy & 0x7FFFFFFFu) > 0x7F800000u) return POW_NAN;
    if ((ux & 0x7FFFFFFFu) == 0u) return (uy >> 31) != 0u ? POW_INF : 0.0;
    if ((ux >> 31) != 0u) return POW_NAN;
    if (ux == 0x7F800000u) return (uy >> 31) != 0u ? 0.0 : POW_INF;
    uint m;
    int e;
    cr_unpack(ux, m, e);  // x = m 2^e, m in [2^23, 2^24)
    float f = uintBitsToFloat(0x3F800000u | (m & 0x7FFFFFu));  // x = f 2^k, f in [1, 2)
    int k = e + 23;
    if (f > 1.41421356) {
        f *= 0.5;  // exact
        k += 1;
    }
    precise float s = cr_div(f - 1.0, f + 1.0);
    precise float s2 = s * s;
    precise float log2_f = s * (2.8853900817779268 + s2 * (0.9617966939259757 + s2 * (
        0.5770780163555853 + s2 * (0.41219858311113244 + s2 * 0.3205988979753252))));
    // y k exactly: y's upper 12 significant bits times k (|k| < 2^8) and the rest times k are
    // both exact in float32.
    const float y_high = uintBitsToFloat(uy & 0xFFFFF000u);
    precise float y_low = y - y_high;
    precise float a = y_high * float(k);
    precise float b = y_low * float(k);
    precise float c = y * log2_f;
    precise float r = (a + b) + c;
    if (r > 200.0) return POW_INF;
    if (r < -200.0) return 0.0;
    const float n = roundEven(r);
    precise float g = ((a - n) + b) + c;  // a - n is exact (both multiples of a's last place)
    precise float p = 1.0 + g * (0.6931471805599453 + g * (0.2402265069591007 + g * (
        0.055504108664821576 + g * (0.009618129107628477 + g * (0.0013333558146428441 + g * (
            0.00015403530393381606 + g * 1.5252733804059838e-05))))));
    uint mp;
    int ep;
    cr_unpack(floatBitsToUint(p), mp, ep);
    return uintBitsToFloat(cr_round(mp << 1, ep - 1 + int(n), false));
}
