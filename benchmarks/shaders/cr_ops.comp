// cr_div and cr_sqrt (shaders/include/correctly_rounded.glsl) per element, or with PREVIOUS the
// functions before their fast paths, which are today's general paths (cr_div_general,
// cr_sqrt_general) called for every input: tests/test_correctly_rounded.py compares their bits
// with numpy's correctly rounded float32, and benchmarks/investigations/cr_throughput.py
// times them. Benchmark only: built by tools/build_shaders.py into benchmarks/spirv/, not
// shipped.
//
//   quotient[i] = cr_div(a[i], b[i]), root[i] = cr_sqrt(a[i])                 (REPEAT = 1)
//   then REPEAT - 1 times: root = cr_sqrt(quotient), quotient = cr_div(root, b[i])
// (the repeats keep inputs in [1, 2) normal: a throughput test of the common path).
//
// Constants: PREVIOUS (the general paths alone), REPEAT, SKEW (a test of the fast paths'
//   tolerance: their estimates and reciprocals moved, CR_SKEW and CR_SKEW_RECIPROCAL in
//   correctly_rounded.glsl).
// Push constants: count (elements).
// Dispatch: up to 65535 workgroups; grid-stride loop over the elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const bool PREVIOUS = false;
layout(constant_id = 2) const uint REPEAT = 1u;
layout(constant_id = 3) const bool SKEW = false;

// SKEW: the fast paths' first estimates moved by -15 to 15 units, and their reciprocals made
// -15 to 15 ulp wrong (so the estimates more, and the correction step over- or undershoots),
// both by invocation, independently.
#define CR_SKEW_BY(k) (SKEW ? int(gl_GlobalInvocationID.x / (k) % 31u) - 15 : 0)
#define CR_SKEW(y) ((y) + uint(CR_SKEW_BY(1u)))
#define CR_SKEW_RECIPROCAL(x) ((x) * (1.0 + float(CR_SKEW_BY(31u)) * (1.0 / 8388608.0)))
// By path: a correctly_rounded.glsl beside this file (the shim for
// adam_optimizer_previous.comp) would be found first.
#include "../../shaders/include/correctly_rounded.glsl"

layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) readonly buffer B { uint b[]; };
layout(set = 0, binding = 2) writeonly buffer QUOTIENT { uint quotient[]; };
layout(set = 0, binding = 3) writeonly buffer ROOT { uint root[]; };
layout(push_constant) uniform Push { uint count; };

float divide(float x, float y) {
    return PREVIOUS ? cr_div_general(x, y) : cr_div(x, y);
}

float square_root(float x) {
    return PREVIOUS ? cr_sqrt_general(x) : cr_sqrt(x);
}

void main() {
    GRID_STRIDE_LOOP(i, count) {
        const float x = uintBitsToFloat(a[i]), y = uintBitsToFloat(b[i]);
        float q = divide(x, y), s = square_root(x);
        for (uint k = 1u; k < REPEAT; ++k) {
            s = square_root(q);
            q = divide(s, y);
        }
        quotient[i] = floatBitsToUint(q);
        root[i] = floatBitsToUint(s);
    }
}
