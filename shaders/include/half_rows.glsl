// Float16 stores of a row of eight floats at once (load_store.glsl's halves_from_floats, one
// range test for the row). The including kernel enables GL_EXT_control_flow_attributes.

// The largest of m - low over four magnitudes m (of the float32 bits u), a +0 counting as
// `low`: no greater than high - low exactly when each m is +0 or within [low, high]
// (unsigned: below low wraps; -0 too, whose sign a conversion need not keep).
uint range_excess(uvec4 u, uint low) {
    const uvec4 t = mix(u & 0x7FFFFFFFu, uvec4(low), equal(u, uvec4(0u))) - low;
    return max(max(t.x, t.y), max(t.z, t.w));
}

// The device's conversions of a row's four pairs (each a half already, or under the rte16
// SPIR-V's rounding mode).
#define PAIRS_OF_ROW(lo, hi) uvec4(DEVICE_HALF_PAIR((lo).xy), DEVICE_HALF_PAIR((lo).zw), \
                                   DEVICE_HALF_PAIR((hi).xy), DEVICE_HALF_PAIR((hi).zw))

// The four words of two float16 of a row of eight floats, halves_from_floats of (lo.x, lo.y),
// (lo.z, lo.w), (hi.x, hi.y) and (hi.z, hi.w): one range test for all eight, so that the usual
// row (every half +0 or normal) takes the pairs' conversions with no branch between them; any
// other row goes pair by pair through halves_from_floats, in a loop kept rolled (one copy of
// its rare roads, not four). The usual row converts the signed values: rounding to nearest
// even is symmetric, a nonzero half's conversion keeps its sign, and -0 takes the rare road.
uvec4 halves_from_floats8(vec4 lo, vec4 hi) {
    const uvec4 ulo = floatBitsToUint(lo), uhi = floatBitsToUint(hi);
    const uint excess = max(range_excess(ulo, HALF_MIN_NORMAL),
                            range_excess(uhi, HALF_MIN_NORMAL));
#ifdef HALVES_ROUND_TO_NEAREST_EVEN
    if (excess <= HALF_MAX - HALF_MIN_NORMAL) {  // device_rounds, all eight
        return PAIRS_OF_ROW(lo, hi);
    }
#else
    if (excess < HALF_INF_FROM - HALF_MIN_NORMAL) {  // rounds_by_add, all eight
        // half_grid's c carries v's sign: v + c rounds v to its half's grid, - c is exact
        const vec4 clo = HALF_GRID(ulo), chi = HALF_GRID(uhi);
        precise vec4 rlo = (lo + clo) - clo;
        precise vec4 rhi = (hi + chi) - chi;
        return PAIRS_OF_ROW(rlo, rhi);
    }
#endif
    uvec4 words = uvec4(0u);
    [[dont_unroll]] for (uint j = 0u; j < 4u; ++j) {
        const vec4 q = j < 2u ? lo : hi;
        const uint word = halves_from_floats((j & 1u) == 0u ? q.xy : q.zw);
        words = mix(words, uvec4(word), equal(uvec4(j), uvec4(0u, 1u, 2u, 3u)));
    }
    return words;
}
