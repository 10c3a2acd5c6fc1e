"""The operator table: one record per operator, the one list of operators.

It drives the table-driven tests (tests/test_operators.py), the hardening properties and the
descriptor fuzzing (tests/test_hardening.py), the demo (`python -m pyvkgrad demo`), `python -m
pyvkgrad info` and the benchmark's operator list (benchmarks/run.py). A record holds

- `descriptor`: the descriptor class (DirectML's operator desc);
- `function`: the one-call function (numpy in, numpy out);
- `oracle`: the float64 oracle of reference.py, which takes the function's arguments (less
  the execution options `device` and `algorithm`, EXECUTION_OPTIONS) with the same defaults;
- `make_case(rng, shape, dtype)`: random valid arguments for an input of `shape` and `dtype`,
  one of the record's `dtypes` (FLOAT32 and FLOAT16, or the types an operator takes);
- `tolerance`: per data type, how far the device may be from the oracle, and why;
- the independent axes the one-call function cuts along when a problem exceeds the device's
  buffer limit: `descriptor.independent_axes()` (the axes of a descriptor) and
  `descriptor.INDEPENDENT_AXES` (what they are, in words); `record.independent_axes`.

Plus what the generic tests need to speak about any operator: `describe(case)`, the
descriptor of a case (packed tensors), and its inverse `call(desc, values)`, the arguments of
the call a descriptor stands for given its input tensors' values (so that any compiled
descriptor can be checked against the oracle); `magnitude(args, kwargs)` for tolerances
relative to the size of the terms an output sums; `parameter_examples(rank)`, valid and
invalid values of the descriptor's scalar fields, for the fuzzing.

Shaped after JAX's tests/lax_test.py (`op_record`: the function beside its reference) and ONNX's
reference/ops/_op_list.py. Nothing here touches a device: importing it needs no Vulkan.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Tuple, Type, Union

import numpy as np
from numpy.typing import DTypeLike

from . import defaults, reference
from .ops.adam_optimizer import AdamOptimizerDesc, adam_optimizer
from .ops.activation_relu_grad import ActivationReluGradDesc, activation_relu_grad
from .ops.batch_normalization_grad import BatchNormalizationGradDesc, batch_normalization_grad
from .ops.batch_normalization_training_grad import (BatchNormalizationTrainingGradDesc,
                                                    batch_normalization_training_grad)
from .ops.element_wise_clip_grad import DATA_TYPES as CLIP_DATA_TYPES
from .ops.element_wise_clip_grad import ElementWiseClipGradDesc, element_wise_clip_grad
from .ops.element_wise_clip_grad1 import ElementWiseClipGrad1Desc, element_wise_clip_grad1
from .ops.random_generator import RandomGeneratorDesc, RandomGeneratorType, random_generator
from .ops.resample_grad import ResampleGradDesc, resample_grad
from .ops.resample_grad1 import ResampleGrad1Desc, resample_grad1
from .ops.roi_align_grad import RoiAlignGradDesc, roi_align_grad
from .ops.slice_grad import SliceGradDesc, slice_grad
from .ops.batch_normalization_training import (BatchNormalizationTrainingDesc,
                                               batch_normalization_training)
from .ops.local_response_normalization_grad import (LocalResponseNormalizationGradDesc,
                                                    local_response_normalization_grad)
from .ops._elementwise import ElementwiseGradDesc
from .ops.average_pooling_grad import AveragePoolingGradDesc, average_pooling_grad
from .ops.max_pooling_grad import MaxPoolingGradDesc, max_pooling_grad
from . import _cases_pooling as pool
from .tensor import DataType, TensorDesc
from ._cases_roi_align import (roi_align_call, roi_align_case, roi_align_describe,
                               roi_align_magnitude, roi_align_parameters)

# The record, its parts and the comparison with the oracle (operator_record.py), re-exported.
from .operator_record import (DTYPES, EXACT, EXECUTION_OPTIONS, Case, Operator,  # noqa: F401
                              Outputs, Tolerance, assert_close, compare)
from ._cases_batch_normalization_training import (
    BATCH_NORMALIZATION_TRAINING_TOLERANCES, batch_normalization_training_call,
    batch_normalization_training_case, batch_normalization_training_describe,
    batch_normalization_training_magnitude, batch_normalization_training_parameters)
from ._cases_slice import (SLICE_GRAD_DTYPES, SLICE_GRAD_TOLERANCES, slice_grad_call,
                           slice_grad_case, slice_grad_describe, slice_grad_parameters)
from ._cases_lrn import (LRN_TOLERANCES, lrn_call, lrn_case, lrn_describe, lrn_magnitude,
                         lrn_parameters)

# ---- ACTIVATION_RELU_GRAD ----------------------------------------------------------------------

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


def _packed(array: np.ndarray) -> TensorDesc:
    return TensorDesc(DataType.from_numpy(array.dtype, "", "", DataType), np.shape(array))


def elementwise_describe(descriptor: Type[ElementwiseGradDesc]
                         ) -> Callable[[Case], ElementwiseGradDesc]:
    """The `describe` of an element-wise operator with descriptor class `descriptor`."""
    def describe(case: Case) -> ElementwiseGradDesc:
        x, dy = case.args
        return descriptor(_packed(x), _packed(dy), _packed(x), **case.kwargs)
    return describe


def elementwise_call(desc: ElementwiseGradDesc, values: Dict[str, np.ndarray]
                     ) -> Tuple[Tuple[np.ndarray, ...], Dict[str, float]]:
    """The `call` of any element-wise operator: X, dY and the scalar parameters by name."""
    return (values["input_tensor"], values["input_gradient_tensor"]), desc.parameters()


# ---- RESAMPLE_GRAD and RESAMPLE_GRAD1 ------------------------------------------------------------

_MODES = ("nearest_neighbor", "linear")
_ROUNDINGS = (None, "decreasing", "increasing")


def _resample_case(rounding_required: bool
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


def _resample_magnitude(args, kwargs):
    """S = W^T |dY|: the oracle on |dY|, the sum of each element's absolute contributions."""
    dy, sizes = args
    return (reference.resample_grad(np.abs(np.asarray(dy, np.float64)), sizes, **kwargs),)


