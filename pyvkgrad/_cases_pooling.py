"""The operator table's helpers for AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD: case
generators, describe / call, magnitudes and parameter examples (operators.py holds the
records). Nothing here touches a device."""

from __future__ import annotations

from typing import Callable, Dict, Tuple

import numpy as np

from . import reference
from .operator_record import Case, packed
from .ops.average_pooling_grad import AveragePoolingGradDesc
from .ops.max_pooling_grad import MaxPoolingGradDesc
from .tensor import TensorDesc


def pooling_shape(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """X's (dX's) shape for a case of `shape`: 4-D (leading 1s added) unless 5-D."""
    return (1,) * (4 - len(shape)) + tuple(shape) if len(shape) < 4 else tuple(shape[:5])


def _geometry(rng: np.random.Generator, sizes: Tuple[int, ...], dilated: bool):
    """Per spatial axis: strides, window, start and end padding, dilations (1 unless
    `dilated`), and dY's size by the floor or the ceil rule. Window 1 to 4, stride 1 to 3,
    dilation 1 or 2, padding 0 to the window (padding-only windows included)."""
    params = {k: [] for k in ("strides", "window", "start", "end", "dilations", "out")}
    for size in sizes:
        window, stride = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        dilation = int(rng.integers(1, 3)) if dilated else 1
        start, end = (int(v) for v in rng.integers(0, window + 1, 2))
        effective = (window - 1) * dilation + 1
        end = max(end, effective - size - start)  # the window fits the padded input
        span = size + start + end - effective
        out = (-(-span // stride) if rng.random() < 0.5 else span // stride) + 1
        for key, value in zip(params, (stride, window, start, end, dilation, out)):
            params[key].append(value)
    return {k: tuple(v) for k, v in params.items()}


def _label(dtype, x_shape, dy_shape, g, extra: str) -> str:
    return (f"{np.dtype(dtype).name} {list(x_shape)} -> {list(dy_shape)}, window "
            f"{g['window']} strides {g['strides']} padding {g['start']}/{g['end']}{extra}")


def average_pooling_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
    """dX of `shape` (4-D or 5-D, pooling_shape), random geometry, dY standard normal,
    IncludePadding either way."""
    x_shape = pooling_shape(shape)
    g = _geometry(rng, x_shape[2:], False)
    dy = rng.standard_normal(x_shape[:2] + g["out"]).astype(dtype)
    include = bool(rng.random() < 0.5)
    return Case((dy, x_shape, g["strides"], g["window"], g["start"], g["end"], include),
                label=_label(dtype, x_shape, dy.shape, g, f" include_padding={include}"))


def max_pooling_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
    """X of `shape` (pooling_shape): standard normal, or small integers (ties) half the
    time, with a few NaN and -0 in one case in five; random geometry with dilation."""
    x_shape = pooling_shape(shape)
    g = _geometry(rng, x_shape[2:], True)
    if rng.random() < 0.5:
        x = rng.integers(-2, 3, x_shape).astype(dtype)
    else:
        x = rng.standard_normal(x_shape).astype(dtype)
    if rng.random() < 0.2:
        special = rng.random(x_shape) < 0.1
        x[special] = rng.choice(np.array([np.nan, -0.0, np.inf], dtype), special.sum())
    dy = rng.standard_normal(x_shape[:2] + g["out"]).astype(dtype)
    return Case((x, dy, g["strides"], g["window"], g["start"], g["end"], g["dilations"]),
                label=_label(dtype, x_shape, dy.shape, g, f" dilations {g['dilations']}"))


def average_pooling_magnitude(args, kwargs):
    """The oracle on |dY|: each dX element's sum of absolute terms."""
    return (reference.average_pooling_grad(np.abs(np.asarray(args[0], np.float64)),
                                           *args[1:]),)


def max_pooling_magnitude(args, kwargs):
    return (reference.max_pooling_grad(args[0], np.abs(np.asarray(args[1], np.float64)),
                                       *args[2:]),)


def average_pooling_describe(case: Case) -> AveragePoolingGradDesc:
    dy, sizes = case.args[:2]
    return AveragePoolingGradDesc(packed(dy), TensorDesc(packed(dy).data_type, sizes),
                                  *case.args[2:])


def max_pooling_describe(case: Case) -> MaxPoolingGradDesc:
    x, dy = case.args[:2]
    return MaxPoolingGradDesc(packed(x), packed(dy), packed(x), *case.args[2:])


def average_pooling_call(desc: AveragePoolingGradDesc, values: Dict[str, np.ndarray]):
    return ((values["input_gradient_tensor"], desc.output_gradient_tensor.sizes, desc.strides,
             desc.window_size, desc.start_padding, desc.end_padding, desc.include_padding), {})


def max_pooling_call(desc: MaxPoolingGradDesc, values: Dict[str, np.ndarray]):
    return ((values["input_tensor"], values["input_gradient_tensor"], desc.strides,
             desc.window_size, desc.start_padding, desc.end_padding, desc.dilations), {})


def pooling_parameters(dilated: bool) -> Callable[[int], Dict[str, Tuple[list, list]]]:
    """Valid and invalid values of the spacing fields for a case of `rank` (5: 3 spatial
    axes, else 2), and IncludePadding (average pooling) or Dilations (max pooling)."""
    def examples(rank: int) -> Dict[str, Tuple[list, list]]:
        k = 3 if rank == 5 else 2
        out = {"strides": ([(1,) * k, (2,) * k], [(0,) * k, (1,) * (k + 1), "1", (1.5,) * k]),
               "window_size": ([(1,) * k, (2,) * k], [(0,) * k, (1,) * (k - 1), (-1,) * k]),
               "start_padding": ([(0,) * k, (1,) * k], [(-1,) * k, (0,) * (k + 1), None]),
               "end_padding": ([(0,) * k, (1,) * k], [(-1,) * k, (True,) * k])}
        if dilated:
            out["dilations"] = ([(1,) * k, (2,) * k], [(0,) * k, (1,) * (k - 1)])
        else:
            out["include_padding"] = ([True, False], [1, "yes", None])
        return out
    return examples
