"""DML_OPERATOR_MAX_POOLING_GRAD: dY routed to each window's maximum (docs/semantics.md §13).

    a(o)  = the real position of window o whose X is largest, ties to the lowest logical index
    dX[p] = sum over the windows o with a(o) = p of dY[o]

A NaN in X beats every number and the first NaN in scan order wins (so the forward's maximum
propagates NaN); padding positions never win; a window with no real element drops its dY.
The kernel (shaders/max_pooling_grad.comp) finds a(o) from X by integer order keys of X's bits
(exact, NaN-safe, -0 equal to +0) and adds the chosen dY in ascending output order: the same
bits on every device. The per-element gather rescans every window containing its dX element
(up to prod(WindowSize) loads of X per window); the tiles scan each of their windows once;
where windows overlap, a first dispatch finds every window's winner once and the tiles read
it (`own_pass`). The geometry, checks and plan: _pooling_grad.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from ..plan import READ, WRITE, Dispatch, Limits, Scratch, grid_slices
from ..tensor import TensorDesc, buffer_words, check_desc, check_same
from . import _pooling_grad
from ._pooling_grad import PoolingGradRules

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "MAX_POOLING_GRAD"
# A window's positions are scanned by one 32-bit flat index.
MAX_WINDOW_CELLS = 2**31 - 1
# Tiles find the windows' winners in a dispatch of their own first (the kernel's ARGMAX):
# None where windows overlap along an axis ((W - 1) D >= S: a tile's X footprint overlaps
# its neighbours'), True or False always or never (benchmarks/investigations).
ARGMAX_PASS: Optional[bool] = None
NO_WINNER = 0xFF  # the kernel's byte for a window whose every cell is padding
# The pass by X's rows (`argmax_rows`) where X's layout allows it: None, or False never
# (benchmarks/investigations, tests). The kernel's bound on a row's vectors:
ARGMAX_ROWS: Optional[bool] = None
ROW_MAX_VECTORS = 4


@dataclass(frozen=True)
class MaxPoolingGradDesc(PoolingGradRules):
    """`DML_MAX_POOLING_GRAD_OPERATOR_DESC` (DimensionCount is the tensors' rank - 2).

    input_tensor: X, the forward input; input_gradient_tensor: dY, the forward output's sizes;
    output_gradient_tensor: dX, X's sizes. FLOAT32 or FLOAT16, 4-D or 5-D {N, C, spatial...},
    any strides (dX's may not overlap); dY's N and C are X's. strides, window_size, dilations
    (each >= 1), start_padding, end_padding: one int per spatial axis; each dY spatial size
    follows the floor or the ceil rule with the dilated window (WindowSize - 1) * Dilations + 1."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    strides: Tuple[int, ...]
    window_size: Tuple[int, ...]
    start_padding: Tuple[int, ...]
    end_padding: Tuple[int, ...]
    dilations: Tuple[int, ...]
    OPERATOR: ClassVar[str] = OPERATOR
    KERNEL: ClassVar[str] = "max_pooling_grad"

    def __post_init__(self) -> None:
        x = check_desc(OPERATOR, "InputTensor", self.input_tensor)
        object.__setattr__(self, "dilations", self.check_geometry(self.dilations))
        dx = self.output_gradient_tensor
        check_same(OPERATOR, "data_type", ("OutputGradientTensor", dx), ("InputTensor", x))
        check_same(OPERATOR, "sizes", ("InputTensor", x), ("OutputGradientTensor", dx))
        self.check_window_cells(MAX_WINDOW_CELLS, "must hold fewer than 2^31 positions")

    def tensor_fields(self):
        return (("input_tensor", (self.input_tensor, READ)),
                ("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def dilation_values(self) -> Tuple[int, ...]:
        return self.dilations

    def loops_per_window(self) -> int:
        # The windows loop's iteration, and the scan of the window's positions and its end.
        return 1 + math.prod(self.window_size) + 1

    def kernel_bindings(self) -> Dict[str, str]:
        return dict(x="input_tensor", dy="input_gradient_tensor", dx="output_gradient_tensor",
                    window_winners="window_winners")

    def kernel_constants(self, pad: int) -> Dict[str, object]:
        x = self.input_tensor.element_strides
        return dict(X_STRIDES=tuple(x[:2]) + (0,) * pad + tuple(x[2:]), ARGMAX=0,
                    ARGMAX_ROWS=False)

    def argmax_rows(self) -> bool:
        """Whether the winners' pass may go by X's rows (the kernel's ARGMAX_ROWS: a word's 4
        windows in one row of dY, each X row they scan loaded once as 16-byte vectors): X's
        rows whole vectors from the buffer's start, and the 4 windows' span along the last
        axis within ROW_MAX_VECTORS of them from a vector's start."""
        x = self.input_tensor
        vector = 16 // x.data_type.element_size  # elements
        stride, window, start = self.strides[-1], self.window_size[-1], self.start_padding[-1]
        dilation = self.dilations[-1]
        lead = -start % vector  # the first window's start, ROW_LEAD into a vector
        vectors = -(-(lead + 3 * stride + (window - 1) * dilation + 1) // vector)
        return (ARGMAX_ROWS is not False and x.element_strides[-1] == 1
                and all(s % vector == 0 for s in x.element_strides[:-1])
                and x.sizes[-1] % vector == 0
                and self.input_gradient_tensor.sizes[-1] % 4 == 0
                and 4 * stride % vector == 0 and vectors <= ROW_MAX_VECTORS)

    def own_pass(self, geometry, limits: Limits, constants, bindings):
        """With tiles (ARGMAX_PASS, by default where windows overlap): a dispatch storing
        every window's winner as a byte (ARGMAX 1; 4 windows an invocation, one word), then
        the tiles reading them (ARGMAX 2). The window_winners scratch is 16 bytes where unused,
        and the pass is skipped where its bytes would pass the buffer limit."""
        words = -(-self.input_gradient_tensor.element_count // 4)
        cells = math.prod(self.window_size)
        overlap = any((w - 1) * d >= s for w, d, s in zip(self.window_size, self.dilations,
                                                         self.strides))
        use = overlap if ARGMAX_PASS is None else ARGMAX_PASS
        # (A winner is a byte: cells 0 to 254, 255 being the kernel's NO_WINNER; the tiles'
        # footprint bound keeps windows far smaller, but the byte is this pass's own limit.)
        # (window_winners holds a word past the last: the kernel's WINNER_WORDS may read it.
        # Its buffer, in whole 16-byte units, must fit the limit.)
        nbytes = 4 * words + 4
        if (geometry is None or not use or cells >= NO_WINNER
                or 4 * buffer_words(nbytes) > limits.max_storage_buffer_range):
            return (), (Scratch("window_winners", 16),), {}
        # Loop iterations per word: the grid loop's, the 4 windows' loop and its end, and per
        # window its cells and their loop's end, counted for both of the kernel's scans (one
        # with bounds tests, one without: a driver running a vector's lanes together may run
        # both where its lanes' windows differ).
        # With the kernel's rows (ARGMAX_ROWS) as well: its 4 windows' start, and per X row
        # (the windows' rows) its vectors' loads (up to ROW_MAX_VECTORS, each up to 8 keys)
        # and the 4 windows' cells along the last axis.
        rows, last = cells // self.window_size[-1], self.window_size[-1]
        loops = (1 + 5 + 4 * 2 * (cells + 1)
                 + 5 + rows * (1 + (ROW_MAX_VECTORS + 1) * (8 + 1) + 1 + 5 * (last + 1) + 1)
                 + 1)
        dispatches = tuple(
            Dispatch(self.KERNEL, bindings, workgroups,
                     constants=dict(constants, ARGMAX=1, ARGMAX_ROWS=self.argmax_rows()),
                     push=dict(count=end, first=first, window_first=0,
                               window_end=_pooling_grad.ALL_WINDOWS, stage=_pooling_grad.STORE))
            for first, end, workgroups in grid_slices(words, limits.local_size, limits, loops))
        return dispatches, (Scratch("window_winners", max(16, nbytes)),), dict(ARGMAX=2)


def max_pooling_grad(input: np.ndarray, input_gradient: np.ndarray, strides: Sequence[int],
                     window_size: Sequence[int], start_padding: Sequence[int],
                     end_padding: Sequence[int], dilations: Sequence[int], *,
                     device: DeviceLike = None) -> np.ndarray:
    """dX of a max pooling of `input` (4-D or 5-D) whose output gradient is `input_gradient`;
    a packed array of input's dtype and shape."""
    params = (strides, window_size, start_padding, end_padding, dilations)

    def make(d, dx_sizes):
        x = d["input"]
        return MaxPoolingGradDesc(x, d["input_gradient"], x.with_sizes(x.sizes), *params)

    def again(dev, dx_sizes, input, input_gradient):
        return max_pooling_grad(input, input_gradient, *params, device=dev)

    return _pooling_grad.run(OPERATOR, device, params,
                             {"input": input, "input_gradient": input_gradient}, make,
                             lambda d: d["input"].sizes, again)
