// half_from_float and halves_from_floats (shaders/include/load_store.glsl) per element:
// tests/test_correctly_rounded.py compares their bits with numpy's float16 conversion (round to
// nearest even), here with the
// device's own conversion and (DEVICE_RTZ) on a simulated device whose conversion rounds
// toward zero and flushes subnormal halves, as Vulkan allows. Benchmark only: built by
// tools/build_shaders.py into benchmarks/spirv/, not shipped.
//
//   halves[i] = half_from_float(a[i])   (in the word's low 16 bits)
//   pairs[i] = halves_from_floats(vec2(a[i], b[i]))   (a[i]'s half low, b[i]'s high)
//   rows[i] = pairs[i], four at a time by halves_from_floats8 (i = 4 g .. 4 g + 3)
//
// Constants: DEVICE_RTZ.
// Push constants: count (elements; the buffers hold whole groups of four).
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(constant_id = 1) const bool DEVICE_RTZ = false;

// The float16 bits of r rounded toward zero, subnormal halves and NaN payloads flushed (a
// legal device conversion), or the device's own (HALF_FROM_FLOAT: in the rte16 SPIR-V, the
// conversion under RoundingModeRTE); and the word of a pair's, or the device's one conversion
// of the pair (DEVICE_PACK_HALVES, as the kernels' halves_from_floats). Declared here,
// defined after load_store.glsl.
uint device_half_bits(float r);
uint device_half_pair(vec2 r);
#define DEVICE_HALF_BITS(r) device_half_bits(r)
#define DEVICE_HALF_PAIR(r) device_half_pair(r)
#include "common.glsl"
#include "half_rows.glsl"

uint device_half_bits(float r) {
    const uint u = floatBitsToUint(r), magnitude = u & 0x7FFFFFFFu;
    const uint half_magnitude = magnitude < 0x38800000u ? 0u
        : magnitude >= 0x47800000u ? 0x7C00u : (magnitude - 0x38000000u) >> 13;
    return DEVICE_RTZ ? ((u >> 16) & 0x8000u) | half_magnitude : HALF_FROM_FLOAT(r);
}

uint device_half_pair(vec2 r) {
    return DEVICE_RTZ ? device_half_bits(r.x) | (device_half_bits(r.y) << 16)
                      : DEVICE_PACK_HALVES(r);
}

layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) readonly buffer B { uint b[]; };
layout(set = 0, binding = 2) writeonly buffer HALVES { uint halves[]; };
layout(set = 0, binding = 3) writeonly buffer PAIRS { uint pairs[]; };
layout(set = 0, binding = 4) writeonly buffer ROWS { uint rows[]; };
layout(push_constant) uniform Push { uint count; };

void main() {
    GRID_STRIDE_LOOP(i, count) {
        halves[i] = half_from_float(uintBitsToFloat(a[i]));
        pairs[i] = halves_from_floats(uintBitsToFloat(uvec2(a[i], b[i])));
        if ((i & 3u) == 0u) {
            const uvec4 w = halves_from_floats8(
                uintBitsToFloat(uvec4(a[i], b[i], a[i + 1u], b[i + 1u])),
                uintBitsToFloat(uvec4(a[i + 2u], b[i + 2u], a[i + 3u], b[i + 3u])));
            for (uint j = 0u; j < 4u; ++j) rows[i + j] = w[j];
        }
    }
}
