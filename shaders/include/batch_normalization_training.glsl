// What BATCH_NORMALIZATION_TRAINING's kernels (batch_normalization_training_sums, _finalize)
// share: the canonical chunk's tree (docs/semantics.md §18.1) and the `partials` layout.

// The tree of a chunk's 16 values, element i component i % 4 of vector i / 4: pairs (i, i + 8)
// are vectors (0, 2) and (1, 3), then (i, i + 4) the two sums, (i, i + 2) .xy and .zw,
// (i, i + 1) .x and .y; each sum rounded to float32.
float chunk_tree(vec4 v0, vec4 v1, vec4 v2, vec4 v3) {
    precise vec4 h = (v0 + v2) + (v1 + v3);
    precise vec2 q = h.xy + h.zw;
    precise float r = q.x + q.y;
    return r;
}

// partials[((k groups + g) * 2 + s) * PARTIAL_WORDS + w]: for channel k, chunk group g and sum
// s (0: a = X - shift, 1: a^2), its EXACT_DIGITS normalised digits (w < 24), its flags (w =
// 24), and the channel's shift as float bits (w = 25).
const uint PARTIAL_WORDS = 26u;
