"""SLICE_GRAD's parts of its operator-table record (operators.py): the case generator, the
descriptor of a case and its inverse, and the examples of valid and invalid window fields for
the descriptor fuzzing. Nothing here touches a device."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from .operator_record import EXACT, Case
from .ops.slice_grad import DATA_TYPES, SliceGradDesc
from .tensor import DataType, TensorDesc

# Every data type SLICE_GRAD takes, as numpy types (`Operator.dtypes`), and its tolerances:
# a copy, so the oracle's bits exactly in every type.
SLICE_GRAD_DTYPES = tuple(t.numpy_dtype.type for t in DATA_TYPES)
SLICE_GRAD_TOLERANCES = {np.dtype(dtype).name: EXACT for dtype in SLICE_GRAD_DTYPES}
_STRIDES = (1, 1, -1, 2, -2, 3, -3)


def slice_grad_values(rng: np.random.Generator, shape: Tuple[int, ...], dtype) -> np.ndarray:
    """dY: floats standard normal with a few NaN, +-Inf and -0; integers over the whole type."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        dy = rng.standard_normal(shape).astype(dtype)
        special = rng.random(shape) < 0.05
        dy[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], dtype),
                                 np.count_nonzero(special))
        return dy
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype, endpoint=True)


def slice_grad_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype) -> Case:
    """dY of `shape`; per dimension a window stride from +-1 to +-3 (1 most often), a window
    just long enough for dY's size or up to |stride| - 1 longer, an offset from 0 to 3 and dX
    up to 4 longer than offset + size; a third of the dimensions the whole axis (offset 0,
    stride 1, dX's size dY's), along which the one-call function may cut, and always the first
    one longer than 1 (a batch axis), so that every case can be cut under a small buffer limit
    (tests/test_slice_grad.py puts windows on every axis)."""
    dy = slice_grad_values(rng, shape, dtype)
    sizes, offsets, window_sizes, strides = [], [], [], []
    batch = next((d for d, n in enumerate(shape) if n > 1), None)
    for d, n in enumerate(shape):
        if rng.random() < 1 / 3 or d == batch:
            stride, size, offset, extra = 1, n, 0, 0
        else:
            stride = int(rng.choice(_STRIDES))
            size = (n - 1) * abs(stride) + 1 + int(rng.integers(abs(stride)))
            offset, extra = int(rng.integers(4)), int(rng.integers(5))
        sizes.append(offset + size + extra)
        offsets.append(offset)
        window_sizes.append(size)
        strides.append(stride)
    label = (f"{np.dtype(dtype).name} {list(shape)} -> {sizes}, offsets {offsets}, sizes "
             f"{window_sizes}, strides {strides}")
    return Case((dy, tuple(sizes), tuple(offsets), tuple(window_sizes), tuple(strides)),
                label=label)


def slice_grad_describe(case: Case) -> SliceGradDesc:
    dy, sizes, offsets, window_sizes, strides = case.args
    data_type = DataType.from_numpy(dy.dtype, "", "", DataType)
    return SliceGradDesc(TensorDesc(data_type, dy.shape), TensorDesc(data_type, sizes),
                         offsets, window_sizes, strides)


def slice_grad_call(desc: SliceGradDesc, values: Dict[str, np.ndarray]) -> Tuple[tuple, dict]:
    return ((values["input_gradient_tensor"], desc.output_gradient_tensor.sizes,
             desc.input_window_offsets, desc.input_window_sizes, desc.input_window_strides),
            {})


def slice_grad_parameters(rank: int) -> Dict[str, Tuple[list, list]]:
    """Window fields for a descriptor of `rank` dimensions: valid ones (valid together with
    the fuzzed tensors or not, which the descriptor decides) and ones never valid."""
    return {"input_window_offsets": ([(0,) * rank, (1,) * rank],
                                     [(-1,) * rank, (0,) * (rank + 1), "0", (0.5,) * rank]),
            "input_window_sizes": ([(1,) * rank, (4,) * rank],
                                   [(0,) * rank, None, (2**32,) * rank]),
            "input_window_strides": ([(1,) * rank, (-1,) * rank, (2,) * rank],
                                     [(0,) * rank, (2**31,) * rank, (1.0,) * rank, [True] * rank])}
