"""The float64 oracles of RESAMPLE_GRAD and RESAMPLE_GRAD1, and of the forward RESAMPLE1 they
differentiate (docs/semantics.md §3 and §12): coordinates in float32 as on the device
(pyvkgrad/reference.py says why), everything after them in float64."""

from typing import Optional, Sequence

import numpy as np
from numpy.typing import ArrayLike

from . import defaults
from ._reference_common import Named, _f64, _name

_MODES = ("nearest_neighbor", "linear")
_ROUNDING = (None, "decreasing", "increasing")


def _axis_coordinates(out_size, scale, in_off, out_off):
    """x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset, in float32, in this order."""
    o = np.arange(out_size).astype(np.float32)
    t = o - np.float32(out_off)
    t = t / np.float32(scale)
    return t - np.float32(in_off)  # float32 array


def axis_weights(in_size: int, out_size: int, mode: str, scale: float, in_off: float,
                 out_off: float, rounding_direction: Optional[str]) -> np.ndarray:
    """Per-dimension forward weights W[o, i] (shape [out_size, in_size], float64).

    Forward along this axis is ``y = W @ x``, its gradient ``dx = W.T @ dy``.
    Nearest: W[o, i(o)] = 1 with i(o) = clamp(round(x)) (RESAMPLE1: floor(x + 0.5), ties up;
    RESAMPLE2 "decreasing": floor(x); "increasing": ceil(x)).
    Linear: taps floor(x) with 1 - f and floor(x) + 1 with f (f, 1 - f in float32), each tap
    clamped to [0, In-1]; weights of taps that land on the same element add up.
    """
    x32 = _axis_coordinates(out_size, scale, in_off, out_off)
    # float32 -> float64 is exact, so the rounding below acts on the exact float32 coordinate
    # (a float32 "x + 0.5" could itself round a value just below a tie up to the tie).
    x = x32.astype(np.float64)
    rows = np.arange(out_size)
    w = np.zeros((out_size, in_size), dtype=np.float64)
    last = in_size - 1
    if mode == "nearest_neighbor":
        if rounding_direction is None:
            idx = np.floor(x + 0.5)
        elif rounding_direction == "decreasing":
            idx = np.floor(x)
        else:
            idx = np.ceil(x)
        # Clip in float before the int conversion so far out-of-range coordinates cannot overflow.
        idx = np.clip(idx, 0, last).astype(np.int64)
        w[rows, idx] = 1.0
    else:
        fl32 = np.floor(x32)
        f = x32 - fl32  # float32, exact (the fraction of a float32 is representable)
        # A coordinate that overflowed float32 (Inf - Inf) clamps to the edge with weight 1.
        f[~np.isfinite(x32)] = 0
        w0 = (np.float32(1) - f).astype(np.float64)  # 1 - f rounded to float32, as on the device
        w1 = f.astype(np.float64)
        fl = fl32.astype(np.float64)
        i0 = np.clip(fl, 0, last).astype(np.int64)
        i1 = np.clip(fl + 1, 0, last).astype(np.int64)
        # add.at, not assignment: at a clamped edge both taps hit one element and must add.
        np.add.at(w, (rows, i0), w0)
        np.add.at(w, (rows, i1), w1)
    return w


def _resample_args(x_sizes, y_sizes, mode, scales, in_offs, out_offs, rounding_direction):
    """Check the parameters of a resample whose input has `x_sizes` and whose output has
    `y_sizes`; returns them with the one-call functions' defaults filled in and the mode and
    rounding direction as names."""
    rank = len(x_sizes)
    if not 1 <= rank <= 4:
        raise ValueError(f"resample: rank must be 1..4, got {rank}")
    if len(y_sizes) != rank:
        raise ValueError(f"resample: sizes has {len(y_sizes)} entries, tensor rank is {rank}")
    scales, in_offs, out_offs = defaults.resample_grad(y_sizes, x_sizes, scales, in_offs,
                                                       out_offs)
    mode, rounding_direction = _name(mode), _name(rounding_direction)
    for name, arr in (("scales", scales), ("input_pixel_offsets", in_offs),
                      ("output_pixel_offsets", out_offs)):
        if len(arr) != rank:
            raise ValueError(f"resample: {name} has {len(arr)} entries, tensor rank is {rank}")
    if mode not in _MODES:
        raise ValueError(f"resample: interpolation_mode must be one of {_MODES}, got {mode!r}")
    if rounding_direction not in _ROUNDING:
        raise ValueError(f"resample: rounding_direction must be one of {_ROUNDING}, "
                         f"got {rounding_direction!r}")
    for s in scales:
        if not (np.isfinite(s) and s > 0):
            raise ValueError(f"resample: scales must be finite and > 0, got {s!r}")
    return mode, scales, in_offs, out_offs, rounding_direction


