// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad): dX as a deterministic gather, one invocation per
// 4 channels of a dX position (each element's own sum), no atomics, a summation order fixed by
// the problem alone:
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
// The regions' axes come from the boxes pass (the values roi_axes computes, stored once) and g
// from roi_align_grad_shares.comp's table, where the plan made each table (STORED_AXES,
// SHARES: where it fits a buffer): the same numbers, computed once rather than per element
// and per term.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl); selected (MAX's
//   selections, 3 words per dY element; else a stand-in); accumulator (packed float32 per dX
//   element, between windows; else a stand-in); dx (OutputGradientTensor); boxes (4 words per
//   region: rows and columns reached); tile_regions (the tiles' region lists); axes
//   (STORED_AXES: 12 words per region; else a stand-in); shares (SHARES: 4 floats per output
//   and 4 channels; else a stand-in).
// Constants: those of include/roi_align_grad.glsl (TILE among them), DX_STRIDES and SHARES.
// Push constants: count and first (the items of this dispatch: [first, count)); the
//   window: the positions [roi_begin, roi_end) of the tile's list, and within each region's
//   range of rows the offsets [row_begin, row_end), of columns [col_begin, col_end); row_limit,
//   col_limit: the most rows and columns per region the plan's windows cover (more gives NaN:
//   only where a driver ends long loops, and then only for regions whose samples crowd onto
//   one pixel far beyond the plan's bound); first_window (start the sum at 0, else continue the accumulator's) and
//   last_window (store into dX, else into the accumulator); regions (R: the lists' stride).
// Dispatch: up to 65535 workgroups; grid-stride loop over the items, B * H * W * ceil(C / 4).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

DIMS4(uint, DX_STRIDES, 34, 0)
// SHARES: the terms' g from roi_align_grad_shares.comp's table (the plan's choice where it fits
// a buffer), else from dY here.
layout(constant_id = 38) const bool SHARES = true;

layout(set = 0, binding = 4) readonly buffer Selected { uint selected[]; };
layout(set = 0, binding = 5) buffer Accumulator { uint accumulator[]; };
layout(set = 0, binding = 6) buffer DX { uint dx[]; };
layout(set = 0, binding = 7) readonly buffer Boxes { uvec4 boxes[]; };
layout(set = 0, binding = 8) readonly buffer TileRegions { uint tile_regions[]; };
layout(set = 0, binding = 9) readonly buffer Axes { uvec4 axes[]; };
layout(set = 0, binding = 10) readonly buffer Shares { vec4 shares[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint roi_begin;
    uint roi_end;
    ROI_WINDOW_PUSH_CONSTANTS
    uint last_window;
    uint regions;
};

// The weight with which a sample whose tap is `tap` (l = frac) reads index i (0: none).
float roi_weight(int tap, float frac, int i) {
    if (tap == i) return IS_LINEAR ? 1.0 - frac : 1.0;
    if (IS_LINEAR && tap == i - 1) return frac;  // its upper tap min(tap + 1, size - 1) = i
    return 0.0;
}

// An invocation's item is 4 channels c0 + j of one (b, h, w): the regions' geometry is found
// once for the 4. Its per-channel steps are written out, not looped, so that a driver's loop
// limit counts the same iterations as for one channel.

// dY[r, c0 + j, oy, ox] (0 past the last channel), from the element offset of channel c0's.
float dy_channel(uint base, uint c0, uint j) {
    return c0 + j < DY_SIZES1 ? LOAD(dy, base + j * DY_STRIDES1) : 0.0;
}

// Whether channel c0 + j's output, whose selection of channel c0 is at word s, selected (ky, kx).
bool takes(uint s, uint c0, uint j, uint ky, uint kx) {
    const uint t = s + 3u * j * DY_SIZES2 * DY_SIZES3;
    return c0 + j < DY_SIZES1 && selected[t] == ky && selected[t + 1u] == kx;
}

// The accumulator's word for dX[b, c0 + j, h, w] (e0: channel c0's packed index).
float accumulated(uint e0, uint c0, uint j) {
    return c0 + j < X_SIZES1 ? uintBitsToFloat(accumulator[e0 + j * X_SIZES2 * X_SIZES3]) : 0.0;
}

// Store channel c0 + j's sum into dX, or into the accumulator between windows.
void store_channel(uint b, uint c0, uint j, int h, int w, uint e0, float v) {
    if (c0 + j >= X_SIZES1) return;
    if (last_window != 0u) {
        const uint off = b * DX_STRIDES0 + (c0 + j) * DX_STRIDES1 + uint(h) * DX_STRIDES2
                         + uint(w) * DX_STRIDES3;
        STORE_ROUNDED(dx, off, v)
    } else {
        accumulator[e0 + j * X_SIZES2 * X_SIZES3] = floatBitsToUint(v);
    }
}

// The g of output (oy, ox) of region r for channels c0 + j (roi_g): from
// roi_align_grad_shares.comp's table where the plan made it (the same values), else from dY.
vec4 output_g(uint r, uint c0, uint oy, uint ox, float count_f) {
    if (SHARES) {
        return shares[((r * DY_SIZES2 + oy) * DY_SIZES3 + ox) * ((DY_SIZES1 + 3u) / 4u) + c0 / 4u];
    }
    const uint at = r * DY_STRIDES0 + c0 * DY_STRIDES1 + oy * DY_STRIDES2 + ox * DY_STRIDES3;
    return vec4(roi_g(dy_channel(at, c0, 0u), count_f), roi_g(dy_channel(at, c0, 1u), count_f),
                roi_g(dy_channel(at, c0, 2u), count_f), roi_g(dy_channel(at, c0, 3u), count_f));
}

// Region r's terms of dX[b, c0 + j, h, w] for the group's channels j, added to acc[j] in
// order: the geometry is the channels', each channel's sum is its own; false where the
// region's ranges exceed the plan's limits.
bool add_region(uint r, uint c0, int h, int w, inout vec4 acc) {
    RoiAxis ay, ax;
    if (STORED_AXES) {
        roi_unpack_axes(axes[3u * r], axes[3u * r + 1u], axes[3u * r + 2u], ay, ax);
    } else {
        roi_axes(r, ay, ax);
    }
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
    const uint dy_cell = (r * DY_SIZES1 + c0) * DY_SIZES2;
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
            const vec4 g = output_g(r, c0, oy, ox, count_f);
            precise float weight = wy * wx;
            if (IS_MAX) {
                // Only the channels whose output selected this sample take a term (a select,
                // not + 0, so that a -0 sum stays -0). INVALID is the same for every channel
                // (it counts the output's samples in the image).
                const uint s = 3u * ((dy_cell + oy) * DY_SIZES3 + ox);
                if (selected[s] == INVALID) return false;
                const bvec4 take = bvec4(takes(s, c0, 0u, ky, kx), takes(s, c0, 1u, ky, kx),
                                         takes(s, c0, 2u, ky, kx), takes(s, c0, 3u, ky, kx));
                precise vec4 sum = acc + g * weight;
                acc = mix(acc, sum, take);
            } else {
                precise vec4 sum = acc + g * weight;
                acc = sum;
            }
        }
    }
    return fits;
}

