"""DML_OPERATOR_LOCAL_RESPONSE_NORMALIZATION_GRAD: the gradient of local response
normalization (docs/semantics.md §15).

For 4-D {N, C, H, W} tensors, with L = LocalSize, before = floor((L - 1) / 2) and after =
ceil((L - 1) / 2), the forward normalises each element by its window W(p): channels
[c - before, c + after] (CrossChannel), or that range of rows times that range of columns
(not CrossChannel), clipped to the tensor:

    N_p  = Bias + (Alpha / L) sum over j in W(p) of X_j^2
    Y_p  = X_p N_p^(-Beta)
    dX_i = dY_i N_i^(-Beta) - (2 Alpha Beta / L) X_i sum over {p : i in W(p)} of dY_p X_p N_p^(-Beta - 1)

where {p : i in W(p)} is the mirrored window ([i - after, i + before] per axis). The divisor is
L also where the window is clipped. N < 0 gives NaN (no special case for an integer Beta).

Two kernels (shaders/local_response_normalization_grad_*.comp), a gather each, every sum in
one fixed order (window positions row by row, ascending), so the same bits on every device:
`_norm` computes per element N^(-Beta) (pow_fixed: a fixed sequence of correctly rounded
operations, shaders/include/pow_fixed.glsl) and dY X N^(-Beta - 1) into float32 scratch,
`_output` sums the latter over each element's mirrored window and writes dX. Under a loop
limit each window's walk is split over dispatches that continue a running sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Tuple

import numpy as np

from ..plan import (LOOP_MARGIN, READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, Scratch,
                    grid_slices)
from ..tensor import (TensorDesc, check_desc, check_float, check_float_type, check_output,
                      check_rank, check_same, dml_name, fail)
from . import _one_call

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "LOCAL_RESPONSE_NORMALIZATION_GRAD"
TENSOR_FIELDS = ("input_tensor", "input_gradient_tensor", "output_gradient_tensor")
SCALARS = ("alpha", "beta", "bias")
MAX_COUNT = 2**31 - 1  # grid-stride loops in uint32
MAX_LOCAL_SIZE = 2**31 - 1  # window arithmetic in int32


def float32_parameters(alpha: float, beta: float, bias: float) -> Tuple[float, float, float]:
    """Alpha, Beta and Bias as the float32 values DirectML's FLOAT fields hold."""
    return tuple(float(np.float32(v)) for v in (alpha, beta, bias))  # type: ignore[return-value]


def window_extents(local_size: int) -> Tuple[int, int]:
    """(before, after) = (floor((L - 1) / 2), ceil((L - 1) / 2)): the normaliser's window is
    [p - before, p + after] along each of its axes."""
    return (local_size - 1) // 2, local_size // 2


