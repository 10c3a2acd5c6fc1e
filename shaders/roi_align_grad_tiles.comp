// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), before dX's gather, after the regions' boxes
// (roi_align_grad_boxes.comp): per tile of TILE x TILE elements of one image b, the list of the
// regions whose box meets it, in ascending order, so that the gather (roi_align_grad.comp) visits
// those alone, in the same order: a region left out adds no term to the tile's elements, so the
// sums and their order, and the bits, are those of a gather over every region.
//
// tile_regions: a count per tile (include/roi_align_grad.glsl numbers them), then per tile R
// words of region indices.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl; roi, dy and x not read
//   here); boxes (4 words per region); tile_regions (the lists).
// Constants: those of include/roi_align_grad.glsl (TILE among them).
// Push constants: count and first (the tiles of this dispatch: [first, count)); the window:
//   regions [roi_begin, roi_end); first_window (start each list empty, else continue it);
//   regions (R, dY's Sizes[0]: a push constant, so that a new region count compiles nothing).
// Dispatch: up to 65535 workgroups; grid-stride loop over the tiles.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(set = 0, binding = 4) readonly buffer Boxes { uvec4 boxes[]; };
layout(set = 0, binding = 5) buffer TileRegions { uint tile_regions[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    uint roi_begin;
    uint roi_end;
    uint first_window;
    uint regions;
};

void main() {
    const uint tiles_y = roi_tiles_y(), tiles_x = roi_tiles_x();
    GRID_STRIDE_LOOP_FROM(t, first, count) {
        const uint tx = t % tiles_x, ty = (t / tiles_x) % tiles_y, b = t / (tiles_x * tiles_y);
        // The tile's rows and columns, [y0, y0 + TILE) x [x0, x0 + TILE).
        const uint y0 = ty * TILE, x0 = tx * TILE;
        uint n = first_window != 0u ? 0u : tile_regions[t];
        const uint base = roi_tile_count() + t * regions;
        for (uint r = roi_begin; r < min(roi_end, regions); ++r) {
            if (batch_indices[r * BATCH_STRIDE] != b) continue;
            const uvec4 box = boxes[r];  // an empty box (lo > hi) meets no tile
            if (box.x > box.y || box.y < y0 || box.x >= y0 + TILE || box.w < x0
                || box.z >= x0 + TILE) {
                continue;
            }
            tile_regions[base + n] = r;
            ++n;
        }
        tile_regions[t] = n;
    }
}
