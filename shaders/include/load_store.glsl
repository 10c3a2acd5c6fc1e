// Loads and stores of tensors held as 32-bit words (included by common.glsl).
//
// Float16 tensors travel packed two to a 32-bit word (kp has no half type, and reading
// words with unpackHalf2x16 needs no 16-bit storage feature). Element i lives in word i/2,
// low half when i is even. 16- and 8-bit integers pack the same way (SUB_BITS).

// HALVES_ROUND_TO_NEAREST_EVEN: the second SPIR-V that tools/build_shaders.py builds of each
// kernel that converts float32 to float16 (`<kernel>.rte16.spv`), for the devices that can fix
// that conversion's rounding (_vulkan_info.py: rounding_mode_rte_float16). It converts with
// OpFConvert (f16vec2(v), the Float16 capability) under a RoundingModeRTE execution mode for
// 16-bit results, which fixes OpFConvert's rounding to nearest even (the mode does not govern
// packHalf2x16, whose rounding Vulkan leaves to the implementation, mode or not). So
// half_from_float and halves_from_floats hand the device |v| itself where its half is zero or
// normal up to 65504 (no add: device_rounds), and HALF_FROM_FLOAT rounds to nearest even there
// too.
#ifdef HALVES_ROUND_TO_NEAREST_EVEN
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 16);
#define DEVICE_PACK_HALVES(v) packFloat2x16(f16vec2(v))
#else
#define DEVICE_PACK_HALVES(v) packHalf2x16(v)
#endif

// Tests of a float by its bits, which no assumption of a compiler's can fold: the kernels do
// not ask for SignedZeroInfNanPreserve, so a device may compile float comparisons, isnan and
// isinf as if there were no NaN or Inf (an H200 turned BATCH_NORMALIZATION_TRAINING's
// `v < 0.0 ? 0.0 : v` into a max that gave 0 for a NaN variance).
// finite: not NaN or infinite, by the exponent bits.
bool finite(float v) { return (floatBitsToUint(v) & 0x7F800000u) != 0x7F800000u; }
bool finite(vec2 v) { return finite(v.x) && finite(v.y); }
bool finite(vec3 v) { return finite(v.xy) && finite(v.z); }
// v < 0 (below_zero) and v <= 0 (at_most_zero), false for NaN.
bool below_zero(float v) {
    const uint u = floatBitsToUint(v);
    return u > 0x80000000u && u <= 0xFF800000u;
}
bool at_most_zero(float v) { return (floatBitsToUint(v) & 0x7FFFFFFFu) == 0u || below_zero(v); }

// Elements narrower than a word (16 or 8 bits) pack 2^L to a word (L = 1 or 2; L = 0 is a
// whole word), element i in word i >> L, the lowest bits first; float16 is L = 1.
#define SUB_SHIFT(i, L) (((i) & ((1u << (L)) - 1u)) * (32u >> (L)))
#define SUB_MASK(L) (0xFFFFFFFFu >> (32u - (32u >> (L))))
#define SUB_BITS(words, i, L) (((words)[(i) >> (L)] >> SUB_SHIFT(i, L)) & SUB_MASK(L))
#define HALF_SHIFT(i) SUB_SHIFT(i, 1u)
#define HALF_BITS(words, i) SUB_BITS(words, i, 1u)
#define LOAD_HALF(words, i) unpackHalf2x16(HALF_BITS(words, i)).x
// The float16 bits of v by the device's own conversion (packHalf2x16). Vulkan leaves its
// rounding to the implementation; every device measured rounds to nearest even (NVIDIA H100
// and H200, lavapipe: the fingerprints, docs/semantics.md §17). The seed operators' kernels
// (ResampleGrad, the BatchNorm grads, the element-wise ones) store through it: half_from_float
// cost ResampleGrad's float16 rows 15-24% on an H200. (With HALVES_ROUND_TO_NEAREST_EVEN the
// rounding is the mode's, to nearest even, wherever the half is normal.)
#define HALF_FROM_FLOAT(v) (DEVICE_PACK_HALVES(vec2((v), 0.0)) & 0xFFFFu)

// Two floats as the word of two float16 (x in the low half), by the device's conversion as
// HALF_FROM_FLOAT.
uint pack_halves(vec2 v) { return DEVICE_PACK_HALVES(v); }

// c = 2^(e + 13) with the sign of the float32 whose bits are `bits`, |v| in [2^e, 2^(e + 1)):
// v + c lies where float32's last place is the float16 grid's of v's binade, so that add
// (correctly rounded, ties to even) rounds v to that grid (float16's own for e from -14 to
// 15).
#define HALF_GRID(bits) uintBitsToFloat(((bits) & 0xFF800000u) + (13u << 23))
float half_grid(uint bits) { return HALF_GRID(bits); }

