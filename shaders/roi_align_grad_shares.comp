// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad), before dX's gather: each output's share, once,
// in float32, channels innermost, so that the gather reads 4 channels' shares as one 16-byte
// word, side by side with its neighbours', instead of 4 dY elements a channel apart, and
// divides nothing:
//
//   shares[r, oy, ox, c] = dY[r, c, oy, ox] / (Sy * Sx)   AVERAGE (cr_div; the count a float32
//                                                          product, as roi_align_grad.comp's)
//                        = dY[r, c, oy, ox]               MAX (float16 widens exactly)
//
// the same values the gather would compute, so the same bits. Channels past C (up to a
// multiple of 4) hold 0.
//
// Bindings: roi, batch_indices, dy, x (include/roi_align_grad.glsl; batch_indices and x not
//   read here); shares (R * OH * OW * ceil(C / 4) words of 4 floats).
// Constants: those of include/roi_align_grad.glsl.
// Push constants: count and first (the items of this dispatch: [first, count)).
// Dispatch: up to 65535 workgroups; grid-stride loop over the items, (r, oy, ox, 4 channels)
//   with the channels fastest.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "roi_align_grad.glsl"

layout(set = 0, binding = 4) buffer Shares { uvec4 shares[]; };
layout(push_constant) uniform Push {
    uint count;
    uint first;
};

// Channel c0 + j's share from the element offset of channel c0's dY (0 past the last channel).
uint share(uint at, uint c0, uint j, float count_f) {
    if (c0 + j >= DY_SIZES1) return 0u;
    return floatBitsToUint(roi_g(LOAD(dy, at + j * DY_STRIDES1), count_f));
}

void main() {
    const uint groups = (DY_SIZES1 + 3u) / 4u;
    GRID_STRIDE_LOOP_FROM(e, first, count) {
        const uint c0 = 4u * (e % groups);
        uint rest = e / groups;
        const uint ox = rest % DY_SIZES3;
        rest /= DY_SIZES3;
        const uint oy = rest % DY_SIZES2, r = rest / DY_SIZES2;
        RoiAxis ay, ax;
        roi_axes(r, ay, ax);
        precise float count_f = float(ay.s) * float(ax.s);
        const uint at = r * DY_STRIDES0 + c0 * DY_STRIDES1 + oy * DY_STRIDES2 + ox * DY_STRIDES3;
        shares[e] = uvec4(share(at, c0, 0u, count_f), share(at, c0, 1u, count_f),
                          share(at, c0, 2u, count_f), share(at, c0, 3u, count_f));
    }
}
