"""One-call problems larger than the device's storage buffer range, run as independent pieces.

A kernel binds each tensor as one whole buffer, and a buffer may not exceed the device's
maxStorageBufferRange (128 MiB on lavapipe, 4 GiB on NVIDIA). Along some axes an operator's
outputs depend only on the same slice of its inputs: every axis of an element-wise operator,
BatchNorm's statistic (channel) axes, ResampleGrad's identity axes. A one-call function whose
tensors do not fit cuts the problem along such axes into pieces that do, runs each piece as a
problem of its own, and writes the pieces' outputs into full-size arrays. Each piece computes
what the whole would have computed for those elements, so the results are the operator's own.
A problem that no such cut makes fit is refused before any device work.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Sequence, Tuple

import numpy as np

from ..tensor import buffer_words, fail

Box = Tuple[Tuple[int, int], ...]


def largest_buffer(tensors) -> int:
    """Bytes of the largest device buffer among `tensors`, (bytes per element, shape) pairs
    (the device allocates whole 16-byte units). The one rule both the check of a whole problem
    and the sizing of its pieces use, so a piece never looks too large to itself."""
    return buffer_words(max(item * math.prod(shape) for item, shape in tensors)) * 4


def fits(limit: int, arrays: Dict[str, np.ndarray], outputs: Dict[str, tuple]) -> bool:
    """Whether every tensor of the problem fits in one buffer of `limit` bytes."""
    return largest_buffer([(np.dtype(a.dtype).itemsize, np.shape(a)) for a in arrays.values()]
                          + [(item, shape) for shape, _, item in outputs.values()]) <= limit


def _too_large(operator: str, limit: int, independent: str, nbytes: int):
    fail(operator, "tensor sizes", f"exceed the device's maximum storage buffer range, "
         f"and no cut along independent axes makes them fit (the operator can cut "
         f"{independent})", f"<= {limit} bytes per tensor", f"{nbytes} bytes")


def refuse_unless_a_cut_may_fit(operator: str, limit: int, arrays: Dict[str, np.ndarray],
                                outputs: Dict[str, tuple], axes: Sequence[int],
                                independent: str) -> None:
    """Refuse, from sizes alone, a problem that no cut along `axes` makes fit: pieces one
    element long along each of them would not. For an operator whose independent axes cost
    work to find, `axes` is what sizes alone allow (a superset), checked before that work.
    Arguments as run_in_pieces'."""
    shapes = [(item, shape) for shape, _, item in outputs.values()]
    shapes += [(np.dtype(a.dtype).itemsize, np.shape(a)) for a in arrays.values()]
    if not axes:  # nothing to cut (the tensors' ranks may differ): the whole is the least
        _too_large(operator, limit, independent, largest_buffer(shapes))
    full = [max(s[a] for _, s in shapes) for a in range(len(shapes[0][1]))]
    # As run_in_pieces' piece_bytes: a tensor that does not span an axis counts whole there.
    smallest = largest_buffer((item, [1 if a in axes and n == full[a] else n
                                      for a, n in enumerate(shape)]) for item, shape in shapes)
    if smallest > limit:
        _too_large(operator, limit, independent, smallest)


def run_in_pieces(operator: str, limit: int, arrays: Dict[str, np.ndarray],
                  outputs: Dict[str, tuple], axes: Sequence[int], independent: str,
                  run_piece: Callable[..., Sequence[np.ndarray]]) -> Dict[str, np.ndarray]:
    """Run `run_piece(**input pieces)` on pieces of at most `limit` bytes per tensor.

    arrays: the inputs by name, all of one rank; outputs: name -> (shape, dtype, bytes per
    element that count against the limit, e.g. 4 for a float16 output accumulated in a float32
    scratch); axes: the independent axes, in the order to cut; run_piece returns the outputs
    in `outputs`' order. A tensor is cut along an axis where its size is the problem's there
    (elsewhere every piece gets that axis whole). `independent` says which axes the operator
    can cut (the descriptor's INDEPENDENT_AXES), for the error when no cut makes it fit."""
    shapes = {n: tuple(np.shape(a)) for n, a in arrays.items()}
    shapes.update({n: tuple(shape) for n, (shape, _, _) in outputs.items()})
    items = {n: np.dtype(a.dtype).itemsize for n, a in arrays.items()}
    items.update({n: item for n, (_, _, item) in outputs.items()})
    rank = len(next(iter(shapes.values())))
    full = tuple(max(s[a] for s in shapes.values()) for a in range(rank))

    def spans(n, a):
        return shapes[n][a] == full[a]

    def piece_bytes(box: Box) -> int:
        # A tensor that does not span an axis (size 1 on an independent axis, or the smaller
        # side of a resampled one) is never cut there: it counts whole.
        return largest_buffer((items[n], [hi - lo if spans(n, a) else shapes[n][a]
                                          for a, (lo, hi) in enumerate(box)]) for n in shapes)

    def index(n, box):
        return tuple(slice(lo, hi) if spans(n, a) else slice(None)
                     for a, (lo, hi) in enumerate(box))

    results = {n: np.empty(shape, dtype) for n, (shape, dtype, _) in outputs.items()}
    pieces = []

    def cut(box: Box, rest: Sequence[int]) -> None:
        if piece_bytes(box) <= limit:
            pieces.append(box)
            return
        if not rest:
            _too_large(operator, limit, independent, piece_bytes(box))
        a, later = rest[0], rest[1:]
        lo, hi = box[a]
        unit = piece_bytes(box[:a] + ((lo, lo + 1),) + box[a + 1:])
        step = max(1, limit // unit)
        for start in range(lo, hi, step):
            cut(box[:a] + ((start, min(start + step, hi)),) + box[a + 1:], later)

    cut(tuple((0, f) for f in full), list(axes))  # every piece is checked before any runs
    for box in pieces:
        # run_piece is the one-call function again; its `fits` sizes this piece by the same
        # rule as piece_bytes, so it runs the piece instead of cutting it again.
        outs = run_piece(**{n: np.ascontiguousarray(a[index(n, box)])
                            for n, a in arrays.items()})
        for n, out in zip(outputs, outs):
            results[n][index(n, box)] = np.reshape(out, results[n][index(n, box)].shape)
    return results
