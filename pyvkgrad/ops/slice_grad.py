"""DML_OPERATOR_SLICE_GRAD: the gradient of DML_SLICE1, a window copied back into zeros
(docs/semantics.md §14).

Per dimension d the forward reads input index start_d + InputWindowStrides[d] * o for output
index o, with start_d = InputWindowOffsets[d], or InputWindowOffsets[d] + InputWindowSizes[d]
- 1 where the stride is negative. The grad is

    dX[start + Strides * o] = dY[o]   for every index o of dY,   dX = +0 everywhere else

(per-dimension products). The map o -> dX index is injective, so nothing is summed: dX holds
bit copies of dY (NaN payloads and -0 kept) or zero bits, exact in every data type.

The kernels gather: each dX element (or 16-byte vector of a packed dX) finds whether it lies
on the window and which dY element maps to it, so every dX element is written exactly once
by one invocation, and the bits are the same on every device. The plan brings the window
to a canonical form first (`canonical_window`): a negative stride becomes a positive one
reading dY backwards along that axis (a negative dY stride from a base offset, in uint32
arithmetic that wraps), size-1 dimensions go, and a dimension whose window is the whole
axis merges into the one outside it where both tensors allow. Kernels:
`slice_grad_packed` (dX packed: one 16-byte vector per item; a vector wholly inside a
window row whose dY elements are contiguous is a straight copy of words, a vector outside
the window is stored as zeros) and `slice_grad` (any strides: one element per item).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Sequence, Tuple

import numpy as np

from ..plan import READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, grid_slices, right_align
from ..tensor import (DataType, TensorDesc, as_uint_tuple, check_desc, check_output,
                      check_same, fail, named_desc, packed_strides)
from . import _one_call

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "SLICE_GRAD"
MAX_RANK = 8
# Every data type DirectML lists for SLICE_GRAD but the 64-bit ones.
DATA_TYPES = (DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.INT16, DataType.INT8,
              DataType.UINT32, DataType.UINT16, DataType.UINT8)
MAX_COUNT = 2**31 - 1  # grid-stride loops in uint32
INT_MIN, INT_MAX = -2**31, 2**31 - 1  # InputWindowStrides are DirectML INTs
BINDINGS = dict(dy="input_gradient_tensor", dx="output_gradient_tensor")
TENSOR_FIELDS = ("input_gradient_tensor", "output_gradient_tensor")


def _int_tuple(values: object, field: str) -> Tuple[int, ...]:
    """DirectML's INT[DimensionCount]: integers within int32, any sign."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        fail(OPERATOR, field, "must be a sequence of integers", "a sequence",
             type(values).__name__, TypeError)
    out = []
    for d, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            fail(OPERATOR, f"{field}[{d}]", "must be an integer", "int", type(v).__name__,
                 TypeError)
        if not INT_MIN <= v <= INT_MAX:
            fail(OPERATOR, f"{field}[{d}]", "must fit DirectML's INT", f"{INT_MIN} to {INT_MAX}",
                 int(v))
        out.append(int(v))
    return tuple(out)


class Window(NamedTuple):
    """The window in the kernels' canonical form, per dimension (outermost first): dX's sizes
    and element strides, the first dX index the window reaches (`firsts`), the step between
    the dX indices it reaches (`steps`, positive), dY's sizes, and dY's element strides
    (negative where the window runs backwards) from dY's element `base`: dX index
    firsts + steps * k (k < dy_sizes) holds dY's element base + sum(k * dy_strides)."""

    sizes: Tuple[int, ...]
    dx_strides: Tuple[int, ...]
    firsts: Tuple[int, ...]
    steps: Tuple[int, ...]
    dy_sizes: Tuple[int, ...]
    dy_strides: Tuple[int, ...]
    base: int