void main() {
    // Items: groups of 4 channels fastest, then w, then h, then b. Neighbouring invocations
    // share a position, so a subgroup walks one list, one set of ranges and one set of samples
    // in step; positions side by side would diverge (their tiles' lists and ranges differ).
    const uint groups = (X_SIZES1 + 3u) / 4u;
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        const uint c0 = 4u * (e % groups);
        uint rest = e / groups;
        const int w = int(rest % X_SIZES3);
        rest /= X_SIZES3;
        const int h = int(rest % X_SIZES2);
        const uint b = rest / X_SIZES2;
        // dX[b, c0 + j, h, w]'s element in packed order (the accumulator's index), channel j.
        const uint e0 = ((b * X_SIZES1 + c0) * X_SIZES2 + uint(h)) * X_SIZES3 + uint(w);
        precise vec4 acc = vec4(0.0);
        if (first_window == 0u) {
            acc = vec4(accumulated(e0, c0, 0u), accumulated(e0, c0, 1u), accumulated(e0, c0, 2u),
                       accumulated(e0, c0, 3u));
        }
        bool fits = true;
        // The regions of image b whose box meets the element's tile, ascending.
        const uint tile = (b * roi_tiles_y() + uint(h) / TILE) * roi_tiles_x() + uint(w) / TILE;
        const uint listed = tile_regions[tile], list = roi_tile_count() + tile * regions;
        for (uint i = min(roi_begin, listed); i < min(roi_end, listed); ++i) {
            const uint r = tile_regions[list + i];
            const uvec4 box = boxes[r];
            if (uint(h) < box.x || uint(h) > box.y || uint(w) < box.z || uint(w) > box.w) {
                continue;
            }
            fits = add_region(r, c0, h, w, acc) && fits;
        }
        if (!fits) acc = vec4(uintBitsToFloat(0x7FC00000u));  // NaN: see row_limit above
        store_channel(b, c0, 0u, h, w, e0, acc.x);
        store_channel(b, c0, 1u, h, w, e0, acc.y);
        store_channel(b, c0, 2u, h, w, e0, acc.z);
        store_channel(b, c0, 3u, h, w, e0, acc.w);
    }
}
