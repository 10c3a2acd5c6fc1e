"""RESAMPLE_GRAD1: its worked examples (docs/semantics.md §12) in both rounding directions,
PyTorch's nearest and nearest-exact backward, its equivalence with RESAMPLE_GRAD, linear's
indifference to the direction, float16, and its error rules. The operator table's tests
(tests/test_operators.py, tests/test_hardening.py) cover every rank, layout and algorithm.

Comparisons are bitwise where every sum is exact (integer dY, or the same tables and kernels on
both sides); against the float64 oracle the record's tolerance (pyvkgrad/operators.py).
"""

import dataclasses
import itertools

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import AxisDirection, DataType, TensorDesc, operators, reference
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.plan import Limits
from cases import DTYPES

NN, LIN = "nearest_neighbor", "linear"
DIRECTIONS = ("decreasing", "increasing")
ALGORITHMS = ("gather", "atomic")
RECORD = operators.BY_NAME["resample_grad1"]
F32 = DataType.FLOAT32


def grad1(device, dy, sizes, rounding, algorithm="gather", **kwargs):
    """pyvkgrad.resample_grad1, checking that dY is left as it was."""
    before = dy.copy()
    out = pyvkgrad.resample_grad1(dy, sizes, rounding_direction=rounding, algorithm=algorithm,
                                  device=device, **kwargs)
    np.testing.assert_array_equal(dy, before, err_msg="input_gradient was modified")
    return out


def assert_same_bits(got, want, what=""):
    want = np.asarray(want).astype(got.dtype)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    bits = np.dtype(f"u{got.dtype.itemsize}")
    bad = got.view(bits) != want.view(bits)
    assert not bad.any(), f"{what}: {bad.sum()} elements differ: got {got}, expected {want}"


# ---- the worked examples (docs/semantics.md §12) -------------------------------------------------

