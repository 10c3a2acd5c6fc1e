// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad): dX as a deterministic gather, one invocation per
// dX element, no atomics, a summation order fixed by the problem alone:
//
//   dX[b, c, h, w] = sum over regions r with BatchIndices[r] = b, ascending,
//                      over its samples ky reading row h, ascending,
//                        over its samples kx reading column w, ascending,
//                          of g * (wy * wx)
//
// wy: the weight with which sample ky reads row h (LINEAR: 1 - l where floor(c) = h, else l
// where the upper tap is h; NEAREST: 1; weights 0 are skipped), wx likewise; g: AVERAGE
// dY[r, c, ky / Sy, kx / Sx] / (Sy * Sx) (cr_div; the count a float32 product), MAX that dY
// where (ky, kx) is the output's selected sample (roi_align_grad_select.comp), else no term.
// acc += term in float32, every product and sum `precise`; one rounding on a float16 store
// (half_from_float). A region whose batch index is outside [0, B) never equals b: it adds nothing.
// The samples reading row h form one range of ky (include/roi_align_grad.glsl), found by
// bisection per region. The regions visited are those of the element's tile's list
// (roi_align_grad_tiles.comp: image b's regions whose box of reached indices meets the tile,
// ascending), and of those the ones whose box (roi_align_grad_boxes.comp) holds (h, w): the
// others add no term, so the sum and its order are those over every region.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl); selected (MAX's
//   selections, 3 words per dY element; else a stand-in); accumulator (packed float32 per dX
//   element, between windows; else a stand-in); dx (OutputGradientTensor); boxes (4 words per
//   region: rows and columns reached); tile_regions (the tiles' region lists).
// Constants: those of include/roi_align_grad.glsl (TILE among them), and DX_STRIDES.
// Push constants: count and first (the dX elements of this dispatch: [first, count)); the
//   window: the positions [roi_begin, roi_end) of the tile's list, and within each region's
//   range of rows the offsets [row_begin, row_end), of columns [col_begin, col_end); row_limit,
//   col_limit: the most rows and columns per region the plan's windows cover (more gives NaN:
//   only where a driver ends long loops, and then only for regions whose samples crowd onto
//   one pixel far beyond the plan's bound); first_window (start the sum at 0, else continue the accumulator's) and
//   last_window (store into dX, else into the accumulator).
// Dispatch: up to 65535 workgroups; grid-stride loop over the dX elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

DIMS4(uint, DX_STRIDES, 33, 0)

layout(set = 0, binding = 4) readonly buffer Selected { uint selected[]; };
layout(set = 0, binding = 5) buffer Accumulator { uint accumulator[]; };
layout(set = 0, binding = 6) buffer DX { uint dx[]; };
layout(set = 0, binding = 7) readonly buffer Boxes { uvec4 boxes[]; };
layout(set = 0, binding = 8) readonly buffer TileRegions { uint tile_regions[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint roi_begin;
    uint roi_end;
    uint row_begin;
    uint row_end;
    uint col_begin;
    uint col_end;
    uint row_limit;
    uint col_limit;
    uint first_window;
    uint last_window;
};

// The weight with which a sample whose tap is `tap` (l = frac) reads index i (0: none).
float roi_weight(int tap, float frac, int i) {
    if (tap == i) return IS_LINEAR ? 1.0 - frac : 1.0;
    if (IS_LINEAR && tap == i - 1) return frac;  // its upper tap min(tap + 1, size - 1) = i
    return 0.0;
}

// Region r's terms of dX[b, c, h, w], added to acc in order; false where its ranges exceed
// the plan's limits.
bool add_region(uint r, uint c, int h, int w, inout float acc) {
    RoiAxis ay, ax;
    roi_axes(r, ay, ax);
    if (!ay.finite || !ax.finite) return true;
    // LINEAR: samples with tap h or h - 1 read row h; NEAREST: tap h.
    const int reach = IS_LINEAR ? 1 : 0;
    uint y_first, y_end, x_first, x_end;
    roi_range(ay, 0u, ay.n, h - reach, h, y_first, y_end);
    if (y_first == y_end) return true;
    roi_range(ax, 0u, ax.n, w - reach, w, x_first, x_end);
    if (x_first == x_end) return true;
    const uint rows = y_end - y_first, cols = x_end - x_first;
    const bool fits = rows <= row_limit && cols <= col_limit;
    precise float count_f = float(ay.s) * float(ax.s);
    const uint base = r * DY_STRIDES0 + c * DY_STRIDES1;
    const uint dy_cell = (r * DY_SIZES1 + c) * DY_SIZES2;
    for (uint j = min(row_begin, rows); j < min(row_end, rows); ++j) {
        const uint ky = y_first + j;
        float ly;
        const float wy = roi_weight(roi_tap(ay, ky, ly), ly, h);
        if (wy == 0.0) continue;
        const uint oy = ky / ay.s;
        for (uint i = min(col_begin, cols); i < min(col_end, cols); ++i) {
            const uint kx = x_first + i;
            float lx;
            const float wx = roi_weight(roi_tap(ax, kx, lx), lx, w);
            if (wx == 0.0) continue;
            const uint ox = kx / ax.s;
            const float g = LOAD(dy, base + oy * DY_STRIDES2 + ox * DY_STRIDES3);
            precise float weight = wy * wx;
            precise float term;
            if (IS_MAX) {
                const uint s = 3u * ((dy_cell + oy) * DY_SIZES3 + ox);
                if (selected[s] == INVALID) return false;
                if (selected[s] != ky || selected[s + 1u] != kx) continue;
                term = g * weight;
            } else {
                term = cr_div(g, count_f) * weight;
            }
            acc = acc + term;
        }
    }
    return fits;
}

void main() {
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        uint rest = e;
        const int w = int(rest % X_SIZES3);
        rest /= X_SIZES3;
        const int h = int(rest % X_SIZES2);
        rest /= X_SIZES2;
        const uint c = rest % X_SIZES1, b = rest / X_SIZES1;
        precise float acc = first_window != 0u ? 0.0 : uintBitsToFloat(accumulator[e]);
        bool fits = true;
        // The regions of image b whose box meets the element's tile, ascending.
        const uint tile = (b * roi_tiles_y() + uint(h) / TILE) * roi_tiles_x() + uint(w) / TILE;
        const uint listed = tile_regions[tile], list = roi_tile_count() + tile * DY_SIZES0;
        for (uint i = min(roi_begin, listed); i < min(roi_end, listed); ++i) {
            const uint r = tile_regions[list + i];
            const uvec4 box = boxes[r];
            if (uint(h) < box.x || uint(h) > box.y || uint(w) < box.z || uint(w) > box.w) {
                continue;
            }
            fits = add_region(r, c, h, w, acc) && fits;
        }
        if (!fits) acc = uintBitsToFloat(0x7FC00000u);  // NaN: see row_limit above
        if (last_window != 0u) {
            const uint off = b * DX_STRIDES0 + c * DX_STRIDES1 + uint(h) * DX_STRIDES2
                             + uint(w) * DX_STRIDES3;
            STORE_ROUNDED(dx, off, acc)
        } else {
            accumulator[e] = floatBitsToUint(acc);
        }
    }
}