def _resample_describe(descriptor: Type[Union[ResampleGradDesc, ResampleGrad1Desc]]
                       ) -> Callable[[Case], Union[ResampleGradDesc, ResampleGrad1Desc]]:
    """The `describe` of RESAMPLE_GRAD or RESAMPLE_GRAD1 (`descriptor`)."""
    def describe(case: Case) -> Union[ResampleGradDesc, ResampleGrad1Desc]:
        (dy, sizes), kw = case.args, case.kwargs
        scales, input_offsets, output_offsets = defaults.resample_grad(
            dy.shape, sizes, kw.get("scales"), kw.get("input_pixel_offsets"),
            kw.get("output_pixel_offsets"))
        return descriptor(
            input_gradient_tensor=_packed(dy),
            output_gradient_tensor=TensorDesc(_packed(dy).data_type, sizes),
            interpolation_mode=kw.get("interpolation_mode", "nearest_neighbor"),
            rounding_direction=kw.get("rounding_direction"), scales=scales,
            input_pixel_offsets=input_offsets, output_pixel_offsets=output_offsets,
            algorithm=case.options.get("algorithm", "auto"))
    return describe


def _resample_call(desc, values):
    return ((values["input_gradient_tensor"], desc.output_gradient_tensor.sizes),
            dict(interpolation_mode=desc.interpolation_mode, scales=desc.scales,
                 input_pixel_offsets=desc.input_pixel_offsets,
                 output_pixel_offsets=desc.output_pixel_offsets,
                 rounding_direction=desc.rounding_direction))


def _resample_parameters(rank):
    return {"interpolation_mode": (["nearest_neighbor", "linear", 1], ["cubic", 2, 1.0]),
            "scales": ([(2.0,) * rank, (0.5,) * rank, (1.5,) * rank],
                       [(1.0,) * (rank + 1), (0.0,) * rank, (math.nan,) * rank, 2.0]),
            "input_pixel_offsets": ([(0.5,) * rank, (0.0,) * rank],
                                    [(math.inf,) * rank, (0.5,) * (rank + 1)]),
            "output_pixel_offsets": ([(-0.5,) * rank, (0.25,) * rank], [(math.nan,) * rank]),
            "rounding_direction": ([None, "decreasing", "increasing"], ["up", 1.5]),
            "algorithm": (["gather", "atomic", "auto"], ["fast", 1])}