@dataclass(frozen=True)
class SliceGradDesc(OperatorDesc):
    """`DML_SLICE_GRAD_OPERATOR_DESC`. input_gradient_tensor: dY (the forward output's sizes);
    output_gradient_tensor: dX (the forward input's sizes). One data type (FLOAT32, FLOAT16,
    INT32, INT16, INT8, UINT32, UINT16 or UINT8), 1 to 8 dimensions, any strides (dX's may not
    overlap). input_window_offsets, input_window_sizes (UINTs) and input_window_strides (INTs,
    non-zero, negative runs backwards): one per dimension (DimensionCount is their length),
    with offset + size <= dX's size and 1 <= dY's size <= 1 + (size - 1) div |stride|."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    input_window_offsets: Tuple[int, ...]
    input_window_sizes: Tuple[int, ...]
    input_window_strides: Tuple[int, ...]
    OPERATOR: ClassVar[str] = OPERATOR
    INDEPENDENT_AXES: ClassVar[str] = ("only the axes the window covers whole, in order (offset "
                                       "0, stride 1, dY's size = dX's)")

    def __post_init__(self) -> None:
        dy = check_desc(OPERATOR, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(OPERATOR, "OutputGradientTensor", self.output_gradient_tensor)
        check_same(OPERATOR, "data_type", ("InputGradientTensor", dy),
                   ("OutputGradientTensor", dx))
        if dy.data_type not in DATA_TYPES:
            fail(OPERATOR, "InputGradientTensor.DataType", "is not supported",
                 " ".join(t.name for t in DATA_TYPES), dy.data_type.name, TypeError)
        if dx.rank != dy.rank:
            fail(OPERATOR, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy.rank, dx.rank)
        check_output(OPERATOR, "OutputGradientTensor", dx)
        offsets = as_uint_tuple(self.input_window_offsets, OPERATOR, "InputWindowOffsets")
        sizes = as_uint_tuple(self.input_window_sizes, OPERATOR, "InputWindowSizes")
        strides = _int_tuple(self.input_window_strides, "InputWindowStrides")
        for name, values in (("InputWindowOffsets", offsets), ("InputWindowSizes", sizes),
                             ("InputWindowStrides", strides)):
            if len(values) != dx.rank:
                fail(OPERATOR, name, "must have DimensionCount entries (the tensors' rank)",
                     dx.rank, len(values))
        for d in range(dx.rank):
            if strides[d] == 0:
                fail(OPERATOR, f"InputWindowStrides[{d}]", "must not be 0", "!= 0", 0)
            if sizes[d] < 1:
                fail(OPERATOR, f"InputWindowSizes[{d}]", "must be at least 1", ">= 1", sizes[d])
            if offsets[d] + sizes[d] > dx.sizes[d]:
                fail(OPERATOR, f"InputWindowOffsets[{d}] + InputWindowSizes[{d}]",
                     "must not exceed OutputGradientTensor.Sizes", f"<= {dx.sizes[d]}",
                     offsets[d] + sizes[d])
            most = 1 + (sizes[d] - 1) // abs(strides[d])
            if dy.sizes[d] > most:
                fail(OPERATOR, f"InputGradientTensor.Sizes[{d}]",
                     "must not exceed 1 + (InputWindowSizes - 1) div |InputWindowStrides|",
                     f"<= {most}", dy.sizes[d])
        object.__setattr__(self, "input_window_offsets", offsets)
        object.__setattr__(self, "input_window_sizes", sizes)
        object.__setattr__(self, "input_window_strides", strides)

    def tensor_fields(self):
        return (("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def independent_axes(self) -> Tuple[int, ...]:
        """Axes along which dX's slice is dY's same slice under the same window: those the
        window covers whole in order (offset 0, stride 1 or size 1, dY's size = dX's)."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        return tuple(d for d in range(dx.rank)
                     if self.input_window_offsets[d] == 0 and dy.sizes[d] == dx.sizes[d]
                     and (self.input_window_strides[d] == 1 or dx.sizes[d] == 1))

    def canonical_window(self) -> Window:
        """The window in the kernels' form (`Window`): negative strides turned into dY read
        backwards, size-1 dimensions dropped, and a dimension the window covers whole (first
        0, step 1, dY's size = dX's) merged into the one outside it where that one steps by 1
        and both tensors' strides allow."""
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        dims = []  # [size, dx stride, first, step, dy size, dy stride]
        base = 0
        for d in range(dx.rank):
            n, stride = dy.sizes[d], self.input_window_strides[d]
            dy_stride = dy.element_strides[d]
            first = self.input_window_offsets[d]
            if stride < 0:  # the window's last reached index first, dY backwards
                first += self.input_window_sizes[d] - 1 - abs(stride) * (n - 1)
                base += (n - 1) * dy_stride
                dy_stride = -dy_stride
            if dx.sizes[d] == 1:
                continue
            dims.append([dx.sizes[d], dx.element_strides[d], first,
                         abs(stride) if n > 1 else 1, n, dy_stride if n > 1 else 0])
        merged = []
        for dim in dims:
            if merged:
                outer = merged[-1]
                size, dx_stride, first, step, n, dy_stride = dim
                whole = first == 0 and step == 1 and n == size
                if whole and outer[3] == 1 and outer[1] == dx_stride * size and \
                        (outer[4] == 1 or outer[5] == dy_stride * n):
                    merged[-1] = [outer[0] * size, dx_stride, outer[2] * size, 1,
                                  outer[4] * n, dy_stride]
                    continue
            merged.append(dim)
        if not merged:
            merged = [[1, 1, 0, 1, 1, 0]]
        columns = tuple(tuple(column) for column in zip(*merged))
        return Window(*columns, base=base)

    def plan(self, limits: Limits) -> Plan:
        dy, dx = self.input_gradient_tensor, self.output_gradient_tensor
        for field, t in (("InputGradientTensor", dy), ("OutputGradientTensor", dx)):
            if t.element_count > MAX_COUNT:
                fail(OPERATOR, f"{field}.Sizes", "hold too many elements for pyvkgrad's kernels",
                     f"<= {MAX_COUNT}", t.element_count)
        w = self.canonical_window()
        wg, size = limits.local_size, dx.data_type.element_size
        lanes_log2 = {4: 0, 2: 1, 1: 2}[size]
        constants = dict(WG=wg, LANES_LOG2=lanes_log2, SIZES=right_align(w.sizes, 8, 1),
                         FIRSTS=right_align(w.firsts, 8, 0), STEPS=right_align(w.steps, 8, 1),
                         DY_SIZES=right_align(w.dy_sizes, 8, 1),
                         DY_STRIDES=right_align(tuple(s % 2**32 for s in w.dy_strides), 8, 0),
                         DY_BASE=w.base)
        count = dx.element_count
        if w.dx_strides == packed_strides(w.sizes):
            # One 16-byte vector of dX per item: the grid loop, the loops over its 4 words and
            # each word's lanes, and a tail vector's store loop over its elements.
            vectors, lanes = -(-count * size // 16), 4 // size
            return Plan(tuple(Dispatch("slice_grad_packed", BINDINGS, workgroups,
                                       constants=constants,
                                       push=dict(count=end, elements=count, first=first))
                              for first, end, workgroups in grid_slices(
                                  vectors, wg, limits,
                                  1 + (4 + 1) + 4 * (lanes + 1) + (4 * lanes + 1))),
                        tensors=TENSOR_FIELDS)
        constants["DX_STRIDES"] = right_align(w.dx_strides, 8, 0)
        return Plan(tuple(Dispatch("slice_grad", BINDINGS, workgroups, constants=constants,
                                   push=dict(count=end, first=first))
                          for first, end, workgroups in grid_slices(count, wg, limits)),
                    tensors=TENSOR_FIELDS)


def slice_grad(input_gradient: np.ndarray, output_gradient_sizes: Sequence[int],
               input_window_offsets: Sequence[int], input_window_sizes: Sequence[int],
               input_window_strides: Sequence[int], *, device: DeviceLike = None) -> np.ndarray:
    """dX of a SLICE1 whose input had `output_gradient_sizes` and whose output gradient is
    `input_gradient`: zeros with dX[offset + stride * o] = dY[o] (a negative stride starts
    from offset + size - 1); a packed array of input_gradient's dtype."""
    params = (output_gradient_sizes, input_window_offsets, input_window_sizes,
              input_window_strides)

    whole = []

    def describe(d, dev):
        dy = d["input_gradient"]
        sizes = as_uint_tuple(output_gradient_sizes, OPERATOR, "OutputGradientTensor.Sizes")
        if len(sizes) != dy.rank:
            fail(OPERATOR, "OutputGradientTensor.DimensionCount",
                 "must equal InputGradientTensor.DimensionCount", dy.rank, len(sizes))
        dx = named_desc(OPERATOR, "OutputGradientTensor", dy.data_type, sizes)
        desc = SliceGradDesc(dy, dx, input_window_offsets, input_window_sizes,
                             input_window_strides)
        whole[:] = [desc]  # the whole problem's descriptor, for its pieces
        return desc, {"output_gradient": (sizes, dy.data_type.element_size)}

    def rerun(dev, input_gradient):
        # A piece cut along axes the window covers whole: there the window is the piece's
        # whole axis, elsewhere the problem's.
        shape, axes = np.shape(input_gradient), whole[0].independent_axes()
        sizes = tuple(shape[a] if a in axes else n
                      for a, n in enumerate(whole[0].output_gradient_tensor.sizes))
        window_sizes = tuple(shape[a] if a in axes else n
                             for a, n in enumerate(whole[0].input_window_sizes))
        return (slice_grad(input_gradient, sizes, input_window_offsets, window_sizes,
                           input_window_strides, device=dev),)

    (dx,) = _one_call.run(OPERATOR, device, params, {"input_gradient": input_gradient},
                          describe, rerun, DATA_TYPES)
    return dx
