// DML_OPERATOR_ROI_ALIGN_GRAD (roi_align_grad): what its kernels share (roi_align_grad.comp, the
// dX gather, roi_align_grad_select.comp, MAX's choice of sample, and the passes that prepare or
// follow them): the interface common to all, and one region's samples along one axis, every coordinate computed in float32 in one
// fixed order with each operation correctly rounded (`precise`, cr_div), so every device finds
// the same samples, taps and weights (docs/semantics.md §16):
//
//   a = lo * SCALE, e = hi * SCALE, L = e - a              (lo, hi: x1, x2 or y1, y2 of the ROI)
//   S = clamp(ceil(|L| / O), MINIMUM, MAXIMUM), at most CAP (= 2^24 / O); N = O * S
//   d = L / N (ALIGNED: L / (N - 1))
//   c(k) = ((k - OUTPUT_PIXEL_OFFSET) * d + a) - INPUT_PIXEL_OFFSET,  k in [0, N)
//   ALIGNED with N = 1: c = (a + e) * 0.5 - INPUT_PIXEL_OFFSET
//
// A sample reads the image when -1 <= c <= size; its coordinate is clamped to [0, size - 1];
// LINEAR taps floor(c) with 1 - l and min(floor(c) + 1, size - 1) with l (l = c - floor(c),
// exact), NEAREST the index roundEven(c) (half to even) with 1. A region with a non-finite
// corner, or whose spacing d overflows (finite corners of opposite signs near +-1.7e38), reads
// nothing: its coordinates would be infinite, NaN (0 * d), or at a, far outside any image.
//
// The tap index `roi_tap` is monotone in k (each rounded operation is monotone, d's sign fixed),
// so the samples whose taps fall in an index window form one contiguous range of k, found by
// bisection (`roi_range`): at most 25 steps for N <= 2^24.

#include "correctly_rounded.glsl"

layout(constant_id = 1) const bool IS_F16 = false;
layout(constant_id = 2) const bool IS_LINEAR = true;
layout(constant_id = 3) const bool IS_MAX = false;
layout(constant_id = 4) const bool ALIGNED = false;
layout(constant_id = 5) const float SPATIAL_SCALE_X = 1.0;
layout(constant_id = 6) const float SPATIAL_SCALE_Y = 1.0;
layout(constant_id = 7) const float INPUT_PIXEL_OFFSET = 0.5;
layout(constant_id = 8) const float OUTPUT_PIXEL_OFFSET = -0.5;
layout(constant_id = 9) const uint MINIMUM = 1;
layout(constant_id = 10) const uint MAXIMUM = 0xFFFFFFFF;
// CAP_Y, CAP_X: 2^24 / OH and 2^24 / OW (at least 1), pyvkgrad's cap on S.
layout(constant_id = 11) const uint CAP_Y = 1;
layout(constant_id = 12) const uint CAP_X = 1;
// ROI element strides: between regions and between a region's four coordinates; the batch
// indices' stride between regions.
layout(constant_id = 13) const uint ROI_REGION_STRIDE = 4;
layout(constant_id = 14) const uint ROI_COORDINATE_STRIDE = 1;
layout(constant_id = 15) const uint BATCH_STRIDE = 1;
// X and dX sizes {B, C, H, W}; dY sizes {R, C, OH, OW}; element strides. DY_SIZES0 is not
// read: the plan sets it to 0, and the kernels that need the region count R take it as a push
// constant (`regions`), so that operators of every R share their pipelines (a training step's
// region count often changes: each new one compiled every kernel).
DIMS4_2(uint, X_SIZES, DY_SIZES, 16, 1)
DIMS4_2(uint, X_STRIDES, DY_STRIDES, 24, 0)
// The side of the square tiles of each image whose regions the gather visits from a list
// (roi_align_grad_tiles.comp): tile t = (b * roi_tiles_y() + ty) * roi_tiles_x() + tx.
layout(constant_id = 32) const uint TILE = 8;

uint roi_tiles_y() { return (X_SIZES2 + TILE - 1u) / TILE; }
uint roi_tiles_x() { return (X_SIZES3 + TILE - 1u) / TILE; }
uint roi_tile_count() { return X_SIZES0 * roi_tiles_y() * roi_tiles_x(); }

layout(set = 0, binding = 0) readonly buffer Roi { uint roi[]; };
layout(set = 0, binding = 1) readonly buffer BatchIndices { uint batch_indices[]; };
layout(set = 0, binding = 2) readonly buffer DY { uint dy[]; };
layout(set = 0, binding = 3) readonly buffer X { uint x[]; };  // MAX only (else a stand-in)

