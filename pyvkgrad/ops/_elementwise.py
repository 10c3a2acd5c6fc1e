"""The base of element-wise gradient operators: dX[i] = grad(X[i], dY[i]; parameters).

An operator on this base is a descriptor subclass and a one-call function (see
`activation_relu_grad.py`) and a formula in `shaders/elementwise/<operator>.glsl`, from which
the build generates two kernels on the template `shaders/include/elementwise_grad.glsl`:
`<operator>` (any strides) and `<operator>_packed` (three identically packed tensors, 16-byte
vectors).

The base holds what every such operator shares:
- the three tensor fields, in DirectML's order (InputTensor, InputGradientTensor,
  OutputGradientTensor): one data type (`DATA_TYPES`: FLOAT32 or FLOAT16 unless the subclass
  takes integers too) and one set of sizes, 1 to 8 dimensions, any strides (the output's may
  not overlap); the kernels take the data type as the constant DATA_TYPE;
- scalar parameters: the subclass's own dataclass fields after the tensors (DirectML's FLOAT
  fields, e.g. `alpha: float = 1.0`), each a real number finite in float32, passed to both
  kernels as the float constant named after the field in capitals (ALPHA); a subclass with
  other parameters overrides `check_parameters` and `kernel_parameters`;
- `IN_PLACE`: dX may be bound to X's or dY's tensor when the descriptors are identical (each
  invocation reads an element's X and dY before it writes that element's dX);
- the plan: the packed kernel when X, dY and dX coalesce to one packed run, else the strided
  kernel over the coalesced dimensions; one dispatch, or several where the driver ends long
  loops (`Limits.max_loop_iterations`) before a narrow grid's invocations would cover them;
- the one-call function's body, `run`, which cuts a problem larger than the device's buffer
  limit along every axis (outputs depend only on the same element of the inputs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Dict, Tuple

import numpy as np

from ..plan import READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, grid_slices, right_align
from ..tensor import (FLOAT_TYPES, DataType, TensorDesc, check_desc, check_float,
                      check_float_type, check_output, check_rank, check_same, coalesce, dml_name)
from . import _one_call

TENSOR_FIELDS = ("input_tensor", "input_gradient_tensor", "output_gradient_tensor")
# The tensors' names in the kernels (shaders/include/common.glsl).
BINDINGS = dict(x="input_tensor", dy="input_gradient_tensor", dx="output_gradient_tensor")


@dataclass(frozen=True)
class ElementwiseGradDesc(OperatorDesc):
    """Three tensors of one data type and sizes, 1 to 8 dimensions, any strides (the output's
    may not overlap), then the subclass's scalar parameters. Subclasses set `OPERATOR`."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    OPERATOR: ClassVar[str] = ""
    # The kernels' name: the operator's own unless it shares another operator's.
    KERNEL: ClassVar[str] = ""
    # The tensors' data types the operator takes: FLOAT_TYPES, or every DataType (the clip
    # grads); the one-call function refuses an array of another type.
    DATA_TYPES: ClassVar[Tuple[DataType, ...]] = FLOAT_TYPES
    # Element-wise: dX may be X's or dY's tensor (identical descriptors), in place.
    IN_PLACE: ClassVar[Dict[str, Tuple[str, ...]]] = {
        "output_gradient_tensor": ("input_tensor", "input_gradient_tensor")}
    # Along which axes the one-call function may cut a problem too large for one buffer.
    INDEPENDENT_AXES: ClassVar[str] = "every axis (element-wise)"

    def __post_init__(self) -> None:
        op = self.OPERATOR
        x, dy, dx = (check_desc(op, dml_name(name), getattr(self, name))
                     for name in TENSOR_FIELDS)
        check_rank(op, "InputTensor", x, 1, 8)
        for attr in ("data_type", "sizes"):
            check_same(op, attr, ("InputTensor", x), ("InputGradientTensor", dy),
                       ("OutputGradientTensor", dx))
        if self.DATA_TYPES == FLOAT_TYPES:
            check_float_type(op, "InputTensor", x)
        check_output(op, "OutputGradientTensor", dx)
        self.check_parameters()

    def check_parameters(self) -> None:
        """Check the scalar parameters (after the tensors): DirectML FLOATs, finite in float32."""
        for name in self.parameter_names():
            object.__setattr__(self, name, check_float(self.OPERATOR, dml_name(name),
                                                       getattr(self, name)))

    @classmethod
    def parameter_names(cls) -> Tuple[str, ...]:
        """The scalar parameters: the dataclass fields after the three tensors."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in TENSOR_FIELDS)

    def parameters(self) -> Dict[str, float]:
        return {name: getattr(self, name) for name in self.parameter_names()}

    def kernel_parameters(self) -> Dict[str, object]:
        """The kernels' constants after DATA_TYPE: each parameter as the float constant named
        after it in capitals (ALPHA)."""
        return {name.upper(): value for name, value in self.parameters().items()}

    def tensor_fields(self) -> Tuple[Tuple[str, Tuple[TensorDesc, str]], ...]:
        return (("input_tensor", (self.input_tensor, READ)),
                ("input_gradient_tensor", (self.input_gradient_tensor, READ)),
                ("output_gradient_tensor", (self.output_gradient_tensor, WRITE)))

    def independent_axes(self) -> Tuple[int, ...]:
        """Axes along which outputs depend only on the same slice of the inputs: all."""
        return tuple(range(self.input_tensor.rank))

    def plan(self, limits: Limits) -> Plan:
        x, dy, dx = self.input_tensor, self.input_gradient_tensor, self.output_gradient_tensor
        kernel = self.KERNEL or self.OPERATOR.lower()
        wg = limits.local_size
        size = x.data_type.element_size
        constants = dict(WG=wg, DATA_TYPE=int(x.data_type), **self.kernel_parameters())
        sizes, (xs, dys, dxs) = coalesce(x.sizes, x.element_strides, dy.element_strides,
                                         dx.element_strides)
        if len(sizes) == 1 and xs == dys == dxs == (1,):
            # One packed layout for all three: stream 16-byte vectors. A vector may run a loop
            # over its 4 words and in each one over its elements, the tail vector one over its
            # up to 16 elements (STORE_VECTOR_SUB).
            vectors = -(-sizes[0] * size // 16)
            lanes = 4 // size
            return Plan(tuple(Dispatch(f"{kernel}_packed", BINDINGS, workgroups,
                                       constants=constants,
                                       push=dict(count=end, elements=sizes[0], first=first))
                              for first, end, workgroups in grid_slices(
                                  vectors, wg, limits,
                                  1 + (4 + 1) + 4 * (lanes + 1) + (4 * lanes + 1))),
                        tensors=TENSOR_FIELDS)
        constants.update(SIZES=right_align(sizes, 8, 1), X_STRIDES=right_align(xs, 8, 0),
                         DY_STRIDES=right_align(dys, 8, 0), DX_STRIDES=right_align(dxs, 8, 0))
        return Plan(tuple(Dispatch(kernel, BINDINGS, workgroups, constants=constants,
                                   push=dict(count=end, first=first))
                          for first, end, workgroups in grid_slices(x.element_count, wg,
                                                                    limits)),
                    tensors=TENSOR_FIELDS)


def run(desc_cls, input, input_gradient, parameters: Dict[str, object], device) -> np.ndarray:
    """The one-call function of an element-wise operator: dX on the device, a packed array of
    input's dtype and shape. `parameters`: the descriptor's scalar fields by name."""

    def describe(d, dev):
        x = d["input"]
        return (desc_cls(x, d["input_gradient"], x.with_sizes(x.sizes), **parameters),
                {"output_gradient": (np.shape(input), x.data_type.element_size)})

    (dx,) = _one_call.run(desc_cls.OPERATOR, device, tuple(parameters.values()),
                          {"input": input, "input_gradient": input_gradient}, describe,
                          lambda dev, **p: (run(desc_cls, parameters=parameters, device=dev,
                                                **p),), desc_cls.DATA_TYPES)
    return dx
