"""RESAMPLE_GRAD's and RESAMPLE_GRAD1's parts of their operator-table records (operators.py): the
case generator, the magnitudes their tolerances are relative to, the descriptor of a case and
its inverse, and the examples of valid and invalid fields for the descriptor fuzzing. Nothing
here touches a device."""

from __future__ import annotations

import math
from typing import Callable, Tuple, Type, Union

import numpy as np

from . import defaults, reference
from .operator_record import Case, packed
from .ops.resample_grad import ResampleGradDesc
from .ops.resample_grad1 import ResampleGrad1Desc
from .tensor import TensorDesc

_MODES = ("nearest_neighbor", "linear")
_ROUNDINGS = (None, "decreasing", "increasing")


def resample_case(rounding_required: bool
                   ) -> Callable[[np.random.Generator, Tuple[int, ...], type], Case]:
    """The case generator of RESAMPLE_GRAD or, `rounding_required`, RESAMPLE_GRAD1: dY of
    `shape` (its first 4 dimensions); dX sizes from 1 to 2 more than dY's (up- and
    downsampling, same sizes); nearest or linear; half the time the default scales and
    offsets, else random ones; a random rounding direction (every choice the descriptor
    allows) with random parameters, and always for RESAMPLE_GRAD1; either algorithm."""
    roundings = _ROUNDINGS[1:] if rounding_required else _ROUNDINGS

    def make_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
        shape = tuple(shape[:4])
        dy = rng.standard_normal(shape).astype(dtype)
        sizes = tuple(int(rng.integers(1, s + 3)) for s in shape)
        kwargs = dict(interpolation_mode=_MODES[int(rng.integers(2))])
        random_parameters = rng.random() < 0.5
        if random_parameters:
            rank = len(shape)
            kwargs.update(scales=tuple(float(s) for s in rng.uniform(0.25, 4.0, rank)),
                          input_pixel_offsets=tuple(float(v) for v in rng.uniform(-1, 1, rank)),
                          output_pixel_offsets=tuple(float(v) for v in rng.uniform(-1, 1, rank)))
        if random_parameters or rounding_required:
            kwargs["rounding_direction"] = roundings[int(rng.integers(len(roundings)))]
        algorithm = ("gather", "atomic")[int(rng.integers(2))]
        direction = f" {kwargs['rounding_direction']}" if rounding_required else ""
        return Case((dy, sizes), kwargs, dict(algorithm=algorithm),
                    f"{kwargs['interpolation_mode']}{direction} {algorithm} "
                    f"{np.dtype(dtype).name} {list(shape)} -> {list(sizes)}"
                    + (", random scales and offsets" if random_parameters else ""))
    return make_case


def resample_magnitude(args, kwargs):
    """S = W^T |dY|: the oracle on |dY|, the sum of each element's absolute contributions."""
    dy, sizes = args
    return (reference.resample_grad(np.abs(np.asarray(dy, np.float64)), sizes, **kwargs),)


def resample_describe(descriptor: Type[Union[ResampleGradDesc, ResampleGrad1Desc]]
                       ) -> Callable[[Case], Union[ResampleGradDesc, ResampleGrad1Desc]]:
    """The `describe` of RESAMPLE_GRAD or RESAMPLE_GRAD1 (`descriptor`)."""
    def describe(case: Case) -> Union[ResampleGradDesc, ResampleGrad1Desc]:
        (dy, sizes), kw = case.args, case.kwargs
        scales, input_offsets, output_offsets = defaults.resample_grad(
            dy.shape, sizes, kw.get("scales"), kw.get("input_pixel_offsets"),
            kw.get("output_pixel_offsets"))
        return descriptor(
            input_gradient_tensor=packed(dy),
            output_gradient_tensor=TensorDesc(packed(dy).data_type, sizes),
            interpolation_mode=kw.get("interpolation_mode", "nearest_neighbor"),
            rounding_direction=kw.get("rounding_direction"), scales=scales,
            input_pixel_offsets=input_offsets, output_pixel_offsets=output_offsets,
            algorithm=case.options.get("algorithm", "auto"))
    return describe


def resample_call(desc, values):
    return ((values["input_gradient_tensor"], desc.output_gradient_tensor.sizes),
            dict(interpolation_mode=desc.interpolation_mode, scales=desc.scales,
                 input_pixel_offsets=desc.input_pixel_offsets,
                 output_pixel_offsets=desc.output_pixel_offsets,
                 rounding_direction=desc.rounding_direction))


def resample_parameters(rank):
    return {"interpolation_mode": (["nearest_neighbor", "linear", 1], ["cubic", 2, 1.0]),
            "scales": ([(2.0,) * rank, (0.5,) * rank, (1.5,) * rank],
                       [(1.0,) * (rank + 1), (0.0,) * rank, (math.nan,) * rank, 2.0]),
            "input_pixel_offsets": ([(0.5,) * rank, (0.0,) * rank],
                                    [(math.inf,) * rank, (0.5,) * (rank + 1)]),
            "output_pixel_offsets": ([(-0.5,) * rank, (0.25,) * rank], [(math.nan,) * rank]),
            "rounding_direction": ([None, "decreasing", "increasing"], ["up", 1.5]),
            "algorithm": (["gather", "atomic", "auto"], ["fast", 1])}


def resample1_parameters(rank):
    """RESAMPLE_GRAD's, but RoundingDirection is required."""
    return dict(resample_parameters(rank),
                rounding_direction=(["decreasing", "increasing", 0, 1], [None, "up", 2, 1.5]))
