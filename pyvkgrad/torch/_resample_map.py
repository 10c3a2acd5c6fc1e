"""PyTorch's `interpolate` coordinates as DirectML RESAMPLE1 parameters (docs/torch.md).

DirectML (RESAMPLE1, whose exact transpose RESAMPLE_GRAD computes) reads, per output index o,

    x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset        (float32, this order)

and takes clamp(floor(x + 0.5)) (nearest) or the two taps around x (linear). PyTorch computes,
in float32 (for float32 and float16 tensors alike), with s = 1 / scale_factor when a scale
factor reaches the kernel and s = in / out otherwise:

* nearest:        floor(o * s)                                   -> Scale 1/s, offsets (0.5, 0)
* nearest-exact:  floor((o + 0.5) * s)                           -> Scale 1/s, offsets (0.5, -0.5)
* linear, align_corners=False: max(0, (o + 0.5) * s - 0.5)       -> Scale 1/s, offsets (0.5, -0.5)
* linear, align_corners=True:  o * (in - 1) / (out - 1)          -> Scale (out-1)/(in-1), (0, 0)

(with offsets (0.5, 0), floor(x + 0.5) = floor(o / Scale); with (0.5, -0.5) it is
floor((o + 0.5) / Scale).) PyTorch multiplies by s where DirectML divides by Scale, so the two
float32 coordinates can differ in their last bit. For linear that moves a weight by one float32
rounding (a tap that changes sits at weight ~1e-7): within float32 tolerance, never a wrong
tap. For the nearest modes a one-bit difference at an exact integer coordinate moves a whole
output to the neighbouring input, so the nearest taps are not computed from a formula: they
are read off PyTorch's own forward (a probe tensor holding each index), and the parameters are
searched (Scale 1/s or out/in, a tiny nudge of InputPixelOffset up or down) until DirectML's
float32 taps, computed by pyvkgrad's own ResampleGrad table code, equal PyTorch's exactly. Where
no candidate reproduces them (PyTorch rounds some integer coordinates down and others up on
one axis), `InexactResample` is raised: never a silently different gradient.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..ops._resample_grad_tables import axis_map
from ..ops.resample_grad import InterpolationMode

NEAREST_MODES = ("nearest", "nearest-exact")
LINEAR_MODES = ("linear", "bilinear", "trilinear")
SUPPORTED_MODES = NEAREST_MODES + LINEAR_MODES
MODE_RANK = {"linear": 3, "bilinear": 4, "trilinear": 5}  # input ranks PyTorch accepts

# InputPixelOffset nudges tried, in units of the largest coordinate's float32 spacing (ulp).
_NUDGES = (0, 4, -4, 64, -64, 1024, -1024)


class InexactResample(ValueError):
    """PyTorch's nearest taps on some axis cannot be expressed by RESAMPLE1's parameters."""


class AxisParams(NamedTuple):
    """DirectML's parameters for one axis: RESAMPLE1's Scale and pixel offsets."""

    scale: float
    input_pixel_offset: float
    output_pixel_offset: float

    @property
    def identity(self) -> bool:
        return self == IDENTITY


IDENTITY = AxisParams(1.0, 0.0, 0.0)


def _f32(value) -> float:
    return float(np.float32(value))


def kernel_scale(in_size: int, out_size: int, scale_factor: Optional[float]) -> np.float32:
    """PyTorch's `compute_scales_value`: s = float(1 / scale_factor) when a scale factor
    reaches the kernel, else float(in) / out, in float32."""
    if scale_factor is not None and scale_factor > 0:
        return np.float32(1.0 / scale_factor)
    return np.float32(in_size) / np.float32(out_size)


def dml_taps(in_size: int, out_size: int, params: AxisParams) -> np.ndarray:
    """The input index RESAMPLE1 nearest (round half up) reads for each output index, exactly as
    pyvkgrad's ResampleGrad tables compute it."""
    m = axis_map(in_size, out_size, False, params.scale, params.input_pixel_offset,
                 params.output_pixel_offset, None)
    return m.first.astype(np.int64)


def dml_matrix(in_size: int, out_size: int, params: AxisParams, linear: bool) -> np.ndarray:
    """RESAMPLE1 along one axis as a dense (out_size, in_size) float64 matrix W, y = W x: the
    taps and weights pyvkgrad's ResampleGrad tables compute (its gradient is W^T dy)."""
    m = axis_map(in_size, out_size, linear, params.scale, params.input_pixel_offset,
                 params.output_pixel_offset, None)
    w = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    w[rows, m.first] += m.weight_first
    second = m.weight_next != 0
    w[rows[second], m.first[second] + 1] += m.weight_next[second]
    return w


def nearest_candidates(mode: str, in_size: int, out_size: int, scale_factor):
    s = kernel_scale(in_size, out_size, scale_factor)
    scales = []
    for value in (1.0 / float(s),                      # 1/s, the kernel's own scale inverted
                  float(scale_factor) if scale_factor else out_size / in_size,
                  out_size / in_size):
        v = _f32(value)
        if v > 0 and math.isfinite(v) and v not in scales:
            scales.append(v)
    out_off = -0.5 if mode == "nearest-exact" else 0.0
    ulp = float(np.spacing(np.float32(max(in_size, 1))))
    for scale in scales:
        for nudge in _NUDGES:
            yield AxisParams(scale, _f32(0.5 + nudge * ulp), out_off)


