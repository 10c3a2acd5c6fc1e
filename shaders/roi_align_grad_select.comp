// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), MAX: which sample of each output dY[r, c, oy, ox]
// gets its gradient: the largest value among the output's samples that read the image, the
// first in (ky, kx) row-major order on ties, the first NaN if any (docs/semantics.md §16).
// A sample's value, in float32 with each product and sum `precise`, in this order:
//   LINEAR   ((w00 * TL + w01 * TR) + w10 * BL) + w11 * BR,  wij = wy_i * wx_j
//            (wy_0 = 1 - ly on row floor(cy), wy_1 = ly on row min(floor(cy) + 1, H - 1))
//   NEAREST  X[b, c, roundEven(cy), roundEven(cx)]
// so every device compares the same numbers. Samples outside the image are not candidates.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl); selected (3 words per dY
//   element, row-major: ky, kx and the value's bits; ky NONE when no sample reads the image,
//   INVALID when more rows or columns of samples read it than the plan's windows cover).
// Constants: those of include/roi_align_grad.glsl.
// Push constants: count and first (the dY elements of this dispatch: [first, count)); the
//   window: within each output's range of in-image rows of samples the offsets [row_begin,
//   row_end), of columns [col_begin, col_end); row_limit, col_limit (as in roi_align_grad.comp);
//   first_window (start from no selection, else continue the stored one).
// Dispatch: up to 65535 workgroups; grid-stride loop over the dY elements.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(set = 0, binding = 4) buffer Selected { uint selected[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
    ROI_WINDOW_PUSH_CONSTANTS
};

void main() {
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        const uvec4 at = dy_coordinates(e);
        const uint r = at.x, c = at.y, oy = at.z, ox = at.w;
        uint best_y = NONE, best_x = NONE;
        float best = 0.0;
        if (first_window == 0u) {
            best_y = selected[3u * e];
            best_x = selected[3u * e + 1u];
            best = uintBitsToFloat(selected[3u * e + 2u]);
        }
        const uint b = batch_indices[r * BATCH_STRIDE];
        RoiAxis ay, ax;
        roi_axes(r, ay, ax);
        if (best_y != INVALID && b < X_SIZES0 && ay.finite && ax.finite) {
            // The output's in-image samples: taps in [0, size - 1] within its S x S block.
            uint y_first, y_end, x_first, x_end;
            roi_output_range(ay, oy, y_first, y_end);
            roi_output_range(ax, ox, x_first, x_end);
            const uint rows = y_end - y_first, cols = x_end - x_first;
            const uint base = b * X_STRIDES0 + c * X_STRIDES1;
            for (uint j = min(row_begin, rows); j < min(row_end, rows); ++j) {
                const uint ky = y_first + j;
                float ly;
                const uint y0 = uint(roi_tap(ay, ky, ly));
                const uint y1 = min(y0 + 1u, ay.size - 1u);
                for (uint i = min(col_begin, cols); i < min(col_end, cols); ++i) {
                    const uint kx = x_first + i;
                    float lx;
                    const uint x0 = uint(roi_tap(ax, kx, lx));
                    precise float v;
                    if (IS_LINEAR) {
                        const uint x1 = min(x0 + 1u, ax.size - 1u);
                        precise float wy0 = 1.0 - ly;
                        precise float wx0 = 1.0 - lx;
                        precise float w00 = wy0 * wx0;
                        precise float w01 = wy0 * lx;
                        precise float w10 = ly * wx0;
                        precise float w11 = ly * lx;
                        v = w00 * x_at(base, y0, x0) + w01 * x_at(base, y0, x1);
                        v = v + w10 * x_at(base, y1, x0);
                        v = v + w11 * x_at(base, y1, x1);
                    } else {
                        v = x_at(base, y0, x0);
                    }
                    if (best_y == NONE || (!roi_nan(best) && (roi_nan(v) || v > best))) {
                        best_y = ky;
                        best_x = kx;
                        best = v;
                    }
                }
            }
            if (rows > row_limit || cols > col_limit) best_y = INVALID;
        }
        selected[3u * e] = best_y;
        selected[3u * e + 1u] = best_x;
        selected[3u * e + 2u] = floatBitsToUint(best);
    }
}
