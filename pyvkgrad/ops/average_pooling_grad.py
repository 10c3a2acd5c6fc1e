"""DML_OPERATOR_AVERAGE_POOLING_GRAD: the transpose of average pooling (docs/semantics.md §13).

    dX[p] = sum over the windows o that contain p of dY[o] / count(o)

count(o) is the window's divisor: with IncludePadding its positions inside the padded extent
[-P0, In + P1) (a ceil-rule window hanging past it counts only what lies inside), otherwise its
real positions; a window with no real element contains no dX element and adds nothing. The
kernel (shaders/average_pooling_grad.comp) sums each dX element's terms in ascending output
order, each term dY[o] / count(o) correctly rounded (cr_div: the count is an exact integer),
so the same bits on every device; float16 dY widens exactly and dX rounds once. The geometry,
checks and plan: _pooling_grad.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, Sequence, Tuple

import math

import numpy as np

from ..plan import READ, WRITE
from ..tensor import TensorDesc, fail, named_desc
from . import _pooling_grad
from ._pooling_grad import PoolingGradRules

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "AVERAGE_POOLING_GRAD"
# The divisor, a product of window extents, must be an exact float32 integer.
MAX_WINDOW_CELLS = 2**24


@dataclass(frozen=True)
class AveragePoolingGradDesc(PoolingGradRules):
    """`DML_AVERAGE_POOLING_GRAD_OPERATOR_DESC` (DimensionCount is the tensors' rank - 2).

    input_gradient_tensor: dY, the forward output's sizes; output_gradient_tensor: dX, the
    forward input's sizes. FLOAT32 or FLOAT16, 4-D or 5-D {N, C, spatial...}, any strides
    (dX's may not overlap); dY's N and C are dX's. strides, window_size (each >= 1),
    start_padding, end_padding: one int per spatial axis; each dY spatial size follows the
    floor or the ceil rule. include_padding: count padding positions in the divisor."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    strides: Tuple[int, ...]
    window_size: Tuple[int, ...]
    start_padding: Tuple[int, ...]
    end_padding: Tuple[int, ...]
    include_padding: bool
    OPERATOR: ClassVar[str] = OPERATOR
    KERNEL: ClassVar[str] = "average_pooling_grad"

    def __post_init__(self) -> None:
        self.check_geometry()
        if not isinstance(self.include_padding, (bool, np.bool_)):
            fail(OPERATOR, "IncludePadding", "must be a bool", "True or False",
                 type(self.include_padding).__name__, TypeError)
        object.__setattr__(self, "include_padding", bool(self.include_padding))
        self.check_window_cells(MAX_WINDOW_CELLS, "must hold at most 2^24 positions (the "
                                "divisor is an exact float32 integer)")

    def tensor_fields(self):
        return (("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def dilation_values(self) -> Tuple[int, ...]:
        return (1,) * len(self.window_size)

    def loops_per_window(self) -> int:
        return 1 + 3  # the windows loop's iteration, cr_div's two correction steps and end

    def kernel_bindings(self) -> Dict[str, str]:
        return dict(dy="input_gradient_tensor", dx="output_gradient_tensor")

    def kernel_constants(self, pad: int) -> Dict[str, object]:
        return dict(INCLUDE_PADDING=self.include_padding, WHOLE_WINDOWS=self.whole_windows(),
                    RECIPROCAL=reciprocal_bits(math.prod(self.window_size)))

    def whole_windows(self) -> bool:
        """Whether every window's count is the whole window's (the kernel's WHOLE_WINDOWS:
        then it computes no count): with IncludePadding, no window reaches past the end
        padding (the floor rule's sizes never do); without it, every window lies inside the
        input (no start padding, none past its end)."""
        dy = self.input_gradient_tensor.sizes[2:]
        dx = self.output_gradient_tensor.sizes[2:]
        for size, out, stride, window, start, end in zip(
                dx, dy, self.strides, self.window_size, self.start_padding, self.end_padding):
            last = (out - 1) * stride - start  # the last window's start
            if self.include_padding and last + window > size + end:
                return False
            if not self.include_padding and (start > 0 or last + window > size):
                return False
        return True


def reciprocal_bits(d: int) -> int:
    """The float32 bits of 1 / d rounded to nearest even (d >= 1): the kernel's RECIPROCAL,
    by integers (numpy's float32(1.0 / d) would round twice)."""
    k = 23 + (d - 1).bit_length()  # 2^k / d in [2^23, 2^24)
    m, rest = divmod(1 << k, d)
    if 2 * rest > d or (2 * rest == d and m & 1):
        m += 1  # (to 2^24 at most: the carry goes into the exponent's bits)
    return ((127 + 23 - k) << 23) + (m - (1 << 23))


def average_pooling_grad(input_gradient: np.ndarray, output_gradient_sizes: Sequence[int],
                         strides: Sequence[int], window_size: Sequence[int],
                         start_padding: Sequence[int], end_padding: Sequence[int],
                         include_padding: bool, *, device: DeviceLike = None) -> np.ndarray:
    """dX of an average pooling whose input had `output_gradient_sizes` and whose output
    gradient is `input_gradient` (4-D or 5-D); a packed array of input_gradient's dtype."""
    params = (output_gradient_sizes, strides, window_size, start_padding, end_padding,
              include_padding)

    def make(d, dx_sizes):
        dy = d["input_gradient"]
        return AveragePoolingGradDesc(dy, named_desc(OPERATOR, "OutputGradientTensor",
                                                       dy.data_type, dx_sizes), strides,
                                      window_size, start_padding, end_padding, include_padding)

    def again(dev, dx_sizes, input_gradient):
        return average_pooling_grad(input_gradient, dx_sizes, *params[1:], device=dev)

    return _pooling_grad.run(OPERATOR, device, params, {"input_gradient": input_gradient},
                             make, lambda d: output_gradient_sizes, again)