def nearest_params(mode: str, in_size: int, out_size: int, scale_factor,
                   taps: np.ndarray) -> AxisParams:
    """Parameters whose RESAMPLE1 nearest taps equal `taps` (PyTorch's, read off its forward)
    exactly; raises InexactResample when none does."""
    taps = np.asarray(taps, np.int64)
    if in_size == out_size and np.array_equal(taps, np.arange(out_size)):
        return IDENTITY
    for params in nearest_candidates(mode, in_size, out_size, scale_factor):
        if np.array_equal(dml_taps(in_size, out_size, params), taps):
            return params
    natural = next(nearest_candidates(mode, in_size, out_size, scale_factor))
    differ = np.flatnonzero(dml_taps(in_size, out_size, natural) != taps)
    raise InexactResample(
        f"pyvkgrad.torch.interpolate: mode={mode!r} from size {in_size} to {out_size}"
        f"{'' if scale_factor is None else f' (scale_factor {scale_factor})'}: PyTorch's "
        f"float32 nearest taps cannot be reproduced by DirectML's RESAMPLE1 parameters "
        f"(with Scale {natural.scale!r} outputs {differ[:8].tolist()} would read a neighbouring "
        f"input; PyTorch rounds integer coordinates of this axis both up and down). "
        f"mode='nearest-exact', or sizes with an integer ratio, are exact; see docs/torch.md")


def linear_params(in_size: int, out_size: int, scale_factor, align_corners: bool) -> AxisParams:
    """Parameters of PyTorch's linear coordinate transform (one float32 rounding apart)."""
    if in_size == out_size:
        return IDENTITY  # PyTorch copies whatever the scale factor (both transforms)
    if align_corners:
        if in_size == 1 or out_size == 1:
            return IDENTITY  # every coordinate is 0 (PyTorch's scale is 0)
        return AxisParams(_f32((out_size - 1) / (in_size - 1)), 0.0, 0.0)
    s = kernel_scale(in_size, out_size, scale_factor)
    return AxisParams(_f32(1.0 / float(s)), 0.5, -0.5)


@functools.lru_cache(maxsize=4096)
def _cached_nearest(mode, in_size, out_size, scale_factor, taps: bytes):
    return nearest_params(mode, in_size, out_size, scale_factor,
                          np.frombuffer(taps, np.int64))


def probe_nearest_taps(torch, F, mode: str, in_sizes: Sequence[int], out_sizes: Sequence[int],
                       size_arg, scale_arg, recompute, device) -> Tuple[np.ndarray, ...]:
    """Per spatial axis, the input index PyTorch's nearest forward reads for each output index:
    F.interpolate, called as the user called it, on a one-channel tensor holding each element's
    index along that axis. Checks the map is separable (the same along every other axis)."""
    rank = len(in_sizes)
    taps = []
    for axis in range(rank):
        shape = [1] * rank
        shape[axis] = in_sizes[axis]
        index = torch.arange(in_sizes[axis], dtype=torch.float32, device=device)
        probe = index.reshape([1, 1] + shape).expand([1, 1] + list(in_sizes)).contiguous()
        out = F.interpolate(probe, size=size_arg, scale_factor=scale_arg, mode=mode,
                            recompute_scale_factor=recompute)
        if tuple(out.shape[2:]) != tuple(out_sizes):
            raise AssertionError("interpolate probe: output sizes differ from the forward's")
        out = out.reshape(list(out_sizes)).movedim(axis, 0).reshape(out_sizes[axis], -1)
        first = out[:, :1]
        if not bool((out == first).all()):
            raise InexactResample(f"pyvkgrad.torch.interpolate: mode={mode!r}: PyTorch's map "
                                  f"along axis {axis + 2} depends on the other axes")
        taps.append(first.reshape(-1).cpu().numpy().astype(np.int64))
    return tuple(taps)


def axis_params(torch, F, mode: str, in_sizes, out_sizes, scale_factors, size_arg, scale_arg,
                recompute, align_corners, device) -> Tuple[AxisParams, ...]:
    """DirectML parameters per spatial axis for one F.interpolate call.

    scale_factors: per axis, the scale factor PyTorch's kernel receives (None where it
    computes in/out itself: `size` given or recompute_scale_factor=True)."""
    if mode in NEAREST_MODES:
        taps = _probe_cached(torch, F, mode, tuple(in_sizes), tuple(out_sizes), size_arg,
                             scale_arg, recompute, str(device))
        return tuple(_cached_nearest(mode, i, o, sf, t.tobytes())
                     for i, o, sf, t in zip(in_sizes, out_sizes, scale_factors, taps))
    return tuple(linear_params(i, o, sf, bool(align_corners))
                 for i, o, sf in zip(in_sizes, out_sizes, scale_factors))


_PROBES: dict = {}


def _probe_cached(torch, F, mode, in_sizes, out_sizes, size_arg, scale_arg, recompute, device):
    key = (mode, in_sizes, out_sizes, _hashable(size_arg), _hashable(scale_arg), recompute,
           device)
    taps = _PROBES.get(key)
    if taps is None:
        with torch.no_grad():
            taps = probe_nearest_taps(torch, F, mode, in_sizes, out_sizes, size_arg, scale_arg,
                                      recompute, device)
        if len(_PROBES) > 4096:
            _PROBES.clear()
        _PROBES[key] = taps
    return taps


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


def interpolation_mode(mode: str) -> InterpolationMode:
    return (InterpolationMode.NEAREST_NEIGHBOR if mode in NEAREST_MODES
            else InterpolationMode.LINEAR)
