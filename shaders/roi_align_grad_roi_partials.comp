// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), OutputROIGradientTensor, first pass: per dY
// element (r, c, oy, ox), the four sums its samples add to region r's dROI before the spatial
// scale (roi_align_grad_roi.comp adds them up per region in a fixed order):
//
//   x1: sum of q * gx * (1 - tx)    y1: sum of q * gy * (1 - ty)
//   x2: sum of q * gx * tx          y2: sum of q * gy * ty
//
// over the output's samples that read the image, row samples ascending, then column samples
// ascending (AVERAGE: q = dY / (Sy * Sx), cr_div, the count a float32 product), or over MAX's
// selected sample alone (q = dY; roi_align_grad_select.comp). Per sample, with the floor and
// ceil neighbours of its clamped coordinates (TL = X[floor cy, floor cx], TR = X[floor cy,
// ceil cx], BL = X[ceil cy, floor cx], BR = X[ceil cy, ceil cx]; l = c - floor c):
//
//   gy = (1 - lx) * (BL - TL) + lx * (BR - TR)   (0 where cy was clamped into the image)
//   gx = (1 - ly) * (TR - TL) + ly * (BR - BL)   (0 where cx was clamped)
//   t  = (k - OUTPUT_PIXEL_OFFSET) / N (ALIGNED: / (N - 1); ALIGNED with N = 1: 1/2), cr_div
//
// in float32, every product and sum `precise`, so every device adds the same numbers in the same
// order. NEAREST: 0 (the value is piecewise constant in the region); a region whose batch index
// is outside [0, B) or whose corners are not finite: 0.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl); selected (MAX's selections,
//   3 words per dY element; else a stand-in); partials (4 float32 words per dY element: x1, y1,
//   x2, y2).
// Constants: those of include/roi_align_grad.glsl.
// Push constants: count and first (the dY elements of this dispatch: [first, count)); the
//   window (AVERAGE): within each output's range of in-image rows of samples the offsets
//   [row_begin, row_end), of columns [col_begin, col_end); row_limit, col_limit (as in
//   roi_align_grad.comp: more gives NaN); first_window (start the sums at 0, else continue the
//   stored ones).
// Dispatch: up to 65535 workgroups; grid-stride loop over the dY elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(set = 0, binding = 4) readonly buffer Selected { uint selected[]; };
layout(set = 0, binding = 5) buffer Partials { uint partials[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    ROI_WINDOW_PUSH_CONSTANTS
};

// Where sample k sits between the region's two ends: dc/de along its axis (dc/da = 1 - t).
float roi_t(RoiAxis ax, uint k) {
    if (ALIGNED && ax.n == 1u) return 0.5;
    precise float shifted = float(k) - OUTPUT_PIXEL_OFFSET;
    return cr_div(shifted, float(ALIGNED ? ax.n - 1u : ax.n));
}

// Sample k's clamped coordinate: its floor and ceil neighbours, l = c - floor(c) (exact), and
// whether it moves with the region (false where it was clamped into [0, size - 1]).
void roi_neighbours(RoiAxis ax, uint k, out uint lo, out uint hi, out float l, out bool moves) {
    const float c = roi_coordinate(ax, k);
    moves = c >= 0.0 && c <= float(ax.size - 1u);
    const float fl = floor(clamp(c, 0.0, float(ax.size - 1u)));
    l = clamp(c, 0.0, float(ax.size - 1u)) - fl;
    lo = uint(fl);
    hi = l > 0.0 ? lo + 1u : lo;
}

// Sample (ky, kx)'s terms with share q, added to the sums s = (x1, y1, x2, y2) in that order.
void add_sample(uint base, RoiAxis ay, uint ky, RoiAxis ax, uint kx, float q, inout float s[4]) {
    uint y0, y1, x0, x1;
    float ly, lx;
    bool moves_y, moves_x;
    roi_neighbours(ay, ky, y0, y1, ly, moves_y);
    roi_neighbours(ax, kx, x0, x1, lx, moves_x);
    const float tl = x_at(base, y0, x0), tr = x_at(base, y0, x1);
    const float bl = x_at(base, y1, x0), br = x_at(base, y1, x1);
    precise float ly1 = 1.0 - ly;
    precise float lx1 = 1.0 - lx;
    precise float gy = lx1 * (bl - tl) + lx * (br - tr);
    precise float gx = ly1 * (tr - tl) + ly * (br - bl);
    precise float qx = moves_x ? q * gx : 0.0;
    precise float qy = moves_y ? q * gy : 0.0;
    const float tx = roi_t(ax, kx), ty = roi_t(ay, ky);
    precise float tx1 = 1.0 - tx;
    precise float ty1 = 1.0 - ty;
    precise float s0 = s[0] + qx * tx1;
    precise float s1 = s[1] + qy * ty1;
    precise float s2 = s[2] + qx * tx;
    precise float s3 = s[3] + qy * ty;
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
}

void main() {
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        const uvec4 at = dy_coordinates(e);
        const uint r = at.x, c = at.y, oy = at.z, ox = at.w;
        // (no loops over the 4 words: a driver's loop limit counts their iterations)
        float s[4] = float[4](0.0, 0.0, 0.0, 0.0);
        if (first_window == 0u) {
            s = float[4](uintBitsToFloat(partials[4u * e]), uintBitsToFloat(partials[4u * e + 1u]),
                         uintBitsToFloat(partials[4u * e + 2u]),
                         uintBitsToFloat(partials[4u * e + 3u]));
        }
        const uint b = batch_indices[r * BATCH_STRIDE];
        RoiAxis ay, ax;
        roi_axes(r, ay, ax);
        bool fits = true;
        if (IS_LINEAR && b < X_SIZES0 && ay.finite && ax.finite) {
            const uint base = b * X_STRIDES0 + c * X_STRIDES1;
            const float g = LOAD(dy, r * DY_STRIDES0 + c * DY_STRIDES1 + oy * DY_STRIDES2
                                     + ox * DY_STRIDES3);
            if (IS_MAX) {
                const uint ky = selected[3u * e];
                if (ky == INVALID) {
                    fits = false;
                } else if (ky != NONE) {
                    add_sample(base, ay, ky, ax, selected[3u * e + 1u], g, s);
                }
            } else {
                precise float count_f = float(ay.s) * float(ax.s);
                const float q = cr_div(g, count_f);
                uint y_first, y_end, x_first, x_end;
                roi_output_range(ay, oy, y_first, y_end);
                roi_output_range(ax, ox, x_first, x_end);
                const uint rows = y_end - y_first, cols = x_end - x_first;
                for (uint j = min(row_begin, rows); j < min(row_end, rows); ++j) {
                    for (uint i = min(col_begin, cols); i < min(col_end, cols); ++i) {
                        add_sample(base, ay, y_first + j, ax, x_first + i, q, s);
                    }
                }
                fits = rows <= row_limit && cols <= col_limit;
            }
        }
        if (!fits) s = float[4](uintBitsToFloat(0x7FC00000u), uintBitsToFloat(0x7FC00000u),
                                uintBitsToFloat(0x7FC00000u), uintBitsToFloat(0x7FC00000u));
        partials[4u * e] = floatBitsToUint(s[0]);  // NaN where !fits: see row_limit above
        partials[4u * e + 1u] = floatBitsToUint(s[1]);
        partials[4u * e + 2u] = floatBitsToUint(s[2]);
        partials[4u * e + 3u] = floatBitsToUint(s[3]);
    }
}