def _apply_along(mats, t):
    """Apply matrix mats[d] (shape [new_d, old_d]) along axis d of t, for every axis."""
    for d, m in enumerate(mats):
        t = np.moveaxis(np.tensordot(m, t, axes=([1], [d])), 0, d)
    return t


def resample1(input: ArrayLike, output_sizes: Sequence[int], *,
              interpolation_mode: Named = "nearest_neighbor",
              scales: Optional[Sequence[float]] = None,
              input_pixel_offsets: Optional[Sequence[float]] = None,
              output_pixel_offsets: Optional[Sequence[float]] = None,
              rounding_direction: Optional[Named] = None) -> np.ndarray:
    """Forward DML_RESAMPLE1 (DML_RESAMPLE2 when rounding_direction is given).

    out = (W_0 (x) W_1 (x) ... ) x: each dimension d is resampled by its own matrix
    W_d = axis_weights(In_d, Out_d, ...), i.e. separable nearest / N-linear interpolation.
    Defaults as resample_grad's (pyvkgrad/defaults.py): scale = output size / input size,
    half-pixel offsets.
    """
    x = _f64(input)
    mode, scales, in_offs, out_offs, rd = _resample_args(
        x.shape, output_sizes, interpolation_mode, scales, input_pixel_offsets,
        output_pixel_offsets, rounding_direction)
    mats = [axis_weights(x.shape[d], int(output_sizes[d]), mode, scales[d], in_offs[d],
                          out_offs[d], rd)
            for d in range(x.ndim)]
    return _apply_along(mats, x)


def resample_grad(input_gradient: ArrayLike, output_gradient_sizes: Sequence[int], *,
                  interpolation_mode: Named = "nearest_neighbor",
                  scales: Optional[Sequence[float]] = None,
                  input_pixel_offsets: Optional[Sequence[float]] = None,
                  output_pixel_offsets: Optional[Sequence[float]] = None,
                  rounding_direction: Optional[Named] = None) -> np.ndarray:
    """DML_RESAMPLE_GRAD (DML_RESAMPLE_GRAD1 with rounding_direction): dX = W^T dY.

    The parameters are those of the forward being differentiated (docs/semantics.md §6.1);
    input_gradient has the forward output's shape, the result has shape output_gradient_sizes
    (the forward input's).  Built from the same per-axis matrices as resample1, transposed, so it
    is the exact adjoint: <resample1(x), dY> == <x, resample_grad(dY)>.  The signature and
    defaults are pyvkgrad.resample_grad's (pyvkgrad/defaults.py), less its execution options.
    """
    dy = _f64(input_gradient)
    sizes = tuple(int(s) for s in output_gradient_sizes)
    mode, scales, in_offs, out_offs, rd = _resample_args(
        sizes, dy.shape, interpolation_mode, scales, input_pixel_offsets, output_pixel_offsets,
        rounding_direction)
    mats = [axis_weights(sizes[d], dy.shape[d], mode, scales[d], in_offs[d], out_offs[d], rd).T
            for d in range(dy.ndim)]
    return _apply_along(mats, dy)


def resample_grad1(input_gradient: ArrayLike, output_gradient_sizes: Sequence[int], *,
                   interpolation_mode: Named = "nearest_neighbor",
                   rounding_direction: Named,
                   scales: Optional[Sequence[float]] = None,
                   input_pixel_offsets: Optional[Sequence[float]] = None,
                   output_pixel_offsets: Optional[Sequence[float]] = None) -> np.ndarray:
    """DML_RESAMPLE_GRAD1: dX = W^T dY for the forward RESAMPLE2, whose nearest neighbour rounds
    x by the mandatory rounding direction ("decreasing": floor, "increasing": ceil; linear
    ignores it).  resample_grad with that direction (docs/semantics.md §12); the signature and
    defaults are pyvkgrad.resample_grad1's, less its execution options."""
    if _name(rounding_direction) not in _ROUNDING[1:]:
        raise ValueError(f"resample_grad1: rounding_direction must be one of {_ROUNDING[1:]}, "
                         f"got {rounding_direction!r}")
    return resample_grad(input_gradient, output_gradient_sizes,
                         interpolation_mode=interpolation_mode, scales=scales,
                         input_pixel_offsets=input_pixel_offsets,
                         output_pixel_offsets=output_pixel_offsets,
                         rounding_direction=rounding_direction)
