// DML_OPERATOR_RESAMPLE_GRAD (resample_grad) and RESAMPLE_GRAD1 (resample_grad1), the
// deterministic gather in windows, for drivers that end long loops (lavapipe: 65535 iterations
// per invocation): one dispatch per window, and each sums, per dX element, the terms
// [window_begin, window_end) of the element's canonical order, continuing the running sums the
// previous window left. So whatever the window, the element adds the same terms in the same
// order with the same arithmetic as resample_grad_gather: the same bits
// (include/resample_grad.glsl).
//
// An element's terms, in the canonical order, are numbered t = 0, 1, ...: row r (a combination
// of the contributors along the axes before INNER, in ascending logical order, the axes after
// INNER being identities) holds terms r * n + k, k < n, for the n contributors along INNER.
// A window may begin or end inside a row, so both running sums persist between dispatches:
// acc in `accumulator` and, linear, the unfinished row sum h in `row_sums`, both packed
// float32 (element e at word e). The first window (window_begin 0) starts them at +0 and writes
// every element; a later one touches only elements that still have terms. After the last
// window every row is finished, and resample_grad_convert stores acc in dX's type and layout.
//
// Bindings: tables, dy (include/resample_grad.glsl), accumulator, row_sums (scratch; nearest
//   does not use row_sums).
// Constants: those of include/resample_grad_gather.glsl.
// Push constants: count (dX elements), window_begin, window_end (term numbers).
// Dispatch: up to 65535 workgroups; grid-stride loop over the `count` dX elements. An element
//   runs one loop of at most window_end - window_begin iterations, one per term (plus its final
//   test), which the plan keeps within the driver's limit. One loop, not one over rows and one
//   over a row's terms: lavapipe runs lanes in lockstep and counts a loop's iterations while
//   any lane runs it, so lanes whose rows differ in length would add up the longest of each.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "resample_grad.glsl"
#include "resample_grad_gather.glsl"

layout(set = 0, binding = 2) buffer ACCUMULATOR { uint accumulator[]; };  // scratch
layout(set = 0, binding = 3) buffer ROW_SUMS { uint row_sums[]; };  // scratch (linear)
layout(push_constant) uniform Push { uint count; uint window_begin; uint window_end; };

#define COORDINATE(D, c) i[D] = (c);
#define RANGE(D) AXIS_RANGE(D, i[D], ob[D], wb[D], n[D])
// Per axis D before INNER (every macro below unrolls to straight code once INNER is known, so
// no loop but the one that the plan counts): the row's contributor c[D] from the row number,
// innermost first (mixed radix n[D]); its part of the dY offset; its part of w_outer,
// ((w0 * w1) * w2) as in resample_grad_gather; the step to the next row, innermost first.
#define ROW_COORDINATE(D) if (uint(D) < INNER) { c[D] = row % n[D]; row /= n[D]; }
#define ROW_OFFSET(D) if (uint(D) < INNER) { y += (ob[D] + c[D]) * DY_STRIDES##D; }
#define OUTER_WEIGHT(D)                                                                 \
    if (uint(D) < INNER) {                                                              \
        const float w_ = WEIGHT(D, wb[D] + c[D]);                                       \
        w_outer = D == 0 ? w_ : w_outer * w_;                                           \
    }
#define NEXT_ROW(D)                                                                     \
    if (uint(D) < INNER && carry) {                                                     \
        c[D] += 1u;                                                                     \
        carry = c[D] == n[D];                                                           \
        c[D] = carry ? 0u : c[D];                                                       \
    }
// dY offset of term k of the row at c[] (y0: the parts of INNER's first output and of the axes
// after INNER).
#define ROW_START(k)                                                                    \
    y = y0 + (k) * INNER_STRIDE;                                                        \
    ROW_OFFSET(0) ROW_OFFSET(1) ROW_OFFSET(2)
// The axes after INNER are identities: their one contributor is o = i.
#define AFTER_OFFSET(D) if (uint(D) > INNER) { y0 += i[D] * DY_STRIDES##D; }

// dY's stride along INNER, and INNER's weight of entry k.
const uint INNER_STRIDE = INNER == 3u ? DY_STRIDES3 : INNER == 2u ? DY_STRIDES2
                        : INNER == 1u ? DY_STRIDES1 : DY_STRIDES0;
float inner_weight(uint k) {
    return INNER == 3u ? WEIGHT(3, k) : INNER == 2u ? WEIGHT(2, k) : INNER == 1u ? WEIGHT(1, k)
                                                                                 : WEIGHT(0, k);
}

void main() {
    GRID_STRIDE_LOOP(e, count) {
        uint i[4], ob[4], wb[4], n[4];
        FOR_EACH_COORDINATE4(DX_SIZES, e, COORDINATE)
        RANGE(0) RANGE(1) RANGE(2) RANGE(3)
        const uint len = n[INNER];  // terms per row
        const uint terms = n[0] * n[1] * n[2] * n[3];
        const uint t1 = min(window_end, terms);
        uint t = window_begin;
        if (t != 0u && t >= t1) {
            continue;  // this element's terms ended in an earlier window
        }
        precise float acc = t == 0u ? 0.0 : uintBitsToFloat(accumulator[e]);
        precise float h = (IS_LINEAR && t != 0u) ? uintBitsToFloat(row_sums[e]) : 0.0;
        if (t < t1) {
            // Term t is term k of row t / len.
            uint k = t % len;
            uint row = t / len;
            uint c[4] = uint[4](0u, 0u, 0u, 0u);
            ROW_COORDINATE(2) ROW_COORDINATE(1) ROW_COORDINATE(0)
            uint y0 = ob[INNER] * INNER_STRIDE, y;
            AFTER_OFFSET(1) AFTER_OFFSET(2) AFTER_OFFSET(3)
            ROW_START(k)
            for (; t < t1; ++t) {
                float v = LOAD(dy, y);
                if (IS_LINEAR) {
                    ACCUMULATE(h, v, inner_weight(wb[INNER] + k))
                } else {
                    ACCUMULATE(acc, v, 1.0)
                }
                ++k;
                y += INNER_STRIDE;
                if (k == len) {  // the row is complete: add it, and step to the next
                    if (IS_LINEAR) {
                        float w_outer = 1.0;
                        OUTER_WEIGHT(0) OUTER_WEIGHT(1) OUTER_WEIGHT(2)
                        ROW_SUM(acc, h, w_outer)
                        h = 0.0;
                    }
                    k = 0u;
                    bool carry = true;
                    NEXT_ROW(2) NEXT_ROW(1) NEXT_ROW(0)
                    ROW_START(0u)
                }
            }
        }
        accumulator[e] = floatBitsToUint(plus_zero(acc));
        if (IS_LINEAR) {
            row_sums[e] = floatBitsToUint(h);
        }
    }
}