// The float16 bits of v, rounded to nearest even on any device (subnormal halves included;
// 65520 and above to Inf; NaN stays NaN, as sign | 0x7E00): the kernels of the operators
// added with the same-bits contract store through it.
// - Zero and normal halves (the usual case): |v| is rounded to a half's 11 significant bits by
//   one float32 add (|v| + c, c = half_grid; then - c, exact), and the device converts that
//   value. It is a half, so whatever rounding the device's conversion uses (Vulkan leaves it
//   undefined) gives its bits.
// - Subnormal halves (a device may flush them in the conversion), Inf and NaN by integers.
// DEVICE_HALF_BITS(r) is the device's conversion (HALF_FROM_FLOAT); tests define it to round
// toward zero and flush subnormal halves (benchmarks/shaders/half_ops.comp).
// DEVICE_HALF_PAIR(r) converts a vec2 to the word of two float16 (halves_from_floats): the
// device's one conversion of the pair, or the test's (half_ops.comp defines both).
#ifndef DEVICE_HALF_BITS
#define DEVICE_HALF_BITS(r) HALF_FROM_FLOAT(r)
#endif
#ifndef DEVICE_HALF_PAIR
#define DEVICE_HALF_PAIR(r) DEVICE_PACK_HALVES(r)
#endif

// Float32 magnitude bits: 2^-14 (float16's smallest normal), 65504 (its largest half) and
// 65520 (the least that rounds to Inf).
#define HALF_MIN_NORMAL 0x38800000u
#define HALF_MAX 0x477FE000u
#define HALF_INF_FROM 0x477FF000u

// Whether a float32 of magnitude bits `magnitude` is zero or rounds to a normal half: the
// path where one add rounds it (half_from_float).
bool rounds_by_add(uint magnitude) {
    return magnitude - HALF_MIN_NORMAL < HALF_INF_FROM - HALF_MIN_NORMAL || magnitude == 0u;
}

#ifdef HALVES_ROUND_TO_NEAREST_EVEN
// Whether the device's conversion, to nearest even, gives the half of |v| (magnitude bits
// `magnitude`): zero, or a normal half no greater than 65504 (its largest). Above 65504 and
// below 65520 the half is 65504 too, but Vulkan lets a conversion send an overflowing value
// to Inf: those take the add.
bool device_rounds(uint magnitude) {
    return magnitude - HALF_MIN_NORMAL <= HALF_MAX - HALF_MIN_NORMAL || magnitude == 0u;
}
#endif

uint half_from_float(float v) {
    const uint u = floatBitsToUint(v);
    const uint sign = (u >> 16) & 0x8000u, magnitude = u & 0x7FFFFFFFu;
#ifdef HALVES_ROUND_TO_NEAREST_EVEN
    if (device_rounds(magnitude)) return sign | DEVICE_HALF_BITS(uintBitsToFloat(magnitude));
#endif
    if (rounds_by_add(magnitude)) {
        const float c = half_grid(magnitude);
        precise float rounded = (uintBitsToFloat(magnitude) + c) - c;
        return sign | DEVICE_HALF_BITS(rounded);
    }
    if (magnitude > 0x7F800000u) return sign | 0x7E00u;  // NaN
    if (magnitude >= HALF_INF_FROM) return sign | 0x7C00u;  // 65520 and above round to Inf
    // A subnormal half (below 2^-14): adding 0.5, whose float32 last place is 2^-24, the
    // subnormal half's, rounds to it (correctly rounded, ties to even); the sum's low bits
    // are the half's. Below 2^-126 (flushed or not) the half is 0 either way.
    precise float sum = uintBitsToFloat(magnitude) + 0.5;
    return sign | (floatBitsToUint(sum) - 0x3F000000u);
}

// The word of two float16, half_from_float(v.x) | half_from_float(v.y) << 16. Where both
// take the add (the usual case), the two rounded magnitudes go through one conversion of the
// pair (packHalf2x16: one instruction for two on NVIDIA's GPUs), the signs put back after.
uint halves_from_floats(vec2 v) {
    const uvec2 u = floatBitsToUint(v);
    const uvec2 magnitude = u & 0x7FFFFFFFu;
#ifdef HALVES_ROUND_TO_NEAREST_EVEN
    if (device_rounds(magnitude.x) && device_rounds(magnitude.y)) {  // the device rounds |v|
        return ((u.x >> 16) & 0x8000u) | (u.y & 0x80000000u)
            | DEVICE_HALF_PAIR(uintBitsToFloat(magnitude));
    }
#else
    if (rounds_by_add(magnitude.x) && rounds_by_add(magnitude.y)) {
        const vec2 c = vec2(half_grid(magnitude.x), half_grid(magnitude.y));
        precise vec2 rounded = (uintBitsToFloat(magnitude) + c) - c;
        return ((u.x >> 16) & 0x8000u) | (u.y & 0x80000000u) | DEVICE_HALF_PAIR(rounded);
    }
#endif
    return half_from_float(v.x) | (half_from_float(v.y) << 16);
}

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

// `value` with zero bits taken from `read`, so that a store of it cannot come before the load
// that gave `read`. Where an output may be bound over an input (in place) and the value stored
// does not depend on that input, a compiler (and NVIDIA's caches) may read the readonly input
// after the store to the same word, as above: an H200 gave BATCH_NORMALIZATION_GRAD's sums the
// dX it had stored over X. `zero` is 0 at run time from something the compiler cannot see (a
// push constant shifted past the bound its plan keeps).
float after_read(float value, float read, uint zero) {
    return uintBitsToFloat(floatBitsToUint(value) | (floatBitsToUint(read) & zero));
}

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