def _resample1_parameters(rank):
    """RESAMPLE_GRAD's, but RoundingDirection is required."""
    return dict(_resample_parameters(rank),
                rounding_direction=(["decreasing", "increasing", 0, 1], [None, "up", 2, 1.5]))


# ---- BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD -----------------------------------------------

def _batch_normalization_case(rng, shape, dtype) -> Case:
    """X, dY; statistics kept (input's size) on about 40% of the dimensions, reduced (1) on
    the rest; Mean arbitrary (not X's own), Variance in [0.5, 2); Epsilon 0, 1e-5, 1e-3 or
    0.5."""
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    stats_shape = tuple(s if rng.random() < 0.4 else 1 for s in shape)
    mean = rng.standard_normal(stats_shape).astype(dtype)
    variance = rng.uniform(0.5, 2.0, stats_shape).astype(dtype)
    scale = rng.standard_normal(stats_shape).astype(dtype)
    epsilon = (0.0, 1e-5, 1e-3, 0.5)[int(rng.integers(4))]
    return Case((x, dy, mean, variance, scale, epsilon),
                label=f"{np.dtype(dtype).name} {list(shape)}, statistics {list(stats_shape)}")


def _batch_normalization_magnitude(training: bool):
    """Per output, the size of the terms it is made of (float64), for error bounds: the sum of
    the absolute terms of each sum, and for dX the absolute terms of its formula."""
    def magnitude(args, kwargs):
        x, dy, m, v, s = (np.asarray(a, np.float64) for a in args[:5])
        eps = args[5]
        dy = np.broadcast_to(dy, x.shape)
        axes = tuple(d for d in range(x.ndim) if m.shape[d] == 1)
        sigma = np.sqrt(v + eps)
        mag_scale = np.sum(np.abs(dy * (x - m)), axis=axes, keepdims=True) / sigma
        mag_bias = np.sum(np.abs(dy), axis=axes, keepdims=True)
        if not training:
            mag_dx = np.abs(dy * s / sigma)
        else:
            ma = (x - m).mean(axis=axes, keepdims=True)
            mdy = dy.mean(axis=axes, keepdims=True)
            q = (dy * (x - m - ma)).mean(axis=axes, keepdims=True) / (v + eps)
            mag_dx = np.abs(s / sigma) * (np.abs(dy) + np.abs(mdy)
                                          + (np.abs(x - m) + np.abs(ma)) * np.abs(q))
        return mag_dx, mag_scale.reshape(m.shape), mag_bias.reshape(m.shape)
    return magnitude


def _batch_normalization_describe(descriptor):
    def describe(case):
        x, dy, mean, variance, scale, epsilon = case.args
        big, small = _packed(x), _packed(mean)
        return descriptor(big, _packed(dy), small, _packed(variance), _packed(scale), big, small,
                          small, epsilon)
    return describe


def _batch_normalization_call(desc, values):
    return (tuple(values[name] for name in ("input_tensor", "input_gradient_tensor",
                                            "mean_tensor", "variance_tensor", "scale_tensor"))
            + (desc.epsilon,), {})


def _batch_normalization_parameters(rank):
    return {"epsilon": ([1e-3, 0.0, 0.5, 1e-5], [-1e-5, math.nan, math.inf, 1e39, "0.1", True])}


# ---- RANDOM_GENERATOR --------------------------------------------------------------------------

# Counters where carries happen: low words near 2^32 (a carry into s1 and beyond), and the
# whole counter near 2^64 and 2^128 (wrapping to 0).
_COUNTER_EDGES = ((0xFFFFFFF0, 0, 0, 0), (0xFFFFFFFE, 0xFFFFFFFF, 0, 0),
                  (0xFFFFFFFD, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF))
_GENERATOR_TYPES = ("philox_4x32_10", RandomGeneratorType.PHILOX_4X32_10, 0)


def _random_generator_case(rng, shape, dtype) -> Case:
    """A random state (uniform words, or a counter just below a carry into the next word, 2^64
    or 2^128, with a random key) and output sizes `shape`; Type as a name, a member or 0."""
    state = rng.integers(0, 2**32, 6, dtype=np.uint64).astype(np.uint32)
    edge = int(rng.integers(len(_COUNTER_EDGES) + 1))
    if edge < len(_COUNTER_EDGES):
        state[:4] = _COUNTER_EDGES[edge]
    kwargs = dict(type=_GENERATOR_TYPES[int(rng.integers(len(_GENERATOR_TYPES)))])
    return Case((state, tuple(shape)), kwargs,
                label=f"uint32 {list(shape)}, counter {int(state[3]):08x}..{int(state[0]):08x}")