# (dY, dX sizes, parameters, dX for DECREASING, dX for INCREASING)
EXAMPLES = {
    # DirectML's page: [[1, 2], [3, 4]] -> {1, 3} with the default offsets 0.5 / -0.5.
    "RG1-1": ([[4, 5, 6]], (2, 2), dict(scales=(0.5, 1.5)),
              [[9, 6], [0, 0]], [[0, 0], [4, 11]]),
    # Ties: x = 0.5 and 2.5.
    "RG1-2": ([1, 2], (4,), dict(scales=(0.5,), input_pixel_offsets=(0.5,),
                                 output_pixel_offsets=(-0.5,)),
              [1, 0, 2, 0], [0, 1, 0, 2]),
    # 3 -> 7, Scale 7/3, offsets 0 / 0: indices DEC [0,0,0,1,1,2,2], INC [0,1,1,2,2,2,2].
    "RG1-3": ([1, 2, 3, 4, 5, 6, 7], (3,), dict(scales=(7 / 3,), input_pixel_offsets=(0.0,),
                                                output_pixel_offsets=(0.0,)),
              [6, 9, 13], [1, 5, 22]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("name", EXAMPLES)
def test_worked_examples(device, name, algorithm, dtype):
    dy, sizes, kwargs, decreasing, increasing = EXAMPLES[name]
    dy = np.array(dy, dtype)
    for rounding, want in (("decreasing", decreasing), ("increasing", increasing)):
        got = grad1(device, dy, sizes, rounding, algorithm, **kwargs)
        assert got.dtype == dtype
        assert_same_bits(got, want, f"{name} {rounding}")
        assert_same_bits(reference.resample_grad1(dy, sizes, rounding_direction=rounding,
                                                  **kwargs).astype(dtype), want, "oracle")


def test_rg1_2_ties_go_up_in_resample_grad(device):
    """RESAMPLE_GRAD rounds the same ties up ([0, 1, 0, 2], like INCREASING here)."""
    dy, sizes, kwargs, _, increasing = EXAMPLES["RG1-2"]
    got = pyvkgrad.resample_grad(np.array(dy, np.float32), sizes, device=device, **kwargs)
    assert_same_bits(got, increasing)


def test_directions_by_enum_and_directml_value(device):
    """AxisDirection members and DirectML's values (INCREASING = 0, DECREASING = 1)."""
    dy, sizes, kwargs, decreasing, increasing = EXAMPLES["RG1-1"]
    dy = np.array(dy, np.float32)
    for rounding, want in ((AxisDirection.DECREASING, decreasing), (1, decreasing),
                           (AxisDirection.INCREASING, increasing), (0, increasing)):
        assert_same_bits(grad1(device, dy, sizes, rounding, **kwargs), want, repr(rounding))


# ---- PyTorch's nearest backward (docs/semantics.md §12) ------------------------------------------

# F.interpolate's mode -> RESAMPLE_GRAD1(DECREASING)'s (InputPixelOffset, OutputPixelOffset),
# with Scale = out / in.
TORCH_MODES = {"nearest": (0.0, 0.0), "nearest-exact": (0.0, -0.5)}


def torch_grad(dy, in_sizes, mode):
    """x.grad of F.interpolate(x, size=dY's spatial sizes, mode=mode) for dY (N, C, ...)."""
    from torch_support import F, torch
    x = torch.zeros(dy.shape[:2] + tuple(in_sizes), dtype=torch.float32, requires_grad=True)
    F.interpolate(x, size=dy.shape[2:], mode=mode).backward(torch.from_numpy(dy))
    return x.grad.numpy()


def torch_as_grad1(device, dy, in_sizes, mode):
    """RESAMPLE_GRAD1(DECREASING) with the parameters of TORCH_MODES[mode] (N and C kept)."""
    ioff, ooff = TORCH_MODES[mode]
    rank = dy.ndim
    return grad1(device, dy, dy.shape[:2] + tuple(in_sizes), "decreasing",
                 scales=(1.0, 1.0) + tuple(o / i for o, i in zip(dy.shape[2:], in_sizes)),
                 input_pixel_offsets=(ioff,) * rank, output_pixel_offsets=(ooff,) * rank)


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_pytorch_nearest_backward_1d(device, rng, mode):
    """Every input size 1-7 and output size 1-12: bitwise (integer dY, exact sums)."""
    for n_in, n_out in itertools.product(range(1, 8), range(1, 13)):
        dy = rng.integers(-8, 9, (2, 1, n_out)).astype(np.float32)
        assert_same_bits(torch_as_grad1(device, dy, (n_in,), mode),
                         torch_grad(dy, (n_in,), mode), f"{mode} {n_in} -> {n_out}")


@pytest.mark.parametrize("mode", TORCH_MODES)
@pytest.mark.parametrize("in_sizes, out_sizes", [((3, 5), (7, 2)), ((4, 1), (9, 12)),
                                                 ((7, 6), (5, 11))])
def test_pytorch_nearest_backward_2d(device, rng, mode, in_sizes, out_sizes):
    dy = rng.integers(-8, 9, (2, 3) + out_sizes).astype(np.float32)
    assert_same_bits(torch_as_grad1(device, dy, in_sizes, mode), torch_grad(dy, in_sizes, mode),
                     f"{mode} {in_sizes} -> {out_sizes}")


# ---- RESAMPLE_GRAD == RESAMPLE_GRAD1(DECREASING, InputPixelOffsets - 0.5) ------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resample_grad_is_decreasing_with_input_offsets_lowered(device, rng, dtype, algorithm):
    """floor(x + 0.5) = floor(x') for x' = x + 0.5: the same taps, so the same bits, on random
    dY. Scales are powers of two and offsets quarters, so every coordinate is exact in float32
    on both sides (ties included: RESAMPLE_GRAD's go up, and so do these)."""
    for _ in range(6):
        rank = int(rng.integers(1, 5))
        dy_sizes = tuple(int(n) for n in rng.integers(1, 9, rank))
        dx_sizes = tuple(int(n) for n in rng.integers(1, 9, rank))
        scales = tuple(float(s) for s in 2.0 ** rng.integers(-2, 3, rank))
        ioff = tuple(float(v) for v in rng.integers(-4, 5, rank) / 4)
        ooff = tuple(float(v) for v in rng.integers(-4, 5, rank) / 4)
        dy = rng.standard_normal(dy_sizes).astype(dtype)
        want = pyvkgrad.resample_grad(dy, dx_sizes, scales=scales, input_pixel_offsets=ioff,
                                      output_pixel_offsets=ooff, algorithm=algorithm,
                                      device=device)
        got = grad1(device, dy, dx_sizes, "decreasing", algorithm, scales=scales,
                    input_pixel_offsets=tuple(v - 0.5 for v in ioff), output_pixel_offsets=ooff)
        if algorithm == "gather":  # atomics add in a varying order
            assert_same_bits(got, want, f"{dy_sizes} -> {dx_sizes} {scales} {ioff}/{ooff}")
        operators.assert_close(RECORD, got, (dy, dx_sizes),
                               dict(rounding_direction="decreasing", scales=scales,
                                    input_pixel_offsets=tuple(v - 0.5 for v in ioff),
                                    output_pixel_offsets=ooff), dtype)


# ---- linear ignores the direction ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_ignores_the_direction(device, rng, dtype):
    """Both directions and RESAMPLE_GRAD give the same bits (the same tables and kernels)."""
    for dy_sizes, dx_sizes in (((7,), (3,)), ((2, 5, 9), (3, 4, 4)), ((1, 3, 8, 6), (1, 3, 3, 5))):
        dy = rng.standard_normal(dy_sizes).astype(dtype)
        offsets = tuple(float(v) for v in rng.uniform(-1, 1, len(dy_sizes)))
        kwargs = dict(interpolation_mode=LIN, input_pixel_offsets=offsets)
        want = pyvkgrad.resample_grad(dy, dx_sizes, device=device, **kwargs)
        for rounding in DIRECTIONS:
            assert_same_bits(grad1(device, dy, dx_sizes, rounding, **kwargs), want,
                             f"{dy_sizes} -> {dx_sizes} {rounding}")


# ---- against the oracle: sizes around workgroup widths, float16 ----------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NN, LIN])
@pytest.mark.parametrize("dy_sizes, dx_sizes", [((1,), (257,)), ((256,), (255,)), ((257,), (2,)),
                                                ((3, 31), (5, 7)), ((2, 256), (2, 257))])
def test_sizes_against_the_oracle(device, rng, dtype, mode, dy_sizes, dx_sizes):
    dy = rng.standard_normal(dy_sizes).astype(dtype)
    for rounding, algorithm in itertools.product(DIRECTIONS, ALGORITHMS):
        kwargs = dict(interpolation_mode=mode, rounding_direction=rounding,
                      output_pixel_offsets=(0.0,) * len(dy_sizes))
        got = pyvkgrad.resample_grad1(dy, dx_sizes, algorithm=algorithm, device=device, **kwargs)
        assert got.dtype == dtype
        operators.assert_close(RECORD, got, (dy, dx_sizes), kwargs, dtype)


# ---- the descriptor ------------------------------------------------------------------------------

def _desc(**over):
    args = dict(input_gradient_tensor=TensorDesc(F32, (1, 1, 1, 3)),
                output_gradient_tensor=TensorDesc(F32, (1, 1, 2, 2)),
                interpolation_mode=NN, rounding_direction="decreasing", scales=(1, 1, 0.5, 1.5),
                input_pixel_offsets=(0.5,) * 4, output_pixel_offsets=(-0.5,) * 4)
    args.update(over)
    return pyvkgrad.ResampleGrad1Desc(**args)


def test_fields_in_directml_order(device):
    """DML_RESAMPLE_GRAD1_OPERATOR_DESC's order (RoundingDirection after InterpolationMode),
    positionally too; normalised like RESAMPLE_GRAD's, and never equal to its descriptor."""
    assert [f.name for f in dataclasses.fields(pyvkgrad.ResampleGrad1Desc)] == [
        "input_gradient_tensor", "output_gradient_tensor", "interpolation_mode",
        "rounding_direction", "scales", "input_pixel_offsets", "output_pixel_offsets",
        "algorithm"]
    dy, dx = TensorDesc(F32, (1, 1, 1, 3)), TensorDesc(F32, (1, 1, 2, 2))
    desc = pyvkgrad.ResampleGrad1Desc(dy, dx, NN, "decreasing", (1, 1, 0.5, 1.5), (0.5,) * 4,
                                      (-0.5,) * 4)
    assert desc == _desc() and hash(desc) == hash(_desc())
    assert desc.rounding_direction is AxisDirection.DECREASING and desc.algorithm == "gather"
    assert desc.interpolation_mode is pyvkgrad.InterpolationMode.NEAREST_NEIGHBOR
    same = pyvkgrad.ResampleGradDesc(dy, dx, NN, (1, 1, 0.5, 1.5), (0.5,) * 4, (-0.5,) * 4,
                                     "decreasing")
    assert desc != same and desc.plan(device.limits) == same.plan(device.limits)
    op = device.compile(desc)
    dy_t, dx_t = device.upload(np.array([[[[4, 5, 6]]]], np.float32)), device.empty(dx)
    op(input_gradient_tensor=dy_t, output_gradient_tensor=dx_t)
    assert_same_bits(dx_t.numpy(), [[[[9, 6], [0, 0]]]])


@pytest.mark.parametrize("over, kind, message", [
    (dict(rounding_direction=None), TypeError,
     r"^RESAMPLE_GRAD1: RoundingDirection must be a string or an enum value: expected "
     r"'decreasing' or 'increasing' \(AxisDirection\), got NoneType$"),
    (dict(rounding_direction="up"), ValueError,
     r"^RESAMPLE_GRAD1: RoundingDirection is not supported: expected 'decreasing' or "
     r"'increasing' \(AxisDirection\), got 'up'$"),
    (dict(rounding_direction=2), ValueError, r"^RESAMPLE_GRAD1: RoundingDirection is not "
                                             r"supported: .*got 2$"),
    (dict(rounding_direction=1.5), TypeError, r"^RESAMPLE_GRAD1: RoundingDirection must be a "
                                              r"string or an enum value"),
    (dict(interpolation_mode="cubic"), ValueError, r"^RESAMPLE_GRAD1: InterpolationMode is not "
                                                   r"supported"),
    (dict(scales=(1, 2, 2)), ValueError, r"^RESAMPLE_GRAD1: Scales must have one entry per "
                                         r"dimension: expected 4, got 3$"),
    (dict(scales=(1, 1, 0, 2)), ValueError, r"^RESAMPLE_GRAD1: Scales\[2\] must be positive"),
    (dict(input_pixel_offsets=(0.5,) * 5), ValueError,
     r"^RESAMPLE_GRAD1: InputPixelOffsets must have one entry per dimension: expected 4, got 5$"),
    (dict(output_pixel_offsets=(0.5,) * 3), ValueError,
     r"^RESAMPLE_GRAD1: OutputPixelOffsets must have one entry per dimension: expected 4, "
     r"got 3$"),
    (dict(output_gradient_tensor=TensorDesc(F32, (2, 2))), ValueError,
     r"^RESAMPLE_GRAD1: OutputGradientTensor.DimensionCount must equal "
     r"InputGradientTensor.DimensionCount"),
    (dict(input_gradient_tensor=TensorDesc(DataType.FLOAT16, (1, 1, 1, 3))), TypeError,
     r"^RESAMPLE_GRAD1: OutputGradientTensor.DataType must equal InputGradientTensor.DataType"),
    (dict(algorithm="fast"), ValueError, r"^RESAMPLE_GRAD1: algorithm is not supported"),
])
def test_descriptor_errors(over, kind, message):
    with pytest.raises(kind, match=message):
        _desc(**over)


@pytest.mark.parametrize("algorithm, field", [("gather", "OutputGradientTensor"),
                                              ("atomic", "InputGradientTensor")])
def test_loop_limit_errors_name_resample_grad1(algorithm, field):
    """Where the driver's loop limit leaves no plan (one workgroup of one invocation: even the
    gather's windows of one term, or the atomic kernels' loops, are too long), the error names
    RESAMPLE_GRAD1, not RESAMPLE_GRAD, whose plan it shares."""
    desc = pyvkgrad.ResampleGrad1Desc(TensorDesc(F32, (1, 2, 512, 512)),
                                      TensorDesc(F32, (1, 2, 2, 2)), NN, "decreasing",
                                      (1, 1, 256, 256), (0.5,) * 4, (-0.5,) * 4, algorithm)
    with pytest.raises(RuntimeError, match=rf"^RESAMPLE_GRAD1: {field}.Sizes need fewer loop "
                                           r"iterations per invocation"):
        desc.plan(Limits(max_loop_iterations=80, max_workgroups=1, local_size=1))


def test_descriptor_without_rounding_direction():
    """A mandatory field: leaving it out is Python's TypeError, naming it."""
    with pytest.raises(TypeError, match="rounding_direction"):
        pyvkgrad.ResampleGrad1Desc(TensorDesc(F32, (3,)), TensorDesc(F32, (2,)), NN,
                                   scales=(1.5,), input_pixel_offsets=(0.5,),
                                   output_pixel_offsets=(-0.5,))


@pytest.mark.parametrize("args, kwargs, kind, message", [
    ((np.ones(3, np.float32), (2,)), dict(rounding_direction=None), TypeError,
     r"^RESAMPLE_GRAD1: RoundingDirection must be a string or an enum value"),
    ((np.ones(3, np.float32), (2,)), dict(rounding_direction="nearest"), ValueError,
     r"^RESAMPLE_GRAD1: RoundingDirection is not supported"),
    ((np.ones(3, np.float32), (2,)), dict(rounding_direction="decreasing", scales=(1, 1)),
     ValueError, r"^RESAMPLE_GRAD1: Scales must have one entry per dimension: expected 1, got 2"),
    ((np.ones(3, np.float32), (2,)),
     dict(rounding_direction="increasing", input_pixel_offsets=()), ValueError,
     r"^RESAMPLE_GRAD1: InputPixelOffsets must have one entry per dimension: expected 1, got 0"),
    ((np.ones(3, np.float32), (2,)),
     dict(rounding_direction="increasing", output_pixel_offsets=(0, 0)), ValueError,
     r"^RESAMPLE_GRAD1: OutputPixelOffsets must have one entry per dimension"),
    ((np.ones(3, np.float32), (2, 2)), dict(rounding_direction="increasing"), ValueError,
     r"^RESAMPLE_GRAD1: OutputGradientTensor.DimensionCount must equal "
     r"InputGradientTensor.DimensionCount: expected 1, got 2"),
    ((np.ones(3, np.float64), (2,)), dict(rounding_direction="increasing"), TypeError,
     r"^RESAMPLE_GRAD1: InputGradientTensor has unsupported dtype"),
    ((np.ones(3, np.float32), (2,)), {}, TypeError,
     r"missing 1 required keyword-only argument: 'rounding_direction'"),
])
def test_one_call_errors_before_device_work(device, monkeypatch, args, kwargs, kind, message):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    with pytest.raises(kind, match=message):
        pyvkgrad.resample_grad1(*args, device=device, **kwargs)


def test_oracle_requires_a_direction():
    with pytest.raises(ValueError, match="rounding_direction must be one of"):
        reference.resample_grad1(np.ones(3), (2,), rounding_direction=None)