@dataclass(frozen=True)
class LocalResponseNormalizationGradDesc(OperatorDesc):
    """`DML_LOCAL_RESPONSE_NORMALIZATION_GRAD_OPERATOR_DESC`. Three 4-D {N, C, H, W} tensors of
    one data type (FLOAT32 or FLOAT16) and sizes, any strides (the output's may not overlap);
    cross_channel: a bool (the window along C, else an L x L window along H and W); local_size:
    L >= 1; alpha, beta, bias: finite in float32."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    cross_channel: bool
    local_size: int
    alpha: float
    beta: float
    bias: float
    OPERATOR: ClassVar[str] = OPERATOR
    INDEPENDENT_AXES: ClassVar[str] = "N, H and W (CrossChannel), N and C (otherwise)"

    def __post_init__(self) -> None:
        x, dy, dx = (check_desc(OPERATOR, dml_name(f), getattr(self, f)) for f in TENSOR_FIELDS)
        check_rank(OPERATOR, "InputTensor", x, 4, 4)
        for attr in ("data_type", "sizes"):
            check_same(OPERATOR, attr, ("InputTensor", x), ("InputGradientTensor", dy),
                       ("OutputGradientTensor", dx))
        check_float_type(OPERATOR, "InputTensor", x)
        check_output(OPERATOR, "OutputGradientTensor", dx)
        if not isinstance(self.cross_channel, (bool, np.bool_)):
            fail(OPERATOR, "CrossChannel", "must be a bool", "True or False",
                 type(self.cross_channel).__name__, TypeError)
        size = self.local_size
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            fail(OPERATOR, "LocalSize", "must be an integer", "int", type(size).__name__,
                 TypeError)
        if not 1 <= size <= MAX_LOCAL_SIZE:
            fail(OPERATOR, "LocalSize", "is out of range", f"1 to {MAX_LOCAL_SIZE}", int(size))
        object.__setattr__(self, "cross_channel", bool(self.cross_channel))
        object.__setattr__(self, "local_size", int(size))
        for name in SCALARS:
            object.__setattr__(self, name, check_float(OPERATOR, dml_name(name),
                                                       getattr(self, name)))

    def tensor_fields(self):
        return (("input_tensor", (self.input_tensor, READ)),
                ("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def independent_axes(self) -> Tuple[int, ...]:
        """The axes the window does not span: N, H, W (CrossChannel) or N, C."""
        return (0, 2, 3) if self.cross_channel else (0, 1)

    def window_positions(self) -> int:
        """The most positions any element's (clipped) window has."""
        n, c, h, w = self.input_tensor.sizes
        size = self.local_size
        return min(size, c) if self.cross_channel else min(size, h) * min(size, w)

    def plan(self, limits: Limits) -> Plan:
        x, dy, dx = self.input_tensor, self.input_gradient_tensor, self.output_gradient_tensor
        count = x.element_count
        if count > MAX_COUNT:
            fail(OPERATOR, "InputTensor.Sizes", "hold too many elements for pyvkgrad's kernels",
                 f"<= {MAX_COUNT}", count)
        wg = limits.local_size
        alpha, beta, bias = float32_parameters(self.alpha, self.beta, self.bias)
        before, after = window_extents(self.local_size)
        shared = dict(WG=wg, IS_F16=x.data_type.element_size == 2,
                      CROSS_CHANNEL=self.cross_channel, BEFORE=before, AFTER=after,
                      SIZES=x.sizes, X_STRIDES=x.element_strides,
                      DY_STRIDES=dy.element_strides)
        # The host rounds each constant once to float32 (from float64, where alpha * beta of
        # two float32 values is exact).
        # A constant beyond float32's range rounds to Inf, as the float32 arithmetic would
        # give it (no warning of the caller's numpy error state: that is the kernel's value).
        with np.errstate(over="ignore"):
            alpha_over_size = float(np.float32(alpha / self.local_size))
            coefficient = float(np.float32(2 * alpha * beta / self.local_size))
        norm = dict(shared, BIAS=bias, ALPHA_OVER_SIZE=alpha_over_size, BETA=beta)
        output = dict(shared, COEFFICIENT=coefficient, DX_STRIDES=dx.element_strides)
        # The walk over a window: whole, or in pieces of `chunk` positions under a loop limit
        # (an item then runs the grid loop's iteration and chunk + 1 of the walk's).
        positions = self.window_positions()
        chunk = positions
        if limits.max_loop_iterations:
            chunk = max(1, min(positions, (limits.max_loop_iterations - LOOP_MARGIN) // 4 - 4))
        walks = [(w, min(w + chunk, positions)) for w in range(0, positions, chunk)]
        scratch = (Scratch("a", 4 * count), Scratch("b", 4 * count),
                   Scratch("running", 4 * count if len(walks) > 1 else 16))
        dispatches = []
        for kernel, constants, bindings in (
                ("local_response_normalization_grad_norm", norm,
                 dict(x="input_tensor", dy="input_gradient_tensor", a="a", b="b")),
                ("local_response_normalization_grad_output", output,
                 dict(x="input_tensor", dy="input_gradient_tensor", dx="output_gradient_tensor",
                      a="a", b="b", running="running"))):
            for window_first, window_end in walks:
                dispatches += [Dispatch(kernel, bindings, workgroups, constants=constants,
                                        push=dict(count=end, first=first,
                                                  window_first=window_first,
                                                  window_end=window_end))
                               for first, end, workgroups in grid_slices(
                                   count, wg, limits, window_end - window_first + 2)]
        return Plan(tuple(dispatches), scratch, tensors=TENSOR_FIELDS)


def local_response_normalization_grad(input: np.ndarray, input_gradient: np.ndarray,
                                      cross_channel: bool, local_size: int, alpha: float,
                                      beta: float, bias: float, *,
                                      device: DeviceLike = None) -> np.ndarray:
    """dX of local response normalization on the device (docs/semantics.md §15), a packed
    array of input's dtype and shape: 4-D {N, C, H, W} input (X) and input_gradient (dY)."""
    params = (cross_channel, local_size, alpha, beta, bias)

    def describe(d, dev):
        x = d["input"]
        desc = LocalResponseNormalizationGradDesc(x, d["input_gradient"], x.with_sizes(x.sizes),
                                                  *params)
        # The float32 scratch of the input's element count counts against the buffer limit.
        return desc, {"output_gradient": (np.shape(input), 4)}

    def rerun(dev, input, input_gradient):
        return (local_response_normalization_grad(input, input_gradient, *params, device=dev),)

    (dx,) = _one_call.run(OPERATOR, device, params,
                          {"input": input, "input_gradient": input_gradient}, describe, rerun)
    return dx
