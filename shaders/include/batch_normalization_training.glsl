// The exact sums of BATCH_NORMALIZATION_TRAINING and the BatchNorm grads
// (batch_normalization_training_sums): the canonical chunk's tree (docs/semantics.md §18.1)
// and the `partials` layout.

// The tree of a chunk's 16 values, element i component i % 4 of vector i / 4: pairs (i, i + 8)
// are vectors (0, 2) and (1, 3), then (i, i + 4) the two sums, (i, i + 2) .xy and .zw,
// (i, i + 1) .x and .y; each sum rounded to float32.
float chunk_tree(vec4 v0, vec4 v1, vec4 v2, vec4 v3) {
    precise vec4 h = (v0 + v2) + (v1 + v3);
    precise vec2 q = h.xy + h.zw;
    precise float r = q.x + q.y;
    return r;
}

// partials[((k groups + g) * SUMS + s) * PARTIAL_WORDS + w]: for channel k, chunk group g and
// sum s (SUMS of them: the forward's 2, the grads' 3), its EXACT_DIGITS normalised digits
// (w < 24) and its flags (w = 24). Only with more than one chunk group per channel: one group
// rounds its sums itself.
const uint PARTIAL_WORDS = 25u;

// The completing item's deposit of word w of a channel's partials (value v; its sum
// (w / PARTIAL_WORDS) % SUMS) into that sum's shared digits or flags (exact_sums.glsl), the
// channel's sums at slots sum0 ..: exact in any order, each group's digits below 2^16 after
// their normalisation, so 32768 groups fit in a digit.
void deposit_partial(uint sum0, uint w, int v) {
    const uint i = w % PARTIAL_WORDS, s = sum0 + (w / PARTIAL_WORDS) % SUMS;
    if (v != 0 && i < EXACT_DIGITS) atomicAdd(exact_digits[s * EXACT_DIGITS + i], v);
    if (v != 0 && i == EXACT_DIGITS) atomicOr(exact_flags[s], uint(v));
}
