// Float16 stores of a row of eight floats at once (load_store.glsl's halves_from_floats, one
// range test for the row). The including kernel enables GL_EXT_control_flow_attributes.

// The largest of m - low over four magnitudes m, a zero counting as `low`: no greater than
// high - low exactly when each m is zero or within [low, high] (unsigned: below low wraps).
uint range_excess(uvec4 m, uint low) {
    const uvec4 t = mix(m, uvec4(low), equal(m, uvec4(0u))) - low;
    return max(max(t.x, t.y), max(t.z, t.w));
}

// The four words of two float16 of a row of eight floats, halves_from_floats of (lo.x, lo.y),
// (lo.z, lo.w), (hi.x, hi.y) and (hi.z, hi.w): one range test for all eight, so that the usual
// row (every half zero or normal) takes the pairs' conversions with no branch between them;
// any other row goes pair by pair through halves_from_floats, in a loop kept rolled (one copy
// of its rare roads, not four).
uvec4 halves_from_floats8(vec4 lo, vec4 hi) {
    const uvec4 ulo = floatBitsToUint(lo), uhi = floatBitsToUint(hi);
    const uvec4 mlo = ulo & 0x7FFFFFFFu, mhi = uhi & 0x7FFFFFFFu;
    const uvec4 signs = (uvec4(ulo.xz, uhi.xz) >> 16) & 0x8000u
        | uvec4(ulo.yw, uhi.yw) & 0x80000000u;
    const uint excess = max(range_excess(mlo, HALF_MIN_NORMAL),
                            range_excess(mhi, HALF_MIN_NORMAL));
#ifdef HALVES_ROUND_TO_NEAREST_EVEN
    if (excess <= HALF_MAX - HALF_MIN_NORMAL) {  // device_rounds, all eight
        const vec4 alo = uintBitsToFloat(mlo), ahi = uintBitsToFloat(mhi);
        return signs | uvec4(DEVICE_HALF_PAIR(alo.xy), DEVICE_HALF_PAIR(alo.zw),
                             DEVICE_HALF_PAIR(ahi.xy), DEVICE_HALF_PAIR(ahi.zw));
    }
#else
    if (excess < HALF_INF_FROM - HALF_MIN_NORMAL) {  // rounds_by_add, all eight
        const vec4 clo = HALF_GRID(mlo), chi = HALF_GRID(mhi);
        precise vec4 rlo = (uintBitsToFloat(mlo) + clo) - clo;
        precise vec4 rhi = (uintBitsToFloat(mhi) + chi) - chi;
        return signs | uvec4(DEVICE_HALF_PAIR(rlo.xy), DEVICE_HALF_PAIR(rlo.zw),
                             DEVICE_HALF_PAIR(rhi.xy), DEVICE_HALF_PAIR(rhi.zw));
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
