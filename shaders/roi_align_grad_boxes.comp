// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), before dX's gather: per region r the box of
// image indices its samples' taps reach, [row_lo, row_hi] x [col_lo, col_hi], so that the gather
// (roi_align_grad.comp) skips, cheaply, the regions that cannot reach its element. A region
// skipped adds no term, so the sums and their order, and the bits, are those without the boxes.
//
// Per axis the samples that read the image form one range of k (taps in [0, size - 1]); the tap
// is monotone in k, so the range's two ends hold the smallest and largest taps; LINEAR's upper
// tap reaches one index further. An empty box (lo 1, hi 0) for a region with no sample in the
// image, non-finite corners or a batch index outside [0, B). It also stores the region's axes
// (roi_pack_axes, where the plan made the table: STORED_AXES), so that the gather reloads them
// instead of computing them per element.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl; dy and x not read here);
//   boxes (4 words per region: row_lo, row_hi, col_lo, col_hi); axes (12 words per region;
//   else a stand-in).
// Constants: those of include/roi_align_grad.glsl.
// Push constants: count and first (the regions of this dispatch: [first, count)).
// Dispatch: up to 65535 workgroups; grid-stride loop over the regions.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(set = 0, binding = 4) buffer Boxes { uint boxes[]; };
layout(set = 0, binding = 5) buffer Axes { uvec4 axes[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
};

// The indices the axis's in-image samples reach, [lo, hi]; false where none.
bool roi_reach(RoiAxis ax, out uint lo, out uint hi) {
    uint k_first, k_end;
    roi_range(ax, 0u, ax.n, 0, int(ax.size) - 1, k_first, k_end);
    lo = 1u;
    hi = 0u;
    if (k_first == k_end) return false;
    const uint a = uint(roi_tap(ax, k_first)), b = uint(roi_tap(ax, k_end - 1u));
    lo = min(a, b);
    hi = min(max(a, b) + (IS_LINEAR ? 1u : 0u), ax.size - 1u);
    return true;
}

void main() {
    GRID_STRIDE_LOOP_FROM(r, first, count) {
        uvec4 box = uvec4(1u, 0u, 1u, 0u);
        RoiAxis ay, ax;
        roi_axes(r, ay, ax);
        if (batch_indices[r * BATCH_STRIDE] < X_SIZES0 && ay.finite && ax.finite) {
            uint row_lo, row_hi, col_lo, col_hi;
            if (roi_reach(ay, row_lo, row_hi) && roi_reach(ax, col_lo, col_hi)) {
                box = uvec4(row_lo, row_hi, col_lo, col_hi);
            }
        }
        if (STORED_AXES) roi_pack_axes(ay, ax, axes[3u * r], axes[3u * r + 1u], axes[3u * r + 2u]);
        boxes[4u * r] = box.x;
        boxes[4u * r + 1u] = box.y;
        boxes[4u * r + 2u] = box.z;
        boxes[4u * r + 3u] = box.w;
    }
}
