// Loads and stores of float tensors held as 32-bit words (included by common.glsl).
//
// Float16 tensors travel packed two to a 32-bit word (kp has no half type, and reading
// words with unpackHalf2x16 needs no 16-bit storage feature). Element i lives in word i/2,
// low half when i is even.

#define HALF_SHIFT(i) (((i) & 1u) * 16u)
#define HALF_BITS(words, i) (((words)[(i) >> 1u] >> HALF_SHIFT(i)) & 0xFFFFu)
#define LOAD_HALF(words, i) unpackHalf2x16(HALF_BITS(words, i)).x
#define HALF_FROM_FLOAT(v) (packHalf2x16(vec2((v), 0.0)) & 0xFFFFu)

// Store float16 bits into element i. The other half of the word may belong to another
// invocation, so only our 16 bits change, through two integer atomics (core Vulkan, no
// feature needed): AND clears the bits that are 0 in the new value, OR sets those that are 1.
// Final contents are right whatever the interleaving. Both atomics take the new bits as an
// operand on purpose: `bits` may read the element it replaces (dX bound over X or dY, in
// place), and a compiler may move a load from a readonly binding past any store it does not
// depend on. With a constant mask the H100's compiler issued the AND first, and in-place
// float16 results read the cleared half (Aliased decorations did not prevent it).
#define STORE_HALF_BITS(words, i, bits)                                   \
    {                                                                     \
        const uint half_bits_ = (bits);                                   \
        atomicAnd((words)[(i) >> 1u], ~((0xFFFFu & ~half_bits_) << HALF_SHIFT(i))); \
        atomicOr((words)[(i) >> 1u], half_bits_ << HALF_SHIFT(i));        \
    }

// Store vector v (4 float32 or 8 float16 elements, as 32-bit words) into vector slot i of a
// packed tensor viewed both as uvec4 (`vectors`) and as uint (`words`), writing only the
// elements below `count`: in a tail vector the elements past the descriptor keep their
// values (another tensor's descriptor may cover them). Float16 tail halves go through
// STORE_HALF_BITS, so `words` is bound read-write. The kernel declares IS_F16.
#define STORE_VECTOR(vectors, words, i, v, count)                                    \
    if (((i) + 1u) * (IS_F16 ? 8u : 4u) <= (count)) {                                \
        vectors[i] = (v);                                                            \
    } else {                                                                         \
        for (uint e_ = (i) * (IS_F16 ? 8u : 4u); e_ < (count); ++e_) {               \
            if (IS_F16) {                                                            \
                STORE_HALF_BITS(words, e_, ((v)[(e_ >> 1u) & 3u] >> HALF_SHIFT(e_)) & 0xFFFFu); \
            } else {                                                                 \
                words[e_] = (v)[e_ & 3u];                                            \
            }                                                                        \
        }                                                                            \
    }

// Element i of a float tensor as a float32, and a float32 stored into element i (a statement;
// float16 rounds once and goes through STORE_HALF_BITS). The kernel declares IS_F16.
#define LOAD(words, i) (IS_F16 ? LOAD_HALF(words, i) : uintBitsToFloat((words)[i]))
#define STORE(words, i, v)                                                \
    if (IS_F16) {                                                         \
        STORE_HALF_BITS(words, i, HALF_FROM_FLOAT(v));                    \
    } else {                                                              \
        (words)[i] = floatBitsToUint(v);                                  \
    }
