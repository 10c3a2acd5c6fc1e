// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), OutputROIGradientTensor, second pass: one
// workgroup per region r, no atomics:
//
//   dROI[r, j] = (sum over c ascending, over oy, ox ascending, of partials[r, c, oy, ox, j])
//                * (SPATIAL_SCALE_X for x1 and x2, SPATIAL_SCALE_Y for y1 and y2)
//
// j = 0 .. 3 for x1, y1, x2, y2; the partials from roi_align_grad_roi_partials.comp; each sum
// in float32, `precise`, one add after the other in that order, by invocation j; one rounding
// on a float16 store (half_from_float). The sums are serial (their order fixes their bits),
// so the other invocations only load: each pass of the loop the workgroup reads WG
// consecutive dY elements' partials (16 bytes each, side by side) into shared memory while
// invocations 0 .. 3 add the last WG; a lone invocation per sum would wait on every load.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl, not read here); partials (4
//   float32 words per dY element); accumulator (one float32 word per dROI element, between
//   windows; else a stand-in); droi (OutputROIGradientTensor).
// Constants: those of include/roi_align_grad.glsl; DROI_REGION_STRIDE and
//   DROI_COORDINATE_STRIDE, dROI's element strides between regions and coordinates.
// Push constants: count and first (the regions of this dispatch: [first, count)); the
//   window: the dY elements [item_begin, item_end) of each region's C * OH * OW; first_window
//   (start the sum at 0, else continue the accumulator's) and last_window (store into dROI,
//   else into the accumulator).
// Dispatch: up to 65535 workgroups, a workgroup-stride loop over the regions.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(constant_id = 34) const uint DROI_REGION_STRIDE = 4;
layout(constant_id = 35) const uint DROI_COORDINATE_STRIDE = 1;

layout(set = 0, binding = 4) readonly buffer Partials { uvec4 partials[]; };
layout(set = 0, binding = 5) buffer Accumulator { uint accumulator[]; };
layout(set = 0, binding = 6) buffer DROI { uint droi[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint item_begin;
    uint item_end;
    uint first_window;
    uint last_window;
};

shared uvec4 loaded[WG];  // one pass's dY elements' partials

// Coordinate j's sum so far: 0 in the first window, else the accumulator's.
float started(uint r, uint j) {
    return first_window != 0u ? 0.0 : uintBitsToFloat(accumulator[4u * r + j]);
}

// Coordinate j's sum into dROI (times its spatial scale) in the last window, else into the
// accumulator.
void finish(uint r, uint j, float acc) {
    if (last_window != 0u) {
        precise float v = acc * ((j & 1u) == 0u ? SPATIAL_SCALE_X : SPATIAL_SCALE_Y);
        STORE_ROUNDED(droi, r * DROI_REGION_STRIDE + j * DROI_COORDINATE_STRIDE, v)
    } else {
        accumulator[4u * r + j] = floatBitsToUint(acc);
    }
}

void main() {
    const uint items = DY_SIZES1 * DY_SIZES2 * DY_SIZES3, lane = gl_LocalInvocationID.x;
    const uint end = min(item_end, items), begin = min(item_begin, end);
    const uint j = min(lane, 3u);  // lanes 0 .. 3 sum; the others load
    // r is the same across the workgroup (its barriers need that).
    for (uint r = first + gl_WorkGroupID.x; r < count; r += gl_NumWorkGroups.x) {
        const uint base = r * items;
        if (WG < 4u) {
            // A workgroup narrower than the four sums (PYVKGRAD_LOCAL_SIZE 1 or 2, a test's
            // width): invocation 0 adds all four from the buffer, the same adds in the same
            // order (a vec4 adds its components apart).
            if (lane != 0u) continue;
            precise vec4 acc4 = vec4(started(r, 0u), started(r, 1u), started(r, 2u),
                                     started(r, 3u));
            for (uint m = begin; m < end; ++m) {
                acc4 = acc4 + uintBitsToFloat(partials[base + m]);
            }
            finish(r, 0u, acc4.x);
            finish(r, 1u, acc4.y);
            finish(r, 2u, acc4.z);
            finish(r, 3u, acc4.w);
            continue;
        }
        precise float acc = started(r, j);
        uvec4 next = begin + lane < end ? partials[base + begin + lane] : uvec4(0u);
        for (uint m = begin; m < end; m += WG) {
            barrier();  // the last pass's adds are done with `loaded`
            loaded[lane] = next;
            barrier();
            if (m + WG + lane < end) next = partials[base + m + WG + lane];  // while adding
            if (lane < 4u) {
                const uint n = min(WG, end - m);
                for (uint i = 0u; i < n; ++i) acc = acc + uintBitsToFloat(loaded[i][j]);
            }
        }
        if (lane < 4u) finish(r, j, acc);
    }
}