// A selection's words per dY element (roi_align_grad_select.comp): ky, kx, the value's bits.
// ky = NONE: no sample of the output reads the image; INVALID: more in-image samples than the
// plan's windows cover (only under a driver's loop limit), which makes the gather write NaN.
const uint NONE = 0xFFFFFFFFu;
const uint INVALID = 0xFFFFFFFEu;

bool roi_nan(float v) { return (floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u; }

struct RoiAxis {
    float a, e, d;  // the scaled ends and the sample spacing
    uint s, n;      // samples per output, samples in all
    uint size;      // the image's size along the axis
    bool finite;    // both ends and d finite: otherwise no sample reads the image
    bool up;        // coordinates ascend with k (d >= 0)
};

RoiAxis roi_axis(float lo, float hi, float scale, uint out_size, uint cap, uint size) {
    RoiAxis ax;
    // (The scale at run time: SpatialScale 0 times an infinite or NaN corner is NaN, which
    // marks the region as reading nothing.)
    precise float a = lo * run_time(scale);
    precise float e = hi * run_time(scale);
    precise float len = e - a;
    ax.a = a;
    ax.e = e;
    ax.size = size;
    const float q = cr_div(abs(len), float(out_size));
    uint s;
    if (roi_nan(q)) {
        s = MINIMUM;
    } else if (q >= 4294967296.0) {  // Inf too
        s = MAXIMUM;
    } else {
        s = clamp(uint(ceil(q)), MINIMUM, MAXIMUM);
    }
    ax.s = min(s, cap);
    ax.n = out_size * ax.s;
    ax.d = (ALIGNED && ax.n == 1u) ? 0.0 : cr_div(len, float(ALIGNED ? ax.n - 1u : ax.n));
    ax.up = !(ax.d < 0.0);
    // (d is infinite only where L overflowed: then 0 * d would be NaN.)
    ax.finite = finite(a) && finite(e) && finite(ax.d);
    return ax;
}

float roi_coordinate(RoiAxis ax, uint k) {
    if (ALIGNED && ax.n == 1u) {
        precise float middle = (ax.a + ax.e) * 0.5;
        precise float c = middle - INPUT_PIXEL_OFFSET;
        return c;
    }
    precise float t = float(k) - OUTPUT_PIXEL_OFFSET;
    precise float p = t * ax.d;
    precise float u = p + ax.a;
    precise float c = u - INPUT_PIXEL_OFFSET;
    return c;
}

// The sample's tap: -2 below the image (c < -1), size + 1 above (c > size), else floor
// (LINEAR) or roundEven (NEAREST) of the clamped coordinate; `frac` gets l (LINEAR).
int roi_tap(RoiAxis ax, uint k, out float frac) {
    const float c = roi_coordinate(ax, k);
    frac = 0.0;
    if (c < -1.0) return -2;
    if (c > float(ax.size)) return int(ax.size) + 1;
    const float cc = clamp(c, 0.0, float(ax.size - 1u));
    if (!IS_LINEAR) return int(roundEven(cc));
    const float fl = floor(cc);
    frac = cc - fl;  // exact
    return int(fl);
}

int roi_tap(RoiAxis ax, uint k) {
    float frac;
    return roi_tap(ax, k, frac);
}

// The first k in [lo, hi) whose tap is at least (ascending coordinates) or at most
// (descending) `bound`, else hi: the tap is monotone in k.
uint roi_first(RoiAxis ax, uint lo, uint hi, int bound) {
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2u;
        const int t = roi_tap(ax, mid);
        if (ax.up ? t >= bound : t <= bound) {
            hi = mid;
        } else {
            lo = mid + 1u;
        }
    }
    return lo;
}

// The samples k in [lo, hi) whose taps lie in [tap_lo, tap_hi], a range [first, end).
void roi_range(RoiAxis ax, uint lo, uint hi, int tap_lo, int tap_hi, out uint first,
               out uint end) {
    first = roi_first(ax, lo, hi, ax.up ? tap_lo : tap_hi);
    end = max(first, roi_first(ax, first, hi, ax.up ? tap_hi + 1 : tap_lo - 1));
}

// The samples of output o along an axis that read the image (taps in [0, size - 1] within its
// S samples), a range [first, end).
void roi_output_range(RoiAxis ax, uint o, out uint first, out uint end) {
    roi_range(ax, o * ax.s, o * ax.s + ax.s, 0, int(ax.size) - 1, first, end);
}

