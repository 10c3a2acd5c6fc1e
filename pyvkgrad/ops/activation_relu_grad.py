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
    # Element-wise: dX may be X's or dY's tensor (identical descriptors), in place.
    IN_PLACE: ClassVar[dict] = {"output_gradient_tensor": ("input_tensor",
                                                           "input_gradient_tensor")}

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
        wg = limits.local_size
        bindings = dict(x="input_tensor", dy="input_gradient_tensor", dx="output_gradient_tensor")
        tensors = tuple(name for name, _ in self.tensor_fields())
        is_f16 = x.data_type.element_size == 2
        sizes, (xs, dys, dxs) = coalesce(x.sizes, x.element_strides, dy.element_strides,
                                         dx.element_strides)
        if len(sizes) == 1 and xs == dys == dxs == (1,):
            # One packed layout for all three: stream 16-byte vectors.
            vectors = -(-sizes[0] * x.data_type.element_size // 16)
            return Plan((Dispatch("activation_relu_grad_packed", bindings,
                                  grid(vectors, wg, limits),
                                  constants=dict(WG=wg, IS_F16=is_f16),
                                  push=dict(count=vectors, elements=sizes[0])),),
                        tensors=tensors)
        count = x.element_count
        return Plan((Dispatch("activation_relu_grad", bindings, grid(count, wg, limits),
                              constants=dict(WG=wg, IS_F16=is_f16,
                                             SIZES=right_align(sizes, 8, 1),
                                             X_STRIDES=right_align(xs, 8, 0),
                                             DY_STRIDES=right_align(dys, 8, 0),
                                             DX_STRIDES=right_align(dxs, 8, 0)),
                              push=dict(count=count)),), tensors=tensors)


def activation_relu_grad(input, input_gradient, *, device=None) -> np.ndarray:
    """dX = input > 0 ? input_gradient : 0 on the device; a packed array of input's dtype."""
    from ..device import get_device, layout_key

    dev = get_device(device)
    layout = layout_key(OPERATOR, (), input, input_gradient)
    again = dev.run_again(layout, (input, input_gradient))
    if again is not None:
        return again[0]
    x_desc, _ = array_desc(input, OPERATOR, "input", dev.max_buffer_bytes)
    dy_desc, _ = array_desc(input_gradient, OPERATOR, "input_gradient", dev.max_buffer_bytes)
    desc = ActivationReluGradDesc(x_desc, dy_desc, x_desc.with_sizes(x_desc.sizes))
    arrays = {"input": input, "input_gradient": input_gradient}
    outputs = {"output_gradient": (x_desc.sizes, arrays["input"].dtype,
                                   x_desc.data_type.element_size)}
    if not fits(dev.max_buffer_bytes, arrays, outputs):
        # Element-wise: every axis is independent.
        return run_in_pieces(OPERATOR, dev.max_buffer_bytes, arrays, outputs,
                             range(x_desc.rank), "element-wise, so this cannot happen",
                             lambda **p: (activation_relu_grad(device=dev, **p),)
                             )["output_gradient"].reshape(np.shape(input))
    (dx,) = dev.run(desc, {"input_tensor": input, "input_gradient_tensor": input_gradient},
                    ["output_gradient_tensor"], [np.shape(input)], layout)
    return dx
