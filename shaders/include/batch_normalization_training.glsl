// What the exact-sum kernels of BATCH_NORMALIZATION_TRAINING and the BatchNorm grads share
// (batch_normalization_training_sums, _finalize, batch_normalization_grad_finalize): the
// canonical chunk's tree (docs/semantics.md §18.1) and the `partials` layout.

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
// (w < 24), its flags (w = 24), and the channel's shift as float bits (w = 25).
// With one chunk group per channel (groups = 1), stage 1 rounds the sums itself (the value
// stage 2 would give from that one group) and stores only partials[k (SUMS + 1) + s], the
// rounded sums as float bits, then the shift (s = SUMS): a scratch buffer no larger than the
// inputs even for short channels.
const uint PARTIAL_WORDS = 26u;
const uint ROUNDED_WORDS = SUMS + 1u;

// A stage-2 workgroup's deposit of word w of a channel's partials (value v; its sum
// (w / PARTIAL_WORDS) % SUMS) into that sum's shared digits or flags (exact_sums.glsl): exact
// in any order, each group's digits below 2^16 after stage 1's normalisation, so 32768 groups
// fit in a digit.
void deposit_partial(uint w, int v) {
    // (Only with groups > 1: see ROUNDED_WORDS.)
    const uint i = w % PARTIAL_WORDS, s = (w / PARTIAL_WORDS) % SUMS;
    if (v != 0 && i < EXACT_DIGITS) atomicAdd(exact_digits[s * EXACT_DIGITS + i], v);
    if (v != 0 && i == EXACT_DIGITS) atomicOr(exact_flags[s], uint(v));
}
