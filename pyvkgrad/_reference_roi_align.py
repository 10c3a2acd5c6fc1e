"""The float64 oracle of ROI_ALIGN_GRAD (docs/semantics.md §16): its samples' coordinates and
values in float32 as the device computes them, the gradients in float64."""

from typing import NamedTuple

import numpy as np

from . import defaults
from ._reference_common import _f64, _name

_ROI_REDUCTIONS = {"average": "average", "max": "max", 2: "average", 7: "max"}
_ROI_MODES = {"nearest_neighbor": "nearest_neighbor", "linear": "linear", 0: "nearest_neighbor",
              1: "linear"}


def roi_samples_per_output(length, out_size: int, minimum: int, maximum: int) -> int:
    """S along one axis of a region of float32 length L: clamp(ceil(|L| / O), Minimum, Maximum)
    with |L| / O divided in float32 (a NaN quotient takes Minimum, an infinite one Maximum),
    capped at 2^24 // O (defaults.ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES)."""
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.float32(abs(np.float32(length))) / np.float32(out_size)
    if np.isnan(q):
        s = minimum
    elif np.isinf(q):
        s = maximum
    else:
        s = min(max(int(np.ceil(q)), minimum), maximum)
    return min(s, max(1, defaults.ROI_ALIGN_GRAD_MAX_AXIS_SAMPLES // out_size))


class _RoiAxis(NamedTuple):
    """One region's samples along one axis (N = O S of them, k = 0 .. N-1)."""

    samples: int  # S, per output
    coordinates: np.ndarray  # c(k), float32
    t: np.ndarray  # dc/de (float64): (k - OutputPixelOffset) / N, or / (N - 1), or 1/2
    inside: np.ndarray  # -1 <= c <= size: the sample reads the image
    clamped: np.ndarray  # c outside [0, size - 1] (its taps do not move with c)
    low: np.ndarray  # tap floor(clamp(c)), or the nearest index
    high: np.ndarray  # tap min(low + 1, size - 1) (nearest: low)
    w_low: np.ndarray  # float32 weights: 1 - l and l (nearest: 1 and 0)
    w_high: np.ndarray


def _roi_axis(lo, hi, scale, out_size, size, minimum, maximum, aligned, in_off, out_off,
              linear) -> _RoiAxis:
    """The samples of one axis, every coordinate in float32 in the documented order:
    a = lo*scale, e = hi*scale, L = e - a; d = L / N (aligned: L / (N - 1));
    c(k) = ((k - OutputPixelOffset) * d + a) - InputPixelOffset (aligned, N = 1: (a + e) * 0.5
    - InputPixelOffset)."""
    f = np.float32
    with np.errstate(all="ignore"):
        a, e = f(f(lo) * f(scale)), f(f(hi) * f(scale))
        length = f(e - a)
        s = roi_samples_per_output(length, out_size, minimum, maximum)
        n = out_size * s
        k = np.arange(n, dtype=np.float32)  # exact: n <= 2^24
        if not (np.isfinite(a) and np.isfinite(e)):
            c = np.full(n, np.nan, np.float32)
        elif aligned and n == 1:
            c = np.array([f(f(a + e) * f(0.5)) - f(in_off)], np.float32)
        else:
            d = f(length / f(n - 1 if aligned else n))
            c = (((k - f(out_off)) * d) + a) - f(in_off)
        kk = np.arange(n, dtype=np.float64) - float(f(out_off))
        t = np.full(n, 0.5) if aligned and n == 1 else kk / (n - 1 if aligned else n)
        inside = (c >= -1) & (c <= size)
        clamped = (c < 0) | (c > size - 1)
        cc = np.clip(np.where(inside, c, 0), 0, size - 1).astype(np.float32)
    if linear:
        low = np.floor(cc).astype(np.int64)
        high = np.minimum(low + 1, size - 1)
        frac = (cc - low.astype(np.float32)).astype(np.float32)  # exact
        w_low, w_high = (f(1) - frac).astype(np.float32), frac
    else:
        low = np.rint(cc).astype(np.int64)  # half to even
        high = low
        w_low, w_high = np.ones(n, np.float32), np.zeros(n, np.float32)
    return _RoiAxis(s, c, t, inside, clamped, low, high, w_low, w_high)


def _roi_tap_matrix(axis: _RoiAxis, size: int) -> np.ndarray:
    """[N, size]: the weight with which each sample reads each index (0 outside the image)."""
    m = np.zeros((axis.low.size, size))
    rows = np.nonzero(axis.inside)[0]
    np.add.at(m, (rows, axis.low[rows]), axis.w_low[rows].astype(np.float64))
    np.add.at(m, (rows, axis.high[rows]), axis.w_high[rows].astype(np.float64))
    return m


def _roi_sample_values(x: np.ndarray, ay: _RoiAxis, ax: _RoiAxis, linear: bool) -> np.ndarray:
    """[C, Ny, Nx] float32: each sample's value as the device computes it (MAX compares these):
    nearest X[low_y, low_x]; linear ((w00 TL + w01 TR) + w10 BL) + w11 BR, each weight
    w_ij = w_i(y) * w_j(x) and each product and sum rounded to float32."""
    yl, yh, xl, xh = ay.low[:, None], ay.high[:, None], ax.low[None, :], ax.high[None, :]
    if not linear:
        return x[:, yl, xl]
    with np.errstate(all="ignore"):
        w = [[(ay.w_low[:, None] * ax.w_low[None, :]), (ay.w_low[:, None] * ax.w_high[None, :])],
             [(ay.w_high[:, None] * ax.w_low[None, :]), (ay.w_high[:, None] * ax.w_high[None, :])]]
        v = w[0][0] * x[:, yl, xl] + w[0][1] * x[:, yl, xh]
        v = v + w[1][0] * x[:, yh, xl]
        return v + w[1][1] * x[:, yh, xh]


def roi_align_grad(input, input_gradient, roi, batch_indices, output_gradient_sizes, *,
                   reduction_function="average", interpolation_mode="linear",
                   spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                   output_pixel_offset=-0.5, minimum_samples_per_output=1,
                   maximum_samples_per_output=2**32 - 1, align_regions_to_corners=False,
                   roi_gradient=False):
    """DML_ROI_ALIGN_GRAD: (dX, dROI or None) of ROI_ALIGN1, float64: dX of
    output_gradient_sizes {B, C, H, W}, dROI (with roi_gradient) in roi's shape. input: X
    (needed for MAX and dROI); input_gradient: dY {R, C, OH, OW}; roi: R rows [x1, y1, x2, y2]
    (any shape of R * 4 values); batch_indices: R values (a region whose index is outside
    [0, B) adds nothing and its dROI row is 0).

    Each region's samples (`_roi_axis`, float32 coordinates) read the image through their taps;
    AVERAGE splits dY[r, c, oy, ox] equally over its Sy Sx samples, MAX gives it to the first
    largest in-image sample (float32 values, `_roi_sample_values`; the first NaN wins); samples
    outside the image add nothing. dROI (linear only; nearest 0) differentiates each sample's
    value with the one-sided neighbours floor/ceil of its clamped coordinate."""
    return _roi_align_grad(False, **locals())


def roi_align_grad_magnitude(input, input_gradient, *args, **kwargs):
    """roi_align_grad's outputs as the sums of their terms' absolute values (a tolerance's
    magnitude): dX on |dY| (its weights are positive), dROI with |dY|, |X| for each X in a
    difference, |t| + |1 - t| for either factor and |SpatialScale|."""
    return _roi_align_grad(True, input, np.abs(_f64(input_gradient)), *args, **kwargs)


def _roi_align_grad(absolute, input, input_gradient, roi, batch_indices, output_gradient_sizes,
                    *, reduction_function="average", interpolation_mode="linear",
                    spatial_scale_x=1.0, spatial_scale_y=1.0, input_pixel_offset=0.5,
                    output_pixel_offset=-0.5, minimum_samples_per_output=1,
                    maximum_samples_per_output=2**32 - 1, align_regions_to_corners=False,
                    roi_gradient=False):
    reduction = _ROI_REDUCTIONS[_name(reduction_function)]
    linear = _ROI_MODES[_name(interpolation_mode)] == "linear"
    dy = _f64(input_gradient)
    rois = np.asarray(roi).astype(np.float32).reshape(-1, 4)
    batch = np.asarray(batch_indices).reshape(-1).astype(np.int64)
    bsz, channels, height, width = (int(s) for s in output_gradient_sizes)
    regions, _, out_h, out_w = dy.shape
    x = None if input is None else np.asarray(input).astype(np.float32)
    dx = np.zeros((bsz, channels, height, width))
    droi = np.zeros((regions, 4))
    sx, sy = float(np.float32(spatial_scale_x)), float(np.float32(spatial_scale_y))
    common = (minimum_samples_per_output, maximum_samples_per_output,
              bool(align_regions_to_corners), input_pixel_offset, output_pixel_offset, linear)
    for r in range(regions):
        b = int(batch[r])
        if not 0 <= b < bsz:
            continue
        ax = _roi_axis(rois[r, 0], rois[r, 2], spatial_scale_x, out_w, width, *common)
        ay = _roi_axis(rois[r, 1], rois[r, 3], spatial_scale_y, out_h, height, *common)
        # q[c, ky, kx]: the share of dY each sample passes on (0 for samples outside).
        inside = ay.inside[:, None] & ax.inside[None, :]
        cell = np.repeat(np.repeat(dy[r], ay.samples, 1), ax.samples, 2)  # dY per sample
        if reduction == "average":
            q = cell * inside / (ay.samples * ax.samples)
        else:
            values = _roi_sample_values(x[b], ay, ax, linear)
            q = np.zeros_like(cell)
            for oy in range(out_h):
                for ox in range(out_w):
                    ys = slice(oy * ay.samples, (oy + 1) * ay.samples)
                    xs = slice(ox * ax.samples, (ox + 1) * ax.samples)
                    where = np.argwhere(inside[ys, xs])
                    if not where.size:
                        continue
                    v = values[:, ys, xs][:, where[:, 0], where[:, 1]]
                    best = where[np.argmax(v, axis=1)]  # first largest; the first NaN wins
                    for c in range(channels):
                        ky, kx = best[c] + (oy * ay.samples, ox * ax.samples)
                        q[c, ky, kx] = dy[r, c, oy, ox]
        with np.errstate(invalid="ignore"):
            dx[b] += np.einsum("cyx,yh,xw->chw", q, _roi_tap_matrix(ay, height),
                               _roi_tap_matrix(ax, width))
        if roi_gradient and linear:
            droi[r] = _roi_corner_gradient(x[b], q, ay, ax, sx, sy, absolute)
    return dx, (droi.reshape(np.shape(roi)) if roi_gradient else None)


def _roi_corner_gradient(x, q, ay: _RoiAxis, ax: _RoiAxis, sx: float, sy: float,
                         absolute: bool = False) -> np.ndarray:
    """d(sum dY Y)/d[x1, y1, x2, y2] of one region: with the floor/ceil neighbours of each
    sample's clamped coordinate, gy = (1-lx)(BL-TL) + lx(BR-TR), gx = (1-ly)(TR-TL) + ly(BR-BL)
    (0 along an axis where the coordinate was clamped), then per sample share q:
    dx1 += q gx (1-tx) Sx, dx2 += q gx tx Sx, dy1 += q gy (1-ty) Sy, dy2 += q gy ty Sy."""
    def neighbours(axis, size):
        c = np.clip(np.where(axis.inside, axis.coordinates, 0), 0, size - 1).astype(np.float64)
        return np.floor(c).astype(np.int64), np.ceil(c).astype(np.int64), c - np.floor(c)
    yf, yc, ly = neighbours(ay, x.shape[1])
    xf, xc, lx = neighbours(ax, x.shape[2])
    x = x.astype(np.float64)
    tl, tr = x[:, yf[:, None], xf[None, :]], x[:, yf[:, None], xc[None, :]]
    bl, br = x[:, yc[:, None], xf[None, :]], x[:, yc[:, None], xc[None, :]]
    ly, lx = ly[:, None], lx[None, :]
    f = np.abs if absolute else (lambda v: v)
    minus = np.add if absolute else np.subtract  # |a - b| <= |a| + |b|
    with np.errstate(invalid="ignore"):
        # (0 where clamped, as a choice rather than a product: 0 even for Inf or NaN taps)
        gy = np.where(ay.clamped[:, None], 0.0,
                      (1 - lx) * minus(f(bl), f(tl)) + lx * minus(f(br), f(tr)))
        gx = np.where(ax.clamped[None, :], 0.0,
                      (1 - ly) * minus(f(tr), f(tl)) + ly * minus(f(br), f(bl)))
        qy, qx = (f(q) * gy).sum(axis=(0, 2)), (f(q) * gx).sum(axis=(0, 1))  # per ky, per kx
    if absolute:  # t and 1 - t are rounded on the device: |1 - t| + |t| bounds either factor
        wx, wy = np.abs(1 - ax.t) + np.abs(ax.t), np.abs(1 - ay.t) + np.abs(ay.t)
        x_part, y_part = np.sum(qx * wx) * abs(sx), np.sum(qy * wy) * abs(sy)
        return np.array([x_part, y_part, x_part, y_part])
    return np.array([np.sum(qx * (1 - ax.t)) * sx, np.sum(qy * (1 - ay.t)) * sy,
                     np.sum(qx * ax.t) * sx, np.sum(qy * ay.t) * sy])
