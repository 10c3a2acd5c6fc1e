"""DML_OPERATOR_ACTIVATION_RELU_GRAD: dX = X > 0 ? dY : +0, element-wise (docs/semantics.md §2).

X = 0, -0 and NaN give +0; a NaN in dY passes where X > 0 (docs/semantics.md §6.6). A select, not
a multiply, so results are bit copies of dY or +0 in float32 and float16 alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..plan import READ, WRITE, Dispatch, Limits, Plan, grid, right_align
from ..tensor import check_desc, check_output, check_rank, check_same, coalesce, array_desc
from ._split import fits, run_in_pieces

OPERATOR = "ACTIVATION_RELU_GRAD"


@dataclass(frozen=True)
class ActivationReluGradDesc:
    """`DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC`: three tensors of one data type and sizes,
    1 to 8 dimensions, any strides (the output's may not overlap)."""

    input_tensor: object
    input_gradient_tensor: object
    output_gradient_tensor: object
    OPERATOR: ClassVar[str] = OPERATOR

    def __post_init__(self):
        x = check_desc(OPERATOR, "InputTensor", self.input_tensor)
        dy = check_desc(OPERATOR, "InputGradientTensor", self.input_gradient_tensor)
        dx = check_desc(OPERATOR, "OutputGradientTensor", self.output_gradient_tensor)
        check_rank(OPERATOR, "InputTensor", x, 1, 8)
        for attr in ("data_type", "sizes"):
            check_same(OPERATOR, attr, ("InputTensor", x), ("InputGradientTensor", dy),
                       ("OutputGradientTensor", dx))
        check_output(OPERATOR, "OutputGradientTensor", dx)

    def tensor_fields(self):
        return (("input_tensor", (self.input_tensor, READ)),
                ("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def plan(self, limits: Limits) -> Plan:
        x, dy, dx = self.input_tensor, self.input_gradient_tensor, self.output_gradient_tensor
        is_f16 = int(x.data_type.element_size == 2)
        bindings = (("input_tensor", READ), ("input_gradient_tensor", READ),
                    ("output_gradient_tensor", WRITE))
        sizes, (xs, dys, dxs) = coalesce(x.sizes, x.element_strides, dy.element_strides,
                                         dx.element_strides)
        if len(sizes) == 1 and xs == dys == dxs == (1,):
            # One packed layout for all three: stream 16-byte vectors.
            vectors = -(-sizes[0] * x.data_type.element_size // 16)
            return Plan((Dispatch("activation_relu_grad_packed", bindings,
                                  grid(vectors, limits.local_size, limits),
                                  (limits.local_size, is_f16), (vectors,)),))
        count = x.element_count
        spec = ((limits.local_size, is_f16) + right_align(sizes, 8, 1)
                + right_align(xs, 8, 0) + right_align(dys, 8, 0) + right_align(dxs, 8, 0))
        return Plan((Dispatch("activation_relu_grad", bindings,
                              grid(count, limits.local_size, limits), spec, (count,)),))


def activation_relu_grad(input, input_gradient, *, device=None) -> np.ndarray:
    """dX = input > 0 ? input_gradient : 0 on the device; a packed array of input's dtype."""
    from ..device import get_device

    x_desc, x_elements = array_desc(input, OPERATOR, "input")
    dy_desc, dy_elements = array_desc(input_gradient, OPERATOR, "input_gradient")
    desc = ActivationReluGradDesc(x_desc, dy_desc, x_desc.with_sizes(x_desc.sizes))
    dev = get_device(device)
    arrays = {"input": input, "input_gradient": input_gradient}
    outputs = {"output_gradient": (x_desc.sizes, arrays["input"].dtype,
                                   x_desc.data_type.element_size)}
    if not fits(dev.max_buffer_bytes, arrays, outputs):
        # Element-wise: every axis is independent.
        return run_in_pieces(OPERATOR, dev.max_buffer_bytes, arrays, outputs,
                             range(x_desc.rank), "element-wise, so this cannot happen",
                             lambda **p: (activation_relu_grad(device=dev, **p),)
                             )["output_gradient"].reshape(np.shape(input))
    (dx,) = dev.run(desc, {"input_tensor": x_elements, "input_gradient_tensor": dy_elements},
                    ["output_gradient_tensor"])
    return dx.reshape(np.shape(input))