def _random_generator_describe(case):
    state, sizes = case.args
    return RandomGeneratorDesc(_packed(state), TensorDesc(DataType.UINT32, sizes), _packed(state),
                               case.kwargs.get("type", "philox_4x32_10"))


def _random_generator_call(desc, values):
    return (values["input_state_tensor"], desc.output_tensor.sizes), dict(type=desc.type)


def _random_generator_parameters(rank):
    return {"type": (list(_GENERATOR_TYPES), ["philox_4x32_7", 1, 0.0, None])}


# ---- ELEMENT_WISE_CLIP_GRAD and _GRAD1 ----------------------------------------------------------

def _clip_values(rng: np.random.Generator, shape: Tuple[int, ...], dtype: DTypeLike,
                 bounds: Callable[[np.ndarray], Union[int, float]]
                 ) -> Tuple[np.ndarray, np.ndarray, Tuple[Union[int, float], Union[int, float]]]:
    """X, dY and two bounds for a clip grad: floats standard normal times 2 with a few NaN,
    +-Inf and -0; integers over the whole type, half of them near zero. `bounds(x)` draws
    one bound: near the data (often one of X's values, so X == bound is common), at the
    type's extremes, beyond them, or NaN."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = (2 * rng.standard_normal(shape)).astype(dtype)
        special = rng.random(shape) < 0.05
        x[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype),
                                np.count_nonzero(special))
        dy = rng.standard_normal(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        wide = rng.integers(info.min, info.max, shape, dtype, endpoint=True)
        x = np.where(rng.random(shape) < 0.5, wide, rng.integers(-8, 9, shape).clip(
            info.min, info.max).astype(dtype))
        dy = rng.integers(info.min, info.max, shape, dtype, endpoint=True)
    return x, dy, (bounds(x), bounds(x))


def _clip_case(native: bool) -> Callable[[np.random.Generator, Tuple[int, ...], type], Case]:
    """The case generator of ELEMENT_WISE_CLIP_GRAD (float bounds) or, `native`, _GRAD1
    (bounds in the tensors' type). Min > Max about one case in ten."""
    def make_case(rng: np.random.Generator, shape: Tuple[int, ...], dtype: type) -> Case:
        dtype = np.dtype(dtype)

        def bound(x: np.ndarray) -> Union[int, float]:
            pick = rng.random()
            if dtype.kind == "f":
                if pick < 0.4:
                    value = x.flat[int(rng.integers(x.size))]
                elif pick < 0.8:
                    value = rng.uniform(-3, 3)
                else:
                    value = (np.nan, np.inf, -np.inf, 0.0, -0.0)[int(rng.integers(5))]
                return float(dtype.type(value)) if native else float(np.float32(value))
            info = np.iinfo(dtype)
            if pick < 0.4:
                value = int(x.flat[int(rng.integers(x.size))])
            elif pick < 0.7:
                value = int(rng.integers(-8, 9))
            else:
                value = (info.min, info.max, info.min + 1, info.max - 1)[int(rng.integers(4))]
            value = min(max(value, int(info.min)), int(info.max))
            if native:
                return value
            # Float bounds: the integer, or half-way to the next (a bound between integers).
            return float(np.float32(value + (0.5 if rng.random() < 0.3 else 0.0)))

        x, dy, (low, high) = _clip_values(rng, shape, dtype, bound)
        if low > high and rng.random() < 0.8:
            low, high = high, low
        label = f"{dtype.name} {list(shape)} min={low:.7g} max={high:.7g}"
        return Case((x, dy), dict(min=low, max=high), label=label)
    return make_case


def _clip1_describe(case: Case) -> ElementWiseClipGrad1Desc:
    x, dy = case.args
    return ElementWiseClipGrad1Desc(_packed(x), _packed(dy), _packed(x), _packed(x).data_type,
                                    **case.kwargs)


def _clip_call(desc: Union[ElementWiseClipGradDesc, ElementWiseClipGrad1Desc],
               values: Dict[str, np.ndarray]
               ) -> Tuple[Tuple[np.ndarray, ...], Dict[str, Union[int, float]]]:
    return ((values["input_tensor"], values["input_gradient_tensor"]),
            dict(min=desc.min, max=desc.max))


def _clip_parameters(native: bool) -> Callable[[int], Dict[str, Tuple[list, list]]]:
    def examples(rank: int) -> Dict[str, Tuple[list, list]]:
        if native:  # valid for FLOAT32 tensors, the fuzzing's usual type
            return {"min": ([0, -1.5, math.nan, -math.inf], [0.1, "0", True, None]),
                    "max": ([6, 2.5, math.inf], [1e39, 1 + 2.0**-30, "1"]),
                    "min_max_data_type": ([DataType.FLOAT32], [DataType.INT32, 0, 1.0])}
        return {"min": ([0.0, -1.5, math.nan, -math.inf, 3], [1e39, "0", True, None]),
                "max": ([6.0, 2.5, math.inf, math.nan], [-1e39, "1", False])}
    return examples


# Every DataType the clip grads take, as numpy types (`Operator.dtypes`).
_CLIP_DTYPES = tuple(t.numpy_dtype.type for t in CLIP_DATA_TYPES)
# Clip grads select dY or +0: exact (bitwise) in every data type.
_CLIP_TOLERANCES = {np.dtype(dtype).name: EXACT for dtype in _CLIP_DTYPES}


# ---- ADAM_OPTIMIZER ------------------------------------------------------------------------------

def _adam_case(rng, shape, dtype) -> Case:
    """Parameters N(0, 1), moments of a few earlier steps, gradients N(0, 1) with a few zeros;
    a step T from 1 to 1000 and hyperparameters around the usual ones."""
    x, g = rng.standard_normal(shape), rng.standard_normal(shape) * (rng.random(shape) > 0.1)
    m, v = 0.1 * rng.standard_normal(shape), 0.01 * rng.standard_normal(shape) ** 2
    scalars = (10.0 ** rng.uniform(-4, -1), rng.uniform(0.8, 0.95), rng.uniform(0.99, 0.9999),
               float(rng.choice([1e-8, 1e-6, 1e-3])))
    t = int(rng.choice([1, 2, 3, 7, 100, 1000]))
    step = np.full((1,) * len(shape), t, np.uint32)  # TrainingStepTensor
    return Case(tuple(a.astype(dtype) for a in (x, m, v, g)) + (step,) + scalars,
                label=f"{np.dtype(dtype).name} {list(shape)}, T {t}")


def _adam_magnitude(args, kwargs):
    """|each term| of m', v' and x'; x' also carries alpha's error, from float32 Beta^T: about
    T 2^-23 / (1 - Beta^T) of it for each Beta, in units of the float32 tolerance."""
    x, m, v, g = (np.abs(np.asarray(a, np.float64)) for a in args[:4])
    t, b1, b2 = int(np.asarray(args[4]).reshape(-1)[0]), args[6], args[7]
    new_x, new_m, new_v = reference.adam_optimizer(*args)
    alpha = t * 2.0**-23 * (1 / (1 - b1**t) + 1 / (1 - b2**t))
    step = np.abs(np.asarray(args[0], np.float64) - new_x)
    return (x + step * (1 + alpha / _SUMS_F32.magnitude), b1 * m + (1 - b1) * g,
            b2 * v + (1 - b2) * g * g)


def _adam_describe(case):
    x = _packed(case.args[0])
    return AdamOptimizerDesc(*(_packed(a) for a in case.args[:5]), x, x, x, *case.args[5:])


def _adam_call(desc, values):
    return (tuple(values[f] for f in ("input_parameters_tensor", "input_first_moment_tensor",
                                      "input_second_moment_tensor", "gradient_tensor",
                                      "training_step_tensor"))
            + (desc.learning_rate, desc.beta1, desc.beta2, desc.epsilon)), {}


def _adam_parameters(rank):
    bad = [float("nan"), float("inf"), 1e39, "0.1", True]
    return {name: ([0.5, 1e-3], bad) for name in ("learning_rate", "beta1", "beta2", "epsilon")}


# ---- tolerances ----------------------------------------------------------------------------------
# One per operator and data type; the operator suites and the hardening properties use these.
#
# ReLU grad is a select: the device copies bits of dY or writes +0, so it is exact in both types.
#
# The others compute in float32 whatever the data type, and sum terms. Their error is bounded
# relative to the magnitude M of an element (the sum of the absolute values of its terms),
# which bounds the rounding of any summation order: 1e-5 M (about 170 float32 ulps of M) covers
# a few roundings per term over the sums the kernels do in a fixed tree order. Float16 results
# then round once to float16 on store:
# - ResampleGrad: 2^-10 M + 2^-24. Its dX <= M, so 2^-10 M covers the store's rounding
#   (2^-11 relative) twice over together with the float32 sum, and 2^-24 is float16's
#   subnormal spacing.
# - BatchNorm grads: 1e-5 M + 2^-10 |dX| + 1e-7: the float32 sums as in float32, plus one
#   float16 rounding of the result (2^-10 relative also covers a truncating conversion), plus
#   1e-7 absolute for float16 subnormals. Its magnitudes can be far above |dX| (the training
#   grad's dX cancels large terms), so the rounding is bounded by |dX| instead of M.
_SUMS_F32 = Tolerance(magnitude=1e-5)
_RESAMPLE_F16 = Tolerance(magnitude=2.0**-10, absolute=2.0**-24)
_BATCH_NORMALIZATION_F16 = Tolerance(magnitude=1e-5, value=2.0**-10, absolute=1e-7)


OPERATORS: Tuple[Operator, ...] = (
    Operator("activation_relu_grad", ActivationReluGradDesc, activation_relu_grad,
             reference.activation_relu_grad, elementwise_case(),
             {"float32": EXACT, "float16": EXACT}, elementwise_describe(ActivationReluGradDesc),
             elementwise_call),
    Operator("resample_grad", ResampleGradDesc, resample_grad, reference.resample_grad,
             _resample_case(False), {"float32": _SUMS_F32, "float16": _RESAMPLE_F16},
             _resample_describe(ResampleGradDesc), _resample_call,
             max_rank=4, magnitude=_resample_magnitude, parameter_examples=_resample_parameters,
             demo_shape=(4, 16, 64, 64)),
    Operator("batch_normalization_grad", BatchNormalizationGradDesc, batch_normalization_grad,
             reference.batch_normalization_grad, _batch_normalization_case,
             {"float32": _SUMS_F32, "float16": _BATCH_NORMALIZATION_F16},
             _batch_normalization_describe(BatchNormalizationGradDesc),
             _batch_normalization_call, magnitude=_batch_normalization_magnitude(False),
             parameter_examples=_batch_normalization_parameters, demo_shape=(8, 32, 28, 28)),
    Operator("batch_normalization_training_grad", BatchNormalizationTrainingGradDesc,
             batch_normalization_training_grad, reference.batch_normalization_training_grad,
             _batch_normalization_case,
             {"float32": _SUMS_F32, "float16": _BATCH_NORMALIZATION_F16},
             _batch_normalization_describe(BatchNormalizationTrainingGradDesc),
             _batch_normalization_call, magnitude=_batch_normalization_magnitude(True),
             parameter_examples=_batch_normalization_parameters, demo_shape=(8, 32, 28, 28)),
    # Integer arithmetic only: the oracle's bits exactly.
    Operator("random_generator", RandomGeneratorDesc, random_generator,
             reference.random_generator, _random_generator_case, {"uint32": EXACT},
             _random_generator_describe, _random_generator_call,
             parameter_examples=_random_generator_parameters, demo_shape=(16, 256, 1024),
             dtypes=(np.uint32,)),
    # Every operation correctly rounded, in one order (the same bits everywhere); against
    # float64, float32 Beta^T's error in alpha (_adam_magnitude).
    Operator("adam_optimizer", AdamOptimizerDesc, adam_optimizer, reference.adam_optimizer,
             _adam_case, {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, _adam_describe,
             _adam_call, magnitude=_adam_magnitude, parameter_examples=_adam_parameters,
             demo_shape=(16, 256, 1024)),
    Operator("element_wise_clip_grad", ElementWiseClipGradDesc, element_wise_clip_grad,
             reference.element_wise_clip_grad, _clip_case(False), _CLIP_TOLERANCES,
             elementwise_describe(ElementWiseClipGradDesc), _clip_call,
             parameter_examples=_clip_parameters(False), dtypes=_CLIP_DTYPES),
    Operator("element_wise_clip_grad1", ElementWiseClipGrad1Desc, element_wise_clip_grad1,
             reference.element_wise_clip_grad1, _clip_case(True), _CLIP_TOLERANCES,
             _clip1_describe, _clip_call, parameter_examples=_clip_parameters(True),
             dtypes=_CLIP_DTYPES),
    # Last: the tests that draw every record's cases from one generator in table order
    # (tests/test_kernels.py's plans_by_operator, the demo) keep the others' draws.
    # RESAMPLE_GRAD's sums (the same tables and kernels), so its tolerances.
    Operator("resample_grad1", ResampleGrad1Desc, resample_grad1, reference.resample_grad1,
             _resample_case(True), {"float32": _SUMS_F32, "float16": _RESAMPLE_F16},
             _resample_describe(ResampleGrad1Desc), _resample_call,
             max_rank=4, magnitude=_resample_magnitude, parameter_examples=_resample1_parameters,
             demo_shape=(4, 16, 64, 64)),
    # Sums of dY / count (each correctly rounded) or of selected dY, in float32: the sums'
    # tolerances (float16: one rounding on store).
    Operator("average_pooling_grad", AveragePoolingGradDesc, average_pooling_grad,
             reference.average_pooling_grad, pool.average_pooling_case,
             {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, pool.average_pooling_describe,
             pool.average_pooling_call, max_rank=5, magnitude=pool.average_pooling_magnitude,
             parameter_examples=pool.pooling_parameters(False), demo_shape=(8, 64, 56, 56)),
    Operator("max_pooling_grad", MaxPoolingGradDesc, max_pooling_grad,
             reference.max_pooling_grad, pool.max_pooling_case,
             {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, pool.max_pooling_describe,
             pool.max_pooling_call, max_rank=5, magnitude=pool.max_pooling_magnitude,
             parameter_examples=pool.pooling_parameters(True), demo_shape=(8, 64, 56, 56)),
    # A gather summing float32 terms (dY / (Sy Sx), or dY, times a weight product) in a fixed
    # order: sums' tolerances, relative to the sum of the terms' absolute values.
    Operator("roi_align_grad", RoiAlignGradDesc, roi_align_grad, reference.roi_align_grad,
             roi_align_case, {"float32": _SUMS_F32, "float16": _RESAMPLE_F16},
             roi_align_describe, roi_align_call, max_rank=4, magnitude=roi_align_magnitude,
             parameter_examples=roi_align_parameters, demo_shape=(2, 64, 50, 50)),
    # A copy of dY's bits into zeros: exact in every data type.
    Operator("slice_grad", SliceGradDesc, slice_grad, reference.slice_grad, slice_grad_case,
             SLICE_GRAD_TOLERANCES, slice_grad_describe, slice_grad_call,
             parameter_examples=slice_grad_parameters, dtypes=SLICE_GRAD_DTYPES),
    # Fixed-order float32 sums and pow_fixed: the same bits everywhere; against float64,
    # relative to the terms' sizes (_cases_lrn.py).
    Operator("local_response_normalization_grad", LocalResponseNormalizationGradDesc,
             local_response_normalization_grad, reference.local_response_normalization_grad,
             lrn_case, LRN_TOLERANCES, lrn_describe, lrn_call, max_rank=4,
             magnitude=lrn_magnitude, parameter_examples=lrn_parameters,
             demo_shape=(8, 64, 56, 56)),
    # Exact sums of fixed float32 chunk sums, then correctly rounded steps: the same bits
    # everywhere; against float64, relative to the terms (_cases_batch_normalization_training.py).
    Operator("batch_normalization_training", BatchNormalizationTrainingDesc,
             batch_normalization_training, reference.batch_normalization_training,
             batch_normalization_training_case, BATCH_NORMALIZATION_TRAINING_TOLERANCES,
             batch_normalization_training_describe, batch_normalization_training_call,
             magnitude=batch_normalization_training_magnitude,
             parameter_examples=batch_normalization_training_parameters,
             demo_shape=(8, 32, 28, 28)),
)
BY_NAME: Dict[str, Operator] = {op.name: op for op in OPERATORS}
