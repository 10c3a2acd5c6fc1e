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

from typing import Callable, Dict, Tuple

import numpy as np

from . import reference
from .ops.adam_optimizer import AdamOptimizerDesc, adam_optimizer
from .ops.activation_relu_grad import ActivationReluGradDesc, activation_relu_grad
from .ops.batch_normalization_grad import BatchNormalizationGradDesc, batch_normalization_grad
from .ops.batch_normalization_training_grad import (BatchNormalizationTrainingGradDesc,
                                                    batch_normalization_training_grad)
from .ops.element_wise_clip_grad import ElementWiseClipGradDesc, element_wise_clip_grad
from .ops.element_wise_clip_grad1 import ElementWiseClipGrad1Desc, element_wise_clip_grad1
from .ops.random_generator import RandomGeneratorDesc, random_generator
from .ops.resample_grad import ResampleGradDesc, resample_grad
from .ops.resample_grad1 import ResampleGrad1Desc, resample_grad1
from .ops.roi_align_grad import RoiAlignGradDesc, roi_align_grad
from .ops.slice_grad import SliceGradDesc, slice_grad
from .ops.batch_normalization_training import (BatchNormalizationTrainingDesc,
                                               batch_normalization_training)
from .ops.local_response_normalization_grad import (LocalResponseNormalizationGradDesc,
                                                    local_response_normalization_grad)
from .ops.average_pooling_grad import AveragePoolingGradDesc, average_pooling_grad
from .ops.max_pooling_grad import MaxPoolingGradDesc, max_pooling_grad

# The record, its parts and the comparison with the oracle (operator_record.py), re-exported.
from .operator_record import (DTYPES, EXACT, EXECUTION_OPTIONS, Case, Operator,  # noqa: F401
                              Outputs, Tolerance, assert_close, compare)
# Each family's case generators, describe / call, magnitudes and parameter examples.
from ._cases_elementwise import elementwise_call, elementwise_case, elementwise_describe
from ._cases_resample import (resample1_parameters, resample_call, resample_case,
                              resample_describe, resample_magnitude, resample_parameters)
from ._cases_batch_normalization import (batch_normalization_call, batch_normalization_case,
                                         batch_normalization_describe,
                                         batch_normalization_magnitude,
                                         batch_normalization_parameters)
from ._cases_random import (random_generator_call, random_generator_case,
                            random_generator_describe, random_generator_parameters)
from ._cases_clip import (CLIP_DTYPES, CLIP_TOLERANCES, clip1_describe, clip_call, clip_case,
                          clip_parameters)
from ._cases_adam import (adam_call, adam_case, adam_describe, adam_magnitude,
                          adam_parameters)
from . import _cases_pooling as pool
from ._cases_roi_align import (roi_align_call, roi_align_case, roi_align_describe,
                               roi_align_magnitude, roi_align_parameters)
from ._cases_batch_normalization_training import (
    BATCH_NORMALIZATION_TRAINING_TOLERANCES, batch_normalization_training_call,
    batch_normalization_training_case, batch_normalization_training_describe,
    batch_normalization_training_magnitude, batch_normalization_training_parameters)
from ._cases_slice import (SLICE_GRAD_DTYPES, SLICE_GRAD_TOLERANCES, slice_grad_call,
                           slice_grad_case, slice_grad_describe, slice_grad_parameters)
from ._cases_lrn import (LRN_TOLERANCES, lrn_call, lrn_case, lrn_describe, lrn_magnitude,
                         lrn_parameters)

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


def _resample_record(name: str, descriptor: type, function: Callable, oracle: Callable,
                     rounding_required: bool) -> Operator:
    """The record of RESAMPLE_GRAD or, `rounding_required`, RESAMPLE_GRAD1: the same sums (the
    same tables and kernels), so the same tolerances."""
    return Operator(name, descriptor, function, oracle, resample_case(rounding_required),
                    {"float32": _SUMS_F32, "float16": _RESAMPLE_F16},
                    resample_describe(descriptor), resample_call, max_rank=4,
                    magnitude=resample_magnitude,
                    parameter_examples=(resample1_parameters if rounding_required
                                        else resample_parameters),
                    demo_shape=(4, 16, 64, 64))


def _batch_normalization_record(name: str, descriptor: type, function: Callable,
                                oracle: Callable, training: bool) -> Operator:
    """The record of BATCH_NORMALIZATION_GRAD or, `training`, _TRAINING_GRAD: one case
    generator and the same tolerances, magnitudes of their own formulas."""
    return Operator(name, descriptor, function, oracle, batch_normalization_case,
                    {"float32": _SUMS_F32, "float16": _BATCH_NORMALIZATION_F16},
                    batch_normalization_describe(descriptor), batch_normalization_call,
                    magnitude=batch_normalization_magnitude(training),
                    parameter_examples=batch_normalization_parameters,
                    demo_shape=(8, 32, 28, 28))


