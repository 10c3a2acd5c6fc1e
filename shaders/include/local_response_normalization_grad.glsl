// LOCAL_RESPONSE_NORMALIZATION_GRAD (local_response_normalization_grad): what its kernels
// local_response_normalization_grad_norm and local_response_normalization_grad_output share:
// the tensors' geometry and the walk over an element's window. Included after common.glsl.
//
// The window lies along (rows, columns) = (none, C) with CROSS_CHANNEL, else (H, W), of 4-D
// {N, C, H, W} tensors. Element (row, column)'s window spans rows [row - before, row + after]
// and columns [column - before, column + after], clipped to the tensor (no rows: only row 0).
// The normaliser's window has (before, after) = (BEFORE, AFTER) = (floor((L - 1) / 2),
// ceil((L - 1) / 2)); the gradient's sum runs over the mirrored window, (AFTER, BEFORE).
// Positions are walked row by row, columns ascending: position t of a window of `columns`
// columns is row first_row + t / columns, column first_column + t % columns. A dispatch walks
// positions [window_first, window_end) (push constants: all of them unless a loop limit
// splits the walk), continuing a running sum in float32 scratch, so every split gives the same
// sums in the same order.
//
// Constants: IS_F16; CROSS_CHANNEL; BEFORE, AFTER; SIZES (N, C, H, W); X_STRIDES, DY_STRIDES
//   (element strides).

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool CROSS_CHANNEL = true;
layout(constant_id = 3) const uint BEFORE = 0u;
layout(constant_id = 4) const uint AFTER = 0u;
DIMS4(uint, SIZES, 5, 1u)
DIMS4_2(uint, X_STRIDES, DY_STRIDES, 9, 0u)

// An element: its offsets in X, dY and the packed scratch (its logical index), and its
// window's (row, column) coordinates.
struct Element {
    uvec3 offset;
    int row, column;
};

#define ADD_ELEMENT_OFFSETS(D, c) offset += (c) * uvec2(X_STRIDES##D, DY_STRIDES##D); \
    if (CROSS_CHANNEL ? D == 1 : D == 3) column = int(c);                              \
    if (!CROSS_CHANNEL && D == 2) row = int(c);

Element element_at(uint i) {
    uvec2 offset = uvec2(0u);
    int row = 0, column = 0;
    FOR_EACH_COORDINATE4(SIZES, i, ADD_ELEMENT_OFFSETS)
    return Element(uvec3(offset, i), row, column);
}

// How far a step of one row or one column moves in X, dY and the scratch.
// Built component by component at run time, not as vectors of specialization constants: the
// Khronos validation layer 1.3.239 specializes such composites through spirv-opt passes that
// can drop a constant still in use (seen with equal values, e.g. a stride equal to a product of
// sizes), and then reports the pipeline's SPIR-V invalid.
uvec3 row_step() {
    uvec3 step = uvec3(0u);
    if (!CROSS_CHANNEL) {
        step.x = X_STRIDES2;
        step.y = DY_STRIDES2;
        step.z = SIZES3;
    }
    return step;
}
uvec3 column_step() {
    uvec3 step = uvec3(1u);
    step.x = CROSS_CHANNEL ? X_STRIDES1 : X_STRIDES3;
    step.y = CROSS_CHANNEL ? DY_STRIDES1 : DY_STRIDES3;
    if (CROSS_CHANNEL) {
        step.z = SIZES2;
        step.z *= SIZES3;
    }
    return step;
}

// Element e's window with (before, after): the walk's state, from position window_first.
struct Walk {
    int first_row, first_column, last_column;
    uint positions;  // in the whole window
    uvec3 offset;  // of the current position
    int row, column;  // of the current position
};

Walk walk_from(Element e, uint before, uint after, uint window_first) {
    const int rows = CROSS_CHANNEL ? 1 : int(SIZES2);
    const int columns = CROSS_CHANNEL ? int(SIZES1) : int(SIZES3);
    Walk w;
    w.first_row = max(e.row - int(before), 0);
    const int last_row = min(e.row + int(after), rows - 1);
    w.first_column = max(e.column - int(before), 0);
    w.last_column = min(e.column + int(after), columns - 1);
    const uint width = uint(w.last_column - w.first_column + 1);
    w.positions = uint(last_row - w.first_row + 1) * width;
    w.row = w.first_row + int(window_first / width);
    w.column = w.first_column + int(window_first % width);
    w.offset = e.offset + uint(w.row - e.row) * row_step()
               + uint(w.column - e.column) * column_step();
    return w;
}

// The walk's next position (row by row, columns ascending).
void advance(inout Walk w, Element e) {
    if (w.column < w.last_column) {
        w.column += 1;
        w.offset += column_step();
    } else {
        w.column = w.first_column;
        w.row += 1;
        w.offset = e.offset + uint(w.row - e.row) * row_step()
                   + uint(w.column - e.column) * column_step();
    }
}

// Inside the kernels' loop over elements i: `sum` (a new `precise` float) = the running sum of
// TERM (an expression of the walk `w`'s current offsets, w.offset) over element e's window
// with (before, after), for this dispatch's positions [window_first, window_end), continued
// from scratch[i] after an earlier dispatch. A walk that an earlier dispatch finished, or that
// this one does not, goes on to the next element (`continue`; the latter keeps its sum in
// scratch[i]); after it, the window's whole sum is in `sum`. Positions are added in walk
// order, each sum rounded once, so every split gives the same bits.
#define SUM_OVER_WINDOW(sum, e, before, after, scratch, i, TERM)                       \
    Walk w = walk_from(e, before, after, window_first);                                 \
    if (window_first > 0u && window_first >= w.positions) {                             \
        continue;                                                                       \
    }                                                                                   \
    precise float sum = window_first == 0u ? 0.0 : scratch[i];                          \
    const uint walk_end = min(window_end, w.positions);                                 \
    for (uint position = window_first; position < walk_end; ++position) {               \
        sum = sum + (TERM);                                                             \
        advance(w, e);                                                                  \
    }                                                                                   \
    if (walk_end < w.positions) {                                                       \
        scratch[i] = sum;                                                               \
        continue;                                                                       \
    }
