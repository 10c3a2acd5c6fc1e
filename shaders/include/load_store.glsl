// Loads and stores of tensors held as 32-bit words (included by common.glsl).
//
// Float16 tensors travel packed two to a 32-bit word (kp has no half type, and reading
// words with unpackHalf2x16 needs no 16-bit storage feature). Element i lives in word i/2,
// low half when i is even. 16- and 8-bit integers pack the same way (SUB_BITS).

// Elements narrower than a word (16 or 8 bits) pack 2^L to a word (L = 1 or 2; L = 0 is a
// whole word), element i in word i >> L, the lowest bits first; float16 is L = 1.
#define SUB_SHIFT(i, L) (((i) & ((1u << (L)) - 1u)) * (32u >> (L)))
#define SUB_MASK(L) (0xFFFFFFFFu >> (32u - (32u >> (L))))
#define SUB_BITS(words, i, L) (((words)[(i) >> (L)] >> SUB_SHIFT(i, L)) & SUB_MASK(L))
#define HALF_SHIFT(i) SUB_SHIFT(i, 1u)
#define HALF_BITS(words, i) SUB_BITS(words, i, 1u)
#define LOAD_HALF(words, i) unpackHalf2x16(HALF_BITS(words, i)).x
#define HALF_FROM_FLOAT(v) (packHalf2x16(vec2((v), 0.0)) & 0xFFFFu)

// Store the bits of element i (16 or 8 bits, L = 1 or 2). The rest of the word may belong to
// another invocation, so only our bits change, through two integer atomics (core Vulkan, no
// feature needed): AND clears the bits that are 0 in the new value, OR sets those that are 1.
// Final contents are right whatever the interleaving. Both atomics take the new bits as an
// operand on purpose: `bits` may read the element it replaces (dX bound over X or dY, in
// place), and a compiler may move a load from a readonly binding past any store it does not
// depend on. With a constant mask the H100's compiler issued the AND first, and in-place
// float16 results read the cleared half (Aliased decorations did not prevent it).
#define STORE_SUB_BITS(words, i, bits, L)                                 \
    {                                                                     \
        const uint sub_bits_ = (bits);                                    \
        atomicAnd((words)[(i) >> (L)], ~((SUB_MASK(L) & ~sub_bits_) << SUB_SHIFT(i, L))); \
        atomicOr((words)[(i) >> (L)], sub_bits_ << SUB_SHIFT(i, L));      \
    }
#define STORE_HALF_BITS(words, i, bits) STORE_SUB_BITS(words, i, bits, 1u)

// Store vector v (16 bytes: 4 words of 2^L elements each, as for SUB_BITS) into vector slot i
// of a packed tensor viewed both as uvec4 (`vectors`) and as uint (`words`), writing only the
// elements below `count`: in a tail vector the elements past the descriptor keep their
// values (another tensor's descriptor may cover them). Tail elements narrower than a word go
// through STORE_SUB_BITS, so `words` is bound read-write. STORE_VECTOR is the float form
// (4 float32 or 8 float16 elements); the kernel declares IS_F16.
#define STORE_VECTOR_SUB(vectors, words, i, v, count, L)                             \
    if (((i) + 1u) << (2u + (L)) <= (count)) {                                       \
        vectors[i] = (v);                                                            \
    } else {                                                                         \
        for (uint e_ = (i) << (2u + (L)); e_ < (count); ++e_) {                      \
            if ((L) != 0u) {                                                         \
                STORE_SUB_BITS(words, e_, ((v)[(e_ >> (L)) & 3u] >> SUB_SHIFT(e_, L)) & SUB_MASK(L), L); \
            } else {                                                                 \
                words[e_] = (v)[e_ & 3u];                                            \
            }                                                                        \
        }                                                                            \
    }
#define STORE_VECTOR(vectors, words, i, v, count)                                    \
    STORE_VECTOR_SUB(vectors, words, i, v, count, (IS_F16 ? 1u : 0u))

// Element i of a float tensor as a float32, and a float32 stored into element i (a statement;
// float16 rounds once and goes through STORE_HALF_BITS). The kernel declares IS_F16.
#define LOAD(words, i) (IS_F16 ? LOAD_HALF(words, i) : uintBitsToFloat((words)[i]))
#define STORE(words, i, v)                                                \
    if (IS_F16) {                                                         \
        STORE_HALF_BITS(words, i, HALF_FROM_FLOAT(v));                    \
    } else {                                                              \
        (words)[i] = floatBitsToUint(v);                                  \
    }
