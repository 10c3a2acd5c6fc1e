// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), OutputROIGradientTensor, second pass: one
// invocation per dROI element (r, j), j = 0 .. 3 for x1, y1, x2, y2, no atomics:
//
//   dROI[r, j] = (sum over c ascending, over oy, ox ascending, of partials[r, c, oy, ox, j])
//                * (SPATIAL_SCALE_X for x1 and x2, SPATIAL_SCALE_Y for y1 and y2)
//
// the partials from roi_align_grad_roi_partials.comp; the sum in float32, `precise`; one rounding
// on a float16 store (half_from_float).
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl, not read here); partials (4
//   float32 words per dY element); accumulator (one float32 word per dROI element, between
//   windows; else a stand-in); droi (OutputROIGradientTensor).
// Constants: those of include/roi_align_grad.glsl; DROI_REGION_STRIDE and
//   DROI_COORDINATE_STRIDE, dROI's element strides between regions and coordinates.
// Push constants: count and first (the dROI elements of this dispatch, numbered 4 r + j:
//   [first, count)); the window: the dY elements [item_begin, item_end) of each region's
//   C * OH * OW; first_window (start the sum at 0, else continue the accumulator's) and
//   last_window (store into dROI, else into the accumulator).
// Dispatch: up to 65535 workgroups; grid-stride loop over the dROI elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(constant_id = 33) const uint DROI_REGION_STRIDE = 4;
layout(constant_id = 34) const uint DROI_COORDINATE_STRIDE = 1;

layout(set = 0, binding = 4) readonly buffer Partials { uint partials[]; };
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

void main() {
    const uint items = DY_SIZES1 * DY_SIZES2 * DY_SIZES3;
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        const uint r = e / 4u, j = e % 4u;
        precise float acc = first_window != 0u ? 0.0 : uintBitsToFloat(accumulator[e]);
        const uint base = 4u * r * items + j;
        for (uint m = min(item_begin, items); m < min(item_end, items); ++m) {
            acc = acc + uintBitsToFloat(partials[base + 4u * m]);
        }
        if (last_window != 0u) {
            precise float v = acc * ((j & 1u) == 0u ? SPATIAL_SCALE_X : SPATIAL_SCALE_Y);
            STORE_ROUNDED(droi, r * DROI_REGION_STRIDE + j * DROI_COORDINATE_STRIDE, v)
        } else {
            accumulator[e] = floatBitsToUint(acc);
        }
    }
}