// X[b, c, row, column] from the element offset of X[b, c, 0, 0].
float x_at(uint base, uint row, uint column) {
    return LOAD(x, base + row * X_STRIDES2 + column * X_STRIDES3);
}

// The push constants of a window of samples (the kernels that walk them): within each
// output's range of in-image rows of samples the offsets [row_begin, row_end), of columns
// [col_begin, col_end); row_limit, col_limit (more gives NaN, or an invalid selection);
// first_window (start anew, else continue what the previous window stored).
#define ROI_WINDOW_PUSH_CONSTANTS \
    uint row_begin;               \
    uint row_end;                 \
    uint col_begin;               \
    uint col_end;                 \
    uint row_limit;               \
    uint col_limit;               \
    uint first_window;

// dY element e's coordinates (region r, channel c, row oy, column ox), row-major over
// {R, C, OH, OW}, as uvec4(r, c, oy, ox).
uvec4 dy_coordinates(uint e) {
    const uint ox = e % DY_SIZES3, rest = e / DY_SIZES3;
    const uint oy = rest % DY_SIZES2, rc = rest / DY_SIZES2;
    return uvec4(rc / DY_SIZES1, rc % DY_SIZES1, oy, ox);
}

// Region r's axes: y from ROI[r, 1], ROI[r, 3]; x from ROI[r, 0], ROI[r, 2].
void roi_axes(uint r, out RoiAxis ay, out RoiAxis ax) {
    const uint base = r * ROI_REGION_STRIDE;
    const float x1 = LOAD(roi, base), y1 = LOAD(roi, base + ROI_COORDINATE_STRIDE);
    const float x2 = LOAD(roi, base + 2u * ROI_COORDINATE_STRIDE);
    const float y2 = LOAD(roi, base + 3u * ROI_COORDINATE_STRIDE);
    ay = roi_axis(y1, y2, SPATIAL_SCALE_Y, DY_SIZES2, CAP_Y, X_SIZES2);
    ax = roi_axis(x1, x2, SPATIAL_SCALE_X, DY_SIZES3, CAP_X, X_SIZES3);
}

// An output's g from its dY: AVERAGE's share dY / (Sy Sx) (count_f = float(Sy) * float(Sx),
// cr_div), MAX's dY whole. One rule for the shares' table and the gather without it.
float roi_g(float dy_value, float count_f) {
    return IS_MAX ? dy_value : cr_div(dy_value, count_f);
}

// A region's axes as the boxes pass stores them for dX's gather (roi_align_grad_boxes.comp), 3
// words of 4: y's a, d, e and S; x's; then y's N, x's N, and each axis's flags (finite: 1,
// up: 2). Reloaded, they are the very values roi_axes computes (bits, not roundings).
// STORED_AXES: the plan made the table (it fits a buffer); else the gather computes them.
layout(constant_id = 33) const bool STORED_AXES = true;
uint roi_flags(RoiAxis ax) { return (ax.finite ? 1u : 0u) | (ax.up ? 2u : 0u); }

void roi_pack_axes(RoiAxis ay, RoiAxis ax, out uvec4 y, out uvec4 x, out uvec4 n) {
    y = uvec4(floatBitsToUint(ay.a), floatBitsToUint(ay.d), floatBitsToUint(ay.e), ay.s);
    x = uvec4(floatBitsToUint(ax.a), floatBitsToUint(ax.d), floatBitsToUint(ax.e), ax.s);
    n = uvec4(ay.n, ax.n, roi_flags(ay), roi_flags(ax));
}

RoiAxis roi_unpack_axis(uvec4 p, uint n, uint flags, uint size) {
    RoiAxis ax;
    ax.a = uintBitsToFloat(p.x);
    ax.d = uintBitsToFloat(p.y);
    ax.e = uintBitsToFloat(p.z);
    ax.s = p.w;
    ax.n = n;
    ax.size = size;
    ax.finite = (flags & 1u) != 0u;
    ax.up = (flags & 2u) != 0u;
    return ax;
}

// roi_pack_axes's inverse.
void roi_unpack_axes(uvec4 y, uvec4 x, uvec4 n, out RoiAxis ay, out RoiAxis ax) {
    ay = roi_unpack_axis(y, n.x, n.z, X_SIZES2);
    ax = roi_unpack_axis(x, n.y, n.w, X_SIZES3);
}

// Store v into element i of a float tensor: float16 rounds once, correctly (half_from_float).
#define STORE_ROUNDED(words, i, v)                                        \
    if (IS_F16) {                                                         \
        STORE_HALF_BITS(words, i, half_from_float(v));                            \
    } else {                                                              \
        (words)[i] = floatBitsToUint(v);                                  \
    }