OPERATORS: Tuple[Operator, ...] = (
    Operator("activation_relu_grad", ActivationReluGradDesc, activation_relu_grad,
             reference.activation_relu_grad, elementwise_case(),
             {"float32": EXACT, "float16": EXACT}, elementwise_describe(ActivationReluGradDesc),
             elementwise_call),
    _resample_record("resample_grad", ResampleGradDesc, resample_grad,
                     reference.resample_grad, False),
    _batch_normalization_record("batch_normalization_grad", BatchNormalizationGradDesc,
                                batch_normalization_grad, reference.batch_normalization_grad,
                                False),
    _batch_normalization_record("batch_normalization_training_grad",
                                BatchNormalizationTrainingGradDesc,
                                batch_normalization_training_grad,
                                reference.batch_normalization_training_grad, True),
    # Integer arithmetic only: the oracle's bits exactly.
    Operator("random_generator", RandomGeneratorDesc, random_generator,
             reference.random_generator, random_generator_case, {"uint32": EXACT},
             random_generator_describe, random_generator_call,
             parameter_examples=random_generator_parameters, demo_shape=(16, 256, 1024),
             dtypes=(np.uint32,)),
    # Every operation correctly rounded, in one order (the same bits everywhere); against
    # float64, float32 Beta^T's error in alpha (_cases_adam.py's adam_magnitude).
    Operator("adam_optimizer", AdamOptimizerDesc, adam_optimizer, reference.adam_optimizer,
             adam_case, {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, adam_describe,
             adam_call, magnitude=adam_magnitude(_SUMS_F32), parameter_examples=adam_parameters,
             demo_shape=(16, 256, 1024)),
    Operator("element_wise_clip_grad", ElementWiseClipGradDesc, element_wise_clip_grad,
             reference.element_wise_clip_grad, clip_case(False), CLIP_TOLERANCES,
             elementwise_describe(ElementWiseClipGradDesc), clip_call,
             parameter_examples=clip_parameters(False), dtypes=CLIP_DTYPES),
    Operator("element_wise_clip_grad1", ElementWiseClipGrad1Desc, element_wise_clip_grad1,
             reference.element_wise_clip_grad1, clip_case(True), CLIP_TOLERANCES,
             clip1_describe, clip_call, parameter_examples=clip_parameters(True),
             dtypes=CLIP_DTYPES),
    # Last: the tests that draw every record's cases from one generator in table order
    # (tests/test_kernels.py's plans_by_operator, the demo) keep the others' draws.
    _resample_record("resample_grad1", ResampleGrad1Desc, resample_grad1,
                     reference.resample_grad1, True),
    # Sums of dY / count (each correctly rounded) or of selected dY, in float32: the sums'
    # tolerances (float16: one rounding on store).
    Operator("average_pooling_grad", AveragePoolingGradDesc, average_pooling_grad,
             reference.average_pooling_grad, pool.average_pooling_case,
             {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, pool.average_pooling_describe,
             pool.average_pooling_call, max_rank=5, min_rank=4,
             magnitude=pool.average_pooling_magnitude,
             parameter_examples=pool.pooling_parameters(False), demo_shape=(8, 64, 56, 56)),
    Operator("max_pooling_grad", MaxPoolingGradDesc, max_pooling_grad,
             reference.max_pooling_grad, pool.max_pooling_case,
             {"float32": _SUMS_F32, "float16": _RESAMPLE_F16}, pool.max_pooling_describe,
             pool.max_pooling_call, max_rank=5, min_rank=4,
             magnitude=pool.max_pooling_magnitude,
             parameter_examples=pool.pooling_parameters(True), demo_shape=(8, 64, 56, 56)),
    # A gather summing float32 terms (dY / (Sy Sx), or dY, times a weight product) in a fixed
    # order: sums' tolerances, relative to the sum of the terms' absolute values.
    Operator("roi_align_grad", RoiAlignGradDesc, roi_align_grad, reference.roi_align_grad,
             roi_align_case, {"float32": _SUMS_F32, "float16": _RESAMPLE_F16},
             roi_align_describe, roi_align_call, max_rank=4, min_rank=4,
             magnitude=roi_align_magnitude,
             parameter_examples=roi_align_parameters, demo_shape=(2, 64, 50, 50)),
    # A copy of dY's bits into zeros: exact in every data type.
    Operator("slice_grad", SliceGradDesc, slice_grad, reference.slice_grad, slice_grad_case,
             SLICE_GRAD_TOLERANCES, slice_grad_describe, slice_grad_call,
             parameter_examples=slice_grad_parameters, dtypes=SLICE_GRAD_DTYPES),
    # Fixed-order float32 sums and pow_fixed: the same bits everywhere; against float64,
    # relative to the terms' sizes (_cases_lrn.py).
    Operator("local_response_normalization_grad", LocalResponseNormalizationGradDesc,
             local_response_normalization_grad, reference.local_response_normalization_grad,
             lrn_case, LRN_TOLERANCES, lrn_describe, lrn_call, max_rank=4, min_rank=4,
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
