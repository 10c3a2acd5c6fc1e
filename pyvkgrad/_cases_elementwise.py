"""The element-wise operators' parts of their operator-table records (operators.py): the case
generator, the descriptor of a case and its inverse, shared by ACTIVATION_RELU_GRAD and the
clip grads (and a new element-wise operator: docs/adding-an-operator.md). Nothing here touches
a device."""

from __future__ import annotations

from typing import Callable, Dict, Tuple, Type

import numpy as np

from .operator_record import Case, packed
from .ops._elementwise import ElementwiseGradDesc


def elementwise_case(**parameters: Tuple[float, float]
                     ) -> Callable[[np.random.Generator, Tuple[int, ...], type], Case]:
    """The case generator of an element-wise operator: X and dY standard normal, and each
    scalar parameter uniform in its (low, high) range, e.g. elementwise_case(alpha=(0, 1))."""
    def make_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
        x = rng.standard_normal(shape).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        kwargs = {name: float(rng.uniform(low, high)) for name, (low, high) in parameters.items()}
        label = " ".join([np.dtype(dtype).name, str(list(shape))]
                         + [f"{name}={value:.3g}" for name, value in kwargs.items()])
        return Case((x, dy), kwargs, label=label)
    return make_case


def elementwise_describe(descriptor: Type[ElementwiseGradDesc]
                         ) -> Callable[[Case], ElementwiseGradDesc]:
    """The `describe` of an element-wise operator with descriptor class `descriptor`."""
    def describe(case: Case) -> ElementwiseGradDesc:
        x, dy = case.args
        return descriptor(packed(x), packed(dy), packed(x), **case.kwargs)
    return describe


def elementwise_call(desc: ElementwiseGradDesc, values: Dict[str, np.ndarray]
                     ) -> Tuple[Tuple[np.ndarray, ...], Dict[str, float]]:
    """The `call` of any element-wise operator: X, dY and the scalar parameters by name."""
    return (values["input_tensor"], values["input_gradient_tensor"]), desc.parameters()
