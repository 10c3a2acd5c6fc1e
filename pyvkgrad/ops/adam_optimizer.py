"""DML_OPERATOR_ADAM_OPTIMIZER: one step of Adam (Kingma and Ba) per element (docs/semantics.md
§11).

    m' = Beta1 m + (1 - Beta1) g
    v' = Beta2 v + (1 - Beta2) g^2
    x' = x - LearningRate alpha m' / (sqrt(v') + Epsilon),  alpha = sqrt(1 - Beta2^T) / (1 - Beta1^T)

T is the TrainingStepTensor's value, used as given: the first step is T = 1, and T = 0 gives
alpha = 0/0, so every x' NaN (m' and v' are still right). Epsilon is added outside the square
root and is not bias-corrected. The kernel (shaders/adam_optimizer.comp) evaluates these in
float32 in one fixed order with every operation correctly rounded, so the results are the same
bits on every device; float16 tensors widen exactly and each result rounds once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Dict, Tuple, Union

import numpy as np

from ..plan import (READ, WRITE, Dispatch, Limits, OperatorDesc, Plan, float_word, grid_slices,
                    right_align)
from ..tensor import (DataType, TensorDesc, check_desc, check_float,
                      check_float_type, check_output, check_rank, check_same, coalesce, dml_name,
                      check_numpy, fail)
from . import _one_call

if TYPE_CHECKING:
    from ..device import DeviceLike

OPERATOR = "ADAM_OPTIMIZER"
MAX_RANK = 8
INPUTS = ("input_parameters_tensor", "input_first_moment_tensor", "input_second_moment_tensor",
          "gradient_tensor")
OUTPUTS = ("output_parameters_tensor", "output_first_moment_tensor",
           "output_second_moment_tensor")
SCALARS = ("learning_rate", "beta1", "beta2", "epsilon")
# Items (words or elements) an invocation takes where there are enough: its workgroup computes
# alpha (Beta^T, a square root and a division) once for all of them.
ITEMS_PER_INVOCATION = 8
# Packed tensors: each item's words loaded a pass ahead (the kernel's PREFETCH).
PREFETCH = True
# The kernel's float path keeps every sum's terms at 0 or at least 2^-102, so that no operand
# or result is subnormal (a device may flush those); elements with smaller inputs take its
# exact path (shaders/adam_optimizer.comp, adam()).
SUMMAND_LEAST = 2.0 ** -102
LEAST_NORMAL = 2.0 ** -126


def _bits_at_least(value: float) -> int:
    """The bits of the least float32 >= value (Inf's past the largest float)."""
    if value > float(np.finfo(np.float32).max):
        return 0x7F800000
    f = np.float32(value)
    if float(f) < value:
        f = np.nextafter(f, np.float32(np.inf))
    return float_word(f)


def _subnormal(value: float) -> bool:
    """Whether value, rounded to float32, is subnormal (nonzero, below 2^-126)."""
    return 0 < abs(float(np.float32(value))) < LEAST_NORMAL


def _least_factor(c: float) -> float:
    """The least |y| for which c y is 0 or at least 2^-102, y normal."""
    return LEAST_NORMAL if c == 0 else max(LEAST_NORMAL, SUMMAND_LEAST / abs(c))


def _power_of_two_at_least(bits: int) -> int:
    """The bits of the least power of two >= the positive float32 whose bits are `bits`."""
    return bits if bits & 0x7FFFFF == 0 else (bits & 0x7F800000) + 0x800000


def step_values(beta1: float, beta2: float, epsilon: float, data_type: DataType
                ) -> Tuple[Dict[str, Union[int, bool]], Dict[str, int]]:
    """(specialization constants, push constants) that shaders/include/adam_step.glsl
    declares. The constants: the float path's limits M_LEAST, G_LEAST and V_LEAST (float32
    bits of powers of two: m below M_LEAST makes Beta1 m too small; g below G_LEAST (1 -
    Beta1) g or (1 - Beta2) g^2, or g^2 subnormal; v below V_LEAST Beta2 v), CHECK_INPUTS,
    EXACT_ONLY (Beta1, Beta2 or Epsilon is subnormal in float32) and NEGATIVE_EPSILON. The
    push constants: beta1, beta2, epsilon, one_minus_beta1 and one_minus_beta2 (the float32
    differences), as float32 bits."""
    f32 = np.float32
    one_minus_beta1 = float(f32(1) - f32(beta1))
    one_minus_beta2 = float(f32(1) - f32(beta2))
    beta1, beta2 = float(f32(beta1)), float(f32(beta2))  # the kernel's scalars
    g_least = max(_least_factor(one_minus_beta1), 2.0 ** -63,
                  (SUMMAND_LEAST / abs(one_minus_beta2)) ** 0.5 if one_minus_beta2 else 0.0)
    limits = dict(M_LEAST=_least_factor(beta1), G_LEAST=g_least, V_LEAST=_least_factor(beta2))
    # float16 inputs are 0 or at least 2^-24.
    least_input = 2.0 ** -24 if data_type == DataType.FLOAT16 else 0.0
    # (Powers of two: a higher limit only sends more elements down the exact path, which
    # gives the same bits, and Betas that change every step keep one pipeline.)
    constants = dict(
        {k: _power_of_two_at_least(_bits_at_least(v * (1 + 2.0 ** -20)))
         for k, v in limits.items()},
        CHECK_INPUTS=max(*limits.values(), SUMMAND_LEAST) > least_input,
        # A subnormal scalar is an operand a flushing device would flush (1 - Beta is 0 or
        # at least 2^-24; a subnormal LearningRate alpha the kernel sees itself).
        EXACT_ONLY=any(_subnormal(c) for c in (beta1, beta2, epsilon)),
        NEGATIVE_EPSILON=float(f32(epsilon)) < 0)
    push = {name: float_word(value) for name, value in (
        ("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon),
        ("one_minus_beta1", one_minus_beta1), ("one_minus_beta2", one_minus_beta2))}
    return constants, push


# The tensors' names in the kernel.
BINDINGS = dict(x="input_parameters_tensor", m="input_first_moment_tensor",
                v="input_second_moment_tensor", g="gradient_tensor",
                step="training_step_tensor", new_x="output_parameters_tensor",
                new_m="output_first_moment_tensor", new_v="output_second_moment_tensor")


@dataclass(frozen=True)
class AdamOptimizerDesc(OperatorDesc):
    """`DML_ADAM_OPTIMIZER_OPERATOR_DESC`. The seven parameter, moment and gradient tensors: one
    data type (FLOAT32 or FLOAT16) and one set of sizes, 1 to 8 dimensions, any strides (the
    outputs' may not overlap). training_step_tensor: UINT32, every size 1. learning_rate,
    beta1, beta2, epsilon: finite in float32 (beta1 = 1 gives Inf or NaN, as the formula
    does). Each output may be bound over any of the four inputs with the identical descriptor
    (in place)."""

    input_parameters_tensor: TensorDesc
    input_first_moment_tensor: TensorDesc
    input_second_moment_tensor: TensorDesc
    gradient_tensor: TensorDesc
    training_step_tensor: TensorDesc
    output_parameters_tensor: TensorDesc
    output_first_moment_tensor: TensorDesc
    output_second_moment_tensor: TensorDesc
    learning_rate: float
    beta1: float
    beta2: float
    epsilon: float
    OPERATOR: ClassVar[str] = OPERATOR
    IN_PLACE: ClassVar[Dict[str, Tuple[str, ...]]] = {out: INPUTS for out in OUTPUTS}
    INDEPENDENT_AXES: ClassVar[str] = "every axis (element-wise)"

    def __post_init__(self) -> None:
        named = [(dml_name(f), check_desc(OPERATOR, dml_name(f), getattr(self, f)))
                 for f in INPUTS + OUTPUTS]
        check_rank(OPERATOR, named[0][0], named[0][1], 1, MAX_RANK)
        check_float_type(OPERATOR, named[0][0], named[0][1])
        for attr in ("data_type", "sizes"):
            check_same(OPERATOR, attr, named[0], *named[1:])
        for name, desc in named[len(INPUTS):]:
            check_output(OPERATOR, name, desc)
        step = check_desc(OPERATOR, "TrainingStepTensor", self.training_step_tensor)
        if step.data_type != DataType.UINT32:
            fail(OPERATOR, "TrainingStepTensor.DataType", "must be UINT32", "UINT32",
                 step.data_type.name, TypeError)
        if step.element_count != 1:
            fail(OPERATOR, "TrainingStepTensor.Sizes", "must all be 1", "(1, ..., 1)",
                 step.sizes)
        for name in SCALARS:
            object.__setattr__(self, name, check_float(OPERATOR, dml_name(name),
                                                       getattr(self, name)))

    def tensor_fields(self):
        return tuple((f, (getattr(self, f), READ)) for f in INPUTS + ("training_step_tensor",)) \
            + tuple((f, (getattr(self, f), WRITE)) for f in OUTPUTS)

    def independent_axes(self) -> Tuple[int, ...]:
        """Element-wise: every axis (the step tensor, size 1 everywhere, goes whole to each
        piece)."""
        return tuple(range(self.input_parameters_tensor.rank))

    def plan(self, limits: Limits) -> Plan:
        x = self.input_parameters_tensor
        wg, size = limits.local_size, x.data_type.element_size
        tensors = INPUTS + OUTPUTS
        step_constants, step_push = step_values(self.beta1, self.beta2, self.epsilon,
                                                x.data_type)
        constants = dict(step_constants, WG=wg, IS_F16=size == 2)
        sizes, strides = coalesce(x.sizes, *(getattr(self, f).element_strides for f in tensors))
        packed = len(sizes) == 1 and all(s == (1,) for s in strides)
        names = ("X", "M", "V", "G", "NEW_X", "NEW_M", "NEW_V")
        # Packed, the kernel reads no sizes or strides (the count and `elements` are push
        # constants): they stay at their defaults, so that tensors of every size share one
        # pipeline (a model's parameters, one Adam operator each).
        if packed:
            sizes, strides = (), ((),) * len(names)
        constants.update(SIZES=right_align(sizes, 8, 1), **{
            f"{n}_STRIDES": right_align(s, 8, 0) for n, s in zip(names, strides)})
        # Packed: one 32-bit word of each tensor per item (one float32 or two float16).
        count = -(-x.element_count * size // 4) if packed else x.element_count
        # An item's loops: the grid loop's iteration, and per element the division's and the
        # square root's correction loops (2 iterations each, 3 counted); Beta^T's
        # square-and-multiply (up to 32) and alpha's division and square root run once, in
        # each workgroup's invocation 0 (counted for every invocation: an overestimate), and
        # an invocation takes ITEMS_PER_INVOCATION items where there are that many.
        loops = 1 + (2 if packed and size == 2 else 1) * 2 * 3
        # LearningRate, the Betas and Epsilon in push constants: one pipeline for all of them
        # (a schedule that changes them every step compiles no kernel).
        scalars = dict(step_push, learning_rate=float_word(self.learning_rate))
        return Plan(tuple(Dispatch("adam_optimizer", BINDINGS, workgroups,
                                   constants=dict(constants, PACKED=packed,
                                                  PREFETCH=packed and PREFETCH),
                                   push=dict(scalars, count=end, elements=x.element_count,
                                             first=first))
                          for first, end, workgroups in grid_slices(
                              count, wg, limits, loops, 2 * 33 + 2 * 3, ITEMS_PER_INVOCATION)),
                    tensors=tuple(n for n, _ in self.tensor_fields()))


def adam_optimizer(input_parameters: np.ndarray, input_first_moment: np.ndarray,
                   input_second_moment: np.ndarray, gradient: np.ndarray,
                   training_step: Union[int, np.ndarray], learning_rate: float, beta1: float,
                   beta2: float, epsilon: float, *, device: DeviceLike = None
                   ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parameters, first_moment, second_moment) after one Adam step on the device, new packed
    arrays of input_parameters' dtype and shape. training_step: T, an int or a one-element
    uint32 array (the first step is 1)."""
    # An array first: np.ndim of a ragged list raises numpy's own error.
    check_numpy(input_parameters, OPERATOR, "input_parameters")
    rank = np.ndim(input_parameters)
    if isinstance(training_step, (bool, np.bool_)) or not isinstance(
            training_step, (int, np.integer, np.ndarray)):
        fail(OPERATOR, "TrainingStepTensor", "must be an int or a uint32 array", "int",
             type(training_step).__name__, TypeError)
    if isinstance(training_step, np.ndarray):
        step = training_step
        if step.size != 1:
            fail(OPERATOR, "TrainingStepTensor.Sizes", "must all be 1", "(1, ..., 1)",
                 step.shape)
    else:
        if not 0 <= int(training_step) < 2**32:
            fail(OPERATOR, "TrainingStepTensor", "must be a uint32", "0 <= T < 2^32",
                 training_step)
        step = np.array(int(training_step), np.uint32)
    step = step.reshape((1,) * max(rank, 1))
    params = (learning_rate, beta1, beta2, epsilon)

    def describe(d, dev):
        x = d["input_parameters"]
        outs = [x.with_sizes(x.sizes) for _ in OUTPUTS]
        desc = AdamOptimizerDesc(d["input_parameters"], d["input_first_moment"],
                                 d["input_second_moment"], d["gradient"], d["training_step"],
                                 *outs, *params)
        return desc, {name: (np.shape(input_parameters), x.data_type.element_size)
                      for name in ("output_parameters", "output_first_moment",
                                   "output_second_moment")}

    def rerun(dev, **p):
        return adam_optimizer(*p.values(), *params, device=dev)

    arrays = dict(input_parameters=input_parameters, input_first_moment=input_first_moment,
                  input_second_moment=input_second_moment, gradient=gradient,
                  training_step=step)
    x, m, v = _one_call.run(OPERATOR, device, params, arrays, describe, rerun,
                            data_types={"training_step": (DataType.UINT32,)})
    return x, m, v
