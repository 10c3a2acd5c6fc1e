// Strided indexing (included by common.glsl): per-dimension specialization constants, and
// the row-major decomposition of a flat index into coordinates.

// DIMS8(TYPE, NAME, ID, DEFAULT): constants NAME0..NAME7 with ids ID..ID+7, NAME0 the
// outermost dimension; DIMS4 likewise with 4. A plan passes the group as one name:
// NAME=(eight values). DIMS8_n(TYPE, NAME1, ..., NAMEn, ID, DEFAULT) declares n groups one
// after another from ID (NAME2 from ID + 8, ...); DIMS4_n likewise.
#define DIMS4(TYPE, NAME, ID, DEF)                                                      \
    layout(constant_id = ID + 0) const TYPE NAME##0 = DEF;                              \
    layout(constant_id = ID + 1) const TYPE NAME##1 = DEF;                              \
    layout(constant_id = ID + 2) const TYPE NAME##2 = DEF;                              \
    layout(constant_id = ID + 3) const TYPE NAME##3 = DEF;
#define DIMS8(TYPE, NAME, ID, DEF)                                                      \
    DIMS4(TYPE, NAME, ID, DEF)                                                          \
    layout(constant_id = ID + 4) const TYPE NAME##4 = DEF;                              \
    layout(constant_id = ID + 5) const TYPE NAME##5 = DEF;                              \
    layout(constant_id = ID + 6) const TYPE NAME##6 = DEF;                              \
    layout(constant_id = ID + 7) const TYPE NAME##7 = DEF;
#define DIMS4_2(T, A, B, ID, DEF) DIMS4(T, A, ID, DEF) DIMS4(T, B, ID + 4, DEF)
#define DIMS4_3(T, A, B, C, ID, DEF) DIMS4_2(T, A, B, ID, DEF) DIMS4(T, C, ID + 8, DEF)
#define DIMS8_2(T, A, B, ID, DEF) DIMS8(T, A, ID, DEF) DIMS8(T, B, ID + 8, DEF)
#define DIMS8_3(T, A, B, C, ID, DEF) DIMS8_2(T, A, B, ID, DEF) DIMS8(T, C, ID + 16, DEF)
#define DIMS8_4(T, A, B, C, D, ID, DEF) DIMS8_3(T, A, B, C, ID, DEF) DIMS8(T, D, ID + 24, DEF)
#define DIMS8_5(T, A, B, C, D, E, ID, DEF)                                              \
    DIMS8_4(T, A, B, C, D, ID, DEF) DIMS8(T, E, ID + 32, DEF)
#define DIMS8_8(T, A, B, C, D, E, F, G, H, ID, DEF)                                     \
    DIMS8_5(T, A, B, C, D, E, ID, DEF) DIMS8_3(T, F, G, H, ID + 40, DEF)

// FOR_EACH_COORDINATE8(SIZES, index, STEP): decompose `index` row-major over SIZES0..SIZES7
// and run STEP(D, c) for every dimension D, innermost (7) first, with its coordinate c. The
// outermost dimension takes what is left (SIZES0 is never read). A kernel's STEP adds
// c * <TENSOR>_STRIDES##D to the offsets it needs, e.g.
//     #define ADD_OFFSETS(D, c) o += (c) * uvec2(X_STRIDES##D, DY_STRIDES##D);
//     uvec2 o = uvec2(0u);
//     FOR_EACH_COORDINATE8(SIZES, i, ADD_OFFSETS)
#define COORDINATE_STEP_(SIZES, D, STEP) c_ = rem_ % SIZES##D; rem_ /= SIZES##D; STEP(D, c_)
#define FOR_EACH_COORDINATE4(SIZES, index, STEP)                                        \
    {                                                                                   \
        uint rem_ = (index), c_;                                                        \
        COORDINATE_STEP_(SIZES, 3, STEP) COORDINATE_STEP_(SIZES, 2, STEP)               \
        COORDINATE_STEP_(SIZES, 1, STEP) STEP(0, rem_)                                  \
    }
#define FOR_EACH_COORDINATE8(SIZES, index, STEP)                                        \
    {                                                                                   \
        uint rem_ = (index), c_;                                                        \
        COORDINATE_STEP_(SIZES, 7, STEP) COORDINATE_STEP_(SIZES, 6, STEP)               \
        COORDINATE_STEP_(SIZES, 5, STEP) COORDINATE_STEP_(SIZES, 4, STEP)               \
        COORDINATE_STEP_(SIZES, 3, STEP) COORDINATE_STEP_(SIZES, 2, STEP)               \
        COORDINATE_STEP_(SIZES, 1, STEP) STEP(0, rem_)                                  \
    }

// The main() of a strided element-wise kernel: a grid-stride loop over the elements [first,
// count) (push constants: all of them in one dispatch); element i's offsets o, a T (uint, uvec2, ...), are summed by
// ADD_OFFSETS(D, c) over the 8 dimensions of SIZES, and the kernel's `void element(T o)`
// does the rest.
#define ELEMENTWISE_MAIN8(T, ADD_OFFSETS)                                               \
    void main() {                                                                       \
        GRID_STRIDE_LOOP_FROM(i, first, count) {                                        \
            T o = T(0u);                                                                \
            FOR_EACH_COORDINATE8(SIZES, i, ADD_OFFSETS)                                 \
            element(o);                                                                 \
        }                                                                               \
    }
