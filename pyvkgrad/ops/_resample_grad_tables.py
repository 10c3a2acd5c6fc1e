"""ResampleGrad's host tables: per axis, the forward map of RESAMPLE1 and its transpose,
computed in exact float32 numpy (the rules: resample_grad.py's docstring), and the builder that
packs them into one constant table for the kernels.

The operator's name and its parameter enums live here, at the bottom of the ResampleGrad
modules (resample_grad.py re-exports them), so that the descriptor, the plans and the tables
share them without an import cycle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..plan import Scratch

OPERATOR = "RESAMPLE_GRAD"


class InterpolationMode(enum.IntEnum):
    """`DML_INTERPOLATION_MODE` (DirectML's values)."""

    NEAREST_NEIGHBOR = 0
    LINEAR = 1


class AxisDirection(enum.IntEnum):
    """`DML_AXIS_DIRECTION` as DML_RESAMPLE_GRAD1's RoundingDirection (DirectML's values):
    INCREASING rounds a fractional coordinate up (ceil), DECREASING down (floor)."""

    INCREASING = 0
    DECREASING = 1


@dataclass(frozen=True)
class AxisMap:
    """The forward map of one axis and its transpose.

    Forward (per output o): first tap `first[o]`, its weight `weight_first[o]`, and the weight
    of tap first[o] + 1 in `weight_next[o]` (0: a single tap; taps clamped onto one element are
    merged, their weights added once in float64 and rounded to float32).
    Transpose (per input i): outputs begin[i] .. begin[i] + counts[i+1] - counts[i] - 1 read i,
    with weights weights[counts[i]:counts[i+1]]. `begin` is None when it equals counts[:-1]
    (nearest: the ranges partition the outputs in order).
    """

    first: np.ndarray  # uint32 [Out]
    weight_first: np.ndarray  # float32 [Out]
    weight_next: np.ndarray  # float32 [Out]
    begin: Optional[np.ndarray]  # uint32 [In] or None
    counts: np.ndarray  # uint32 [In + 1]
    weights: np.ndarray  # float32 [entries]
    identity: bool


# An identity axis's map: the kernels use no table for it (IDENTITY), so it holds none.
_NO_TABLE = np.zeros(0, np.uint32)
IDENTITY_MAP = AxisMap(_NO_TABLE, _NO_TABLE.view(np.float32), _NO_TABLE.view(np.float32), None,
                       _NO_TABLE, _NO_TABLE.view(np.float32), True)


def axis_coordinates(out_size: int, scale: float, in_off: float, out_off: float) -> np.ndarray:
    """x(o) = (o - OutputPixelOffset) / Scale - InputPixelOffset in float32, in this order
    (numpy's float32 arithmetic is correctly rounded, so this is the exact float32 value)."""
    return _coordinates(np.arange(out_size, dtype=np.int64), scale, in_off, out_off)


def _coordinates(outputs: np.ndarray, scale: float, in_off: float, out_off: float) -> np.ndarray:
    """axis_coordinates of the outputs `outputs` (int64)."""
    o = outputs.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = o - np.float32(out_off)
        t = t / np.float32(scale)
        return t - np.float32(in_off)


def _nearest_taps(x32: np.ndarray, last: int, rounding) -> np.ndarray:
    """Nearest neighbour's input index (int64) of each coordinate."""
    # On the exact float32 value, in float64 (a float32 x + 0.5 could round up to a tie).
    x = x32.astype(np.float64)
    if rounding is None:
        idx = np.floor(x + 0.5)
    elif rounding == AxisDirection.DECREASING:
        idx = np.floor(x)
    else:
        idx = np.ceil(x)
    return np.clip(idx, 0, last).astype(np.int64)  # clip in float: no int overflow


def _linear_taps(x32: np.ndarray, last: int):
    """Linear's taps of each coordinate: (i0, i1, weight of i0, weight of i1), before taps
    clamped onto one element are merged."""
    finite = np.isfinite(x32)
    xs = np.where(finite, x32, np.float32(0))
    fl32 = np.floor(xs)
    f = xs - fl32  # exact in float32
    w0 = np.float32(1) - f  # rounded to float32, as the oracle does
    # A coordinate that overflowed float32 sits beyond the edge: both taps on the edge element.
    fl = np.where(finite, fl32.astype(np.float64), np.where(x32 > 0, last, -1))
    i0 = np.clip(fl, 0, last).astype(np.int64)
    i1 = np.clip(fl + 1, 0, last).astype(np.int64)
    return i0, i1, w0, f


_IDENTITY_CHUNK = 2**20  # outputs per step of is_identity


def is_identity(size, linear, scale, in_off, out_off, rounding) -> bool:
    """Whether the map of an axis of `size` inputs and outputs is the identity (o reads exactly
    i, with weight 1 and no second tap), as `axis_map` decides it; in chunks, stopping at the
    first output that is not, so a long axis costs no table of its length."""
    for start in range(0, size, _IDENTITY_CHUNK):
        outputs = np.arange(start, min(start + _IDENTITY_CHUNK, size), dtype=np.int64)
        x32 = _coordinates(outputs, scale, in_off, out_off)
        if not linear:
            same = np.array_equal(_nearest_taps(x32, size - 1, rounding), outputs)
        else:
            i0, i1, w0, w1 = _linear_taps(x32, size - 1)
            # A tap merged with its clamped neighbour has weight w0 + w1 (see axis_map).
            wa = np.where(i0 == i1, (w0.astype(np.float64) + w1).astype(np.float32), w0)
            same = (np.array_equal(i0, outputs) and bool(np.all(wa == 1))
                    and not np.any((i0 != i1) & (w1 != 0)))
        if not same:
            return False
    return True


def axis_map(in_size, out_size, linear, scale, in_off, out_off, rounding) -> AxisMap:
    """The AxisMap of an axis of `in_size` inputs read by `out_size` outputs (dX's and dY's
    sizes), with one axis's parameters (`rounding`: None or an AxisDirection, nearest only)."""
    x32 = axis_coordinates(out_size, scale, in_off, out_off)
    last = in_size - 1
    outputs = np.arange(out_size, dtype=np.int64)
    if not linear:
        first = _nearest_taps(x32, last, rounding)
        wa = np.ones(out_size, np.float32)
        wb = np.zeros(out_size, np.float32)
        # Monotone, so the outputs reading i are the range [counts[i], counts[i+1]).
        counts = np.searchsorted(first, np.arange(in_size + 1), side="left")
        identity = in_size == out_size and bool(np.array_equal(first, outputs))
        return AxisMap(u32(first), wa, wb, None, u32(counts), np.ones(out_size, np.float32),
                       identity)
    i0, i1, w0, w1 = _linear_taps(x32, last)
    merged = i0 == i1
    if not np.all(merged | (i1 == i0 + 1)):
        raise AssertionError("resample_grad: linear taps are not adjacent")
    wa = np.where(merged, (w0.astype(np.float64) + w1.astype(np.float64)).astype(np.float32),
                  w0).astype(np.float32)
    wb = np.where(merged, np.float32(0), w1).astype(np.float32)
    # Transpose: (input, output, weight) entries, zero weights dropped, sorted by input then
    # output. The map is monotone, so each input's outputs are consecutive.
    second = wb != 0
    ent_i = np.concatenate([i0, i0[second] + 1])
    ent_o = np.concatenate([outputs, outputs[second]])
    ent_w = np.concatenate([wa, wb[second]])
    keep = ent_w != 0
    ent_i, ent_o, ent_w = ent_i[keep], ent_o[keep], ent_w[keep]
    order = np.lexsort((ent_o, ent_i))
    ent_i, ent_o, ent_w = ent_i[order], ent_o[order], ent_w[order]
    per_input = np.bincount(ent_i, minlength=in_size)
    counts = np.concatenate([[0], np.cumsum(per_input)])
    begin = np.zeros(in_size, np.int64)
    nonempty = per_input > 0
    begin[nonempty] = ent_o[counts[:-1][nonempty]]
    if not np.array_equal(ent_o - begin[ent_i], np.arange(ent_o.size) - counts[ent_i]):
        raise AssertionError("resample_grad: contributor ranges are not contiguous")
    identity = (in_size == out_size and bool(np.array_equal(i0, outputs))
                and bool(np.all(wa == 1)) and not second.any())
    return AxisMap(u32(i0), wa, wb, u32(begin), u32(counts), ent_w.astype(np.float32),
                   identity)


def u32(values) -> np.ndarray:
    """`values` as uint32, asserting that each fits."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >= 2**32):
        raise AssertionError("resample_grad: table entry out of uint32 range")
    return values.astype(np.uint32)


class TableBuilder:
    """Concatenates uint32 arrays into one constant table; `add` returns the word offset."""

    def __init__(self):
        self._parts = []
        self._size = 0

    def add(self, words: np.ndarray) -> int:
        offset = self._size
        self._parts.append(np.asarray(words, dtype=np.uint32).ravel())
        self._size += self._parts[-1].size
        return offset

    def scratch(self) -> Scratch:
        words = (np.concatenate(self._parts) if self._parts else np.zeros(0, np.uint32))
        if words.size == 0:  # every axis is the identity: bind a dummy table
            words = np.zeros(4, np.uint32)
        return Scratch("tables", 4 * words.size, words=words)

