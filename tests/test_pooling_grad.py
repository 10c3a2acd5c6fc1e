"""AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD: the specification's worked examples, PyTorch's
backward bit for bit, edge sizes, float16, strided layouts, padding-only windows, ties and NaN,
the same bits under every plan (workgroup widths, loop limits, buffer cuts), windows up to the
loop limit, and errors before device work. The operator table's generic tests cover the rest
(tests/test_operators.py)."""

import dataclasses

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import operators, reference
from pyvkgrad.ops._pooling_grad import ALL_WINDOWS, CONTINUE, STORE
from pyvkgrad.one_call_cache import OneCallCache
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import DataType, TensorDesc

AVG, MAX = operators.BY_NAME["average_pooling_grad"], operators.BY_NAME["max_pooling_grad"]
F32, F16 = DataType.FLOAT32, DataType.FLOAT16


def bits(a):
    return np.asarray(a).view(f"u{np.asarray(a).dtype.itemsize}")


def assert_same_bits(got, want, what=""):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    bad = bits(got) != bits(want)
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} differ, first at "
                           f"{tuple(np.argwhere(bad)[0])}: {got[bad][0]!r} vs {want[bad][0]!r}")


def line(values, dtype=np.float32):
    """A 1-D example as the 4-D tensor {1, 1, 1, n}."""
    return np.array(values, dtype).reshape(1, 1, 1, -1)


def avg_1d(dy, size, window, stride, start, end, include, device):
    return pyvkgrad.average_pooling_grad(line(dy), (1, 1, 1, size), (1, stride), (1, window),
                                         (0, start), (0, end), include, device=device)


# ---- the specification's worked examples ---------------------------------------------------------

@pytest.mark.parametrize("include", [False, True])
def test_ap1_the_pages_example(device, include):
    dy = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)
    got = pyvkgrad.average_pooling_grad(dy, (1, 1, 3, 3), (1, 1), (2, 2), (0, 0), (0, 0),
                                        include, device=device)
    np.testing.assert_array_equal(got[0, 0], [[0.25, 0.75, 0.5], [1, 2.5, 1.5],
                                              [0.75, 1.75, 1]])


def test_ap2_padding_in_or_out_of_the_divisor(device):
    dy = np.array([[1, 2], [3, 4]], np.float32).reshape(1, 1, 2, 2)
    args = ((1, 1, 3, 3), (2, 2), (3, 3), (1, 1), (1, 1))
    got = pyvkgrad.average_pooling_grad(dy, *args, False, device=device)
    np.testing.assert_array_equal(got[0, 0], [[0.25, 0.75, 0.5], [1, 2.5, 1.5],
                                              [0.75, 1.75, 1]])
    got = pyvkgrad.average_pooling_grad(dy, *args, True, device=device)
    want = np.array([[1, 3, 2], [4, 10, 6], [3, 7, 4]], np.float64) / 9
    np.testing.assert_array_equal(got[0, 0], want.astype(np.float32))


def test_ap3_asymmetric_padding(device):
    """In float32 each term dY / count rounds, then the sum: dX[0] = 1/1 + 2/3 is
    1.6666667 where 5/3 rounds to 1.6666666."""
    one, two, three = np.float32(1), np.float32(2), np.float32(3)
    got = avg_1d([1, 2, 3], 5, 3, 2, 2, 0, False, device)
    np.testing.assert_array_equal(got.ravel(), [one + two / three, two / three,
                                                two / three + one, 1, 1])
    got = avg_1d([1, 2, 3], 5, 3, 2, 2, 0, True, device)
    np.testing.assert_array_equal(got.ravel(), [one / three + two / three, two / three,
                                                two / three + one, 1, 1])


@pytest.mark.parametrize("include", [False, True])
def test_ap4_ceil_rule_overhang(device, include):
    """In 7, W 2, S 3, Out 3 by the ceil rule: the last window holds position 6 alone
    (position 7 lies outside the padded extent, so it is not counted even with padding)."""
    got = avg_1d([1, 2, 3], 7, 2, 3, 0, 0, include, device)
    np.testing.assert_array_equal(got.ravel(), [0.5, 0.5, 0, 1, 1, 0, 3])


C4 = np.array([[3, 1, 3, 1], [1, 3, 1, 3], [3, 1, 3, 1], [1, 3, 1, 3]], np.float32)


@pytest.mark.parametrize("x, dy, geometry, want", [
    ([[1, 2, 3], [2, 4, 2], [5, 6, 7]], [[1, 2], [4, 5]], ((1, 1), (2, 2), (0, 0), (0, 0), (1, 1)),
     [[0, 0, 0], [0, 3, 0], [0, 4, 5]]),  # MP-1, the page's
    (C4, [[1, 2], [3, 4]], ((2, 2), (2, 2), (0, 0), (0, 0), (1, 1)),
     [[1, 0, 2, 0], [0, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]]),  # MP-2, ties
    (C4, [[1, 2], [3, 4]], ((2, 2), (3, 3), (1, 1), (1, 1), (1, 1)),
     [[1, 0, 2, 0], [0, 7, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),  # MP-3, ties and padding
    (C4, np.arange(1, 10).reshape(3, 3), ((1, 1), (2, 2), (1, 1), (0, 0), (2, 2)),
     [[5, 10, 0, 0], [10, 20, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]),  # MP-4, dilation
], ids=["MP-1", "MP-2", "MP-3", "MP-4"])
def test_max_pooling_worked_examples(device, x, dy, geometry, want):
    x = np.asarray(x, np.float32)[None, None]
    dy = np.asarray(dy, np.float32)[None, None]
    got = pyvkgrad.max_pooling_grad(x, dy, *geometry, device=device)
    np.testing.assert_array_equal(got[0, 0], want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_mp5_the_first_nan_wins(device, dtype):
    x = line([1, np.nan, 3, np.nan], dtype)
    got = pyvkgrad.max_pooling_grad(x, line([1], dtype), (1, 1), (1, 4), (0, 0), (0, 0),
                                    (1, 1), device=device)
    np.testing.assert_array_equal(got.ravel(), [0, 1, 0, 0])


def test_max_pooling_ties_signed_zeros_and_infinities(device):
    """-0 and +0 tie (the first wins), +Inf beats numbers, -Inf is an ordinary value, and
    padding never wins over a real -Inf."""
    x = line([-0.0, 0.0, -np.inf, np.inf, -np.inf, -np.inf])
    dy = line([1, 2, 4, 8])
    got = pyvkgrad.max_pooling_grad(x, dy, (1, 2), (1, 2), (0, 1), (0, 1), (1, 1),
                                    device=device)
    # windows: [pad, -0] [+0, -inf] [+inf, -inf] [-inf, pad]
    np.testing.assert_array_equal(got.ravel(), [1, 2, 0, 4, 0, 8])


def test_nan_and_inf_in_dy_spread_as_values(device):
    dy = line([np.nan, 1.0, np.inf])
    got = avg_1d([np.nan, 1.0, np.inf], 4, 2, 1, 0, 0, False, device)
    np.testing.assert_array_equal(np.isnan(got.ravel()), [True, True, False, False])
    assert got.ravel()[3] == np.inf and got.ravel()[2] == np.inf
    x = line([1, 5, 2, 0])
    got = pyvkgrad.max_pooling_grad(x, dy, (1, 1), (1, 2), (0, 0), (0, 0), (1, 1),
                                    device=device)
    np.testing.assert_array_equal(np.isnan(got.ravel()), [False, True, False, False])
    assert got.ravel()[2] == np.inf and got.ravel()[0] == 0 and got.ravel()[3] == 0


def test_windows_with_no_real_element_add_nothing(device):
    """Padding as wide as the window: the first and last windows lie in the padding."""
    dy = line([100, 1, 2, 3, 4, 200])
    for include in (False, True):
        got = avg_1d(dy.ravel(), 3, 2, 1, 2, 2, include, device)
        want = reference.average_pooling_grad(dy, (1, 1, 1, 3), (1, 1), (1, 2), (0, 2),
                                              (0, 2), include)
        np.testing.assert_array_equal(got, want.astype(np.float32))
        assert got.max() < 100
    x = line([1, 2, 3])
    got = pyvkgrad.max_pooling_grad(x, dy, (1, 1), (1, 2), (0, 2), (0, 2), (1, 1),
                                    device=device)
    np.testing.assert_array_equal(got.ravel(), [1, 2, 3 + 4])


# ---- PyTorch's backward, bit for bit -------------------------------------------------------------

TORCH_CASES = [  # input shape, kernel, stride, padding, dilation (max), ceil_mode
    ((2, 3, 17, 23), 3, 2, 1, 1, False), ((2, 3, 17, 23), 3, 2, 1, 2, True),
    ((1, 2, 8, 8), 2, 2, 0, 1, False), ((2, 3, 13, 11), (3, 2), (2, 1), (1, 0), (1, 2), True),
    ((1, 1, 1, 257), (1, 5), (1, 3), (0, 2), 1, True), ((1, 2, 31, 256), 2, 2, 1, 1, True),
    ((3, 1, 255, 7), (4, 1), (3, 1), (2, 0), (2, 1), False), ((1, 1, 1, 1), 1, 1, 0, 1, False),
    ((2, 2, 5, 7, 9), 3, 2, 1, 1, True), ((1, 3, 4, 6, 5), (2, 3, 2), (1, 2, 2), (1, 1, 0),
                                          (2, 1, 1), False),
]


def _per_axis(v, k):
    return tuple(v) if isinstance(v, tuple) else (v,) * k


@pytest.mark.parametrize("shape, kernel, stride, padding, dilation, ceil", TORCH_CASES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_pytorch_backward_bit_for_bit(device, rng, shape, kernel, stride, padding, dilation,
                                      ceil, channels_last):
    """avg_pool (both count_include_pad) and max_pool (integer data: ties) backward: the
    same float32 bits, also from channels_last (NHWC) strided arrays."""
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    k = len(shape) - 2
    avg, mx = (TF.avg_pool2d, TF.max_pool2d) if k == 2 else (TF.avg_pool3d, TF.max_pool3d)
    fmt = (torch.channels_last if k == 2 else torch.channels_last_3d) if channels_last \
        else torch.contiguous_format
    geometry = [_per_axis(v, k) for v in (stride, kernel, padding, padding)]
    stride, kernel, start, end = geometry
    for include in (False, True):
        x = torch.tensor(rng.standard_normal(shape), dtype=torch.float32) \
            .to(memory_format=fmt).requires_grad_()
        y = avg(x, kernel, stride, start, ceil, include)
        dy = torch.tensor(rng.standard_normal(y.shape), dtype=torch.float32) \
            .to(memory_format=fmt)
        y.backward(dy)
        got = pyvkgrad.average_pooling_grad(dy.numpy(), shape, stride, kernel, start, end,
                                            include, device=device)
        assert_same_bits(got, x.grad.numpy(), f"avg include_padding={include}")
    x = torch.tensor(rng.integers(-3, 4, shape), dtype=torch.float32) \
        .to(memory_format=fmt).requires_grad_()
    y = mx(x, kernel, stride, start, _per_axis(dilation, k), ceil)
    dy = torch.tensor(rng.standard_normal(y.shape), dtype=torch.float32).to(memory_format=fmt)
    y.backward(dy)
    got = pyvkgrad.max_pooling_grad(x.detach().numpy(), dy.numpy(), stride, kernel, start, end,
                                    _per_axis(dilation, k), device=device)
    assert_same_bits(got, x.grad.numpy(), "max")


# ---- sizes, float16, layouts ---------------------------------------------------------------------

EDGE_SHAPES = [(1, 1, 1, 1), (1, 1, 1, 255), (1, 1, 256, 1), (2, 1, 1, 257), (1, 3, 7, 31),
               (1, 1, 2, 3, 257)]


@pytest.mark.parametrize("record", [AVG, MAX], ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_edge_sizes_against_the_oracle(device, rng, record, dtype):
    for shape in EDGE_SHAPES:
        for _ in range(3):
            case = record.make_case(rng, shape, dtype)
            operators.assert_close(record, record.run(case, device), case.args, case.kwargs,
                                   dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float16_rounds_once(device, rng, dtype):
    """Float16 dY summed in float32, rounded once: exactly the float32 result rounded."""
    dy = rng.standard_normal((2, 3, 10, 11)).astype(np.float16)
    args = ((2, 3, 19, 21), (2, 2), (3, 3), (1, 1), (1, 2), True)
    got = pyvkgrad.average_pooling_grad(dy, *args, device=device)
    wide = pyvkgrad.average_pooling_grad(dy.astype(np.float32), *args, device=device)
    assert_same_bits(got, wide.astype(np.float16), "average")
    x = rng.integers(-3, 4, (2, 3, 19, 21)).astype(np.float16)
    got = pyvkgrad.max_pooling_grad(x, dy, (2, 2), (3, 3), (1, 1), (1, 2), (1, 1),
                                    device=device)
    wide = pyvkgrad.max_pooling_grad(x.astype(np.float32), dy.astype(np.float32), (2, 2),
                                     (3, 3), (1, 1), (1, 2), (1, 1), device=device)
    assert_same_bits(got, wide.astype(np.float16), "max")


def test_float16_nan_keys_and_subnormals(device):
    """Float16 X compared from its 16 bits: subnormals order as values, NaN first wins."""
    tiny = np.float16(2.0**-24)
    x = line([-tiny, tiny, 0.0, tiny * 2, np.nan, -np.inf], np.float16)
    got = pyvkgrad.max_pooling_grad(x, line([1, 2, 4], np.float16), (1, 2), (1, 2), (0, 0),
                                    (0, 0), (1, 1), device=device)
    np.testing.assert_array_equal(got.ravel(), [0, 1, 0, 2, 4, 0])


# ---- the same bits under every plan --------------------------------------------------------------

def compiled(device, desc, inputs, limits):
    op = device.compile(desc, limits)
    fields = dict(desc.tensor_fields())
    tensors = {name: device.upload(inputs[name]) if name in inputs else device.empty(d)
               for name, (d, _) in fields.items()}
    op(**tensors)
    return tensors["output_gradient_tensor"].numpy()


def plan_cases(rng, dtype):
    """An average and a max pooling with overlapping windows (3x3 stride 1: 9 per element;
    7x7: 49), float16 or float32, NHWC-strided dY and X."""
    nt = DataType.from_numpy(np.dtype(dtype), "", "", DataType)
    out = []
    for window, pad in (((3, 3), (1, 1)), ((7, 7), (3, 3))):
        x = rng.integers(-4, 5, (1, 2, 9, 10)).astype(dtype)
        dy = rng.standard_normal((1, 2, 9, 10)).astype(dtype)
        nhwc = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        strides = tuple(s // dy.itemsize for s in nhwc.strides)
        dyd = TensorDesc(nt, dy.shape, strides)
        dxd = TensorDesc(nt, x.shape)
        out.append((pyvkgrad.AveragePoolingGradDesc(dyd, dxd, (1, 1), window, pad, pad, True),
                    {"input_gradient_tensor": nhwc}))
        out.append((pyvkgrad.MaxPoolingGradDesc(dxd, dyd, dxd, (1, 1), window, pad, pad,
                                                (1, 1)),
                    {"input_tensor": x, "input_gradient_tensor": nhwc}))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_same_bits_under_every_plan(device, rng, dtype):
    """Workgroup widths 1 to 256, a few workgroups (several element dispatches), loop limits
    that split each element's windows into runs (the accumulator), against the default plan
    and the oracle."""
    base = device.limits
    variants = [dataclasses.replace(base, local_size=wg, max_local_size=wg)
                for wg in (1, 32, 64, 256)]
    variants += [dataclasses.replace(base, local_size=8, max_local_size=8, max_workgroups=4,
                                     max_loop_iterations=loops) for loops in (120, 400)]
    split = 0
    for desc, inputs in plan_cases(rng, dtype):
        want = compiled(device, desc, inputs, base)
        record = AVG if isinstance(desc, pyvkgrad.AveragePoolingGradDesc) else MAX
        args, kwargs = record.call(desc, inputs)
        operators.assert_close(record, want, args, kwargs, dtype)
        for limits in variants:
            runs = {dict(d.push)["window_first"] for d in desc.plan(limits).dispatches}
            split += len(runs) > 1
            assert_same_bits(compiled(device, desc, inputs, limits), want, f"{limits}")
    assert split >= 4  # window runs continued through the accumulator


def test_the_same_bits_through_one_call_cuts(device, rng, monkeypatch):
    """A 4 KiB buffer limit cuts along N and C: the pieces give the whole's bits."""
    dy = rng.standard_normal((3, 5, 12, 13)).astype(np.float32)
    x = rng.standard_normal((3, 5, 24, 26)).astype(np.float32)
    args = ((2, 2), (3, 3), (1, 1), (1, 1))
    avg = pyvkgrad.average_pooling_grad(dy, x.shape, *args, False, device=device)
    mx = pyvkgrad.max_pooling_grad(x, dy, *args, (1, 1), device=device)
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "4096")
    misses = device.cache_info().misses
    assert_same_bits(pyvkgrad.average_pooling_grad(dy, x.shape, *args, False, device=device),
                     avg, "average")
    assert_same_bits(pyvkgrad.max_pooling_grad(x, dy, *args, (1, 1), device=device), mx, "max")
    assert device.cache_info().misses > misses  # the pieces' problems (alike: cached)


def test_plans_split_windows_in_order():
    """Pure: under a loop limit each element's windows run in consecutive runs, the first
    writing the accumulator, the last storing dX; beyond it, an error naming WindowSize."""
    dx = TensorDesc(F32, (1, 1, 20, 20))
    desc = pyvkgrad.AveragePoolingGradDesc(dx, dx, (1, 1), (5, 5), (2, 2), (2, 2), False)
    assert [d.push for d in desc.plan(Limits()).dispatches] == [
        (("count", 400), ("first", 0), ("window_first", 0), ("window_end", ALL_WINDOWS),
         ("stage", STORE))]
    plan = desc.plan(Limits(max_loop_iterations=64 + 2 + 4 * 10))  # 10 windows per run
    runs = [(dict(d.push)["window_first"], dict(d.push)["window_end"], dict(d.push)["stage"])
            for d in plan.dispatches]
    assert sorted(set(runs)) == [(0, 10, 0), (10, 20, CONTINUE), (20, ALL_WINDOWS,
                                                                  CONTINUE | STORE)]
    assert [s.nbytes for s in plan.scratch] == [400 * 4]
    mx = pyvkgrad.MaxPoolingGradDesc(dx, dx, dx, (1, 1), (5, 5), (2, 2), (2, 2), (1, 1))
    assert len(mx.plan(Limits(max_loop_iterations=64 + 2 + 27)).dispatches) == 25
    with pytest.raises(RuntimeError, match=r"^MAX_POOLING_GRAD: WindowSize needs more loop "
                                           r"iterations per window than the device allows"):
        mx.plan(Limits(max_loop_iterations=64 + 2 + 26))


def test_windows_up_to_the_loop_limit(device, rng):
    """A max pooling window as large as the loop limit allows (one window per run), and a
    global 60 x 60 window on the device's own limit."""
    limits = dataclasses.replace(device.limits, max_loop_iterations=64 + 2 + 18 * 18 + 2)
    x = rng.standard_normal((1, 2, 20, 19)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    args = ((1, 1), (18, 18), (1, 1), (2, 2), (1, 1))
    desc = pyvkgrad.MaxPoolingGradDesc(TensorDesc(F32, x.shape), TensorDesc(F32, dy.shape),
                                       TensorDesc(F32, x.shape), *args)
    got = compiled(device, desc, {"input_tensor": x, "input_gradient_tensor": dy}, limits)
    operators.assert_close(MAX, got, (x, dy) + args, {}, np.float32)
    x = rng.standard_normal((1, 1, 60, 60)).astype(np.float32)
    got = pyvkgrad.max_pooling_grad(x, np.ones((1, 1, 1, 1), np.float32), (60, 60), (60, 60),
                                    (0, 0), (0, 0), (1, 1), device=device)
    assert got.sum() == 1 and got.ravel()[np.argmax(x)] == 1
    got = pyvkgrad.average_pooling_grad(np.ones((1, 1, 1, 1), np.float32), (1, 1, 60, 60),
                                        (60, 60), (60, 60), (0, 0), (0, 0), False,
                                        device=device)
    np.testing.assert_array_equal(got, np.float32(1 / 3600))


# ---- errors before device work -------------------------------------------------------------------

def d(*sizes, data_type=F32):
    return TensorDesc(data_type, sizes)


A, M = "^AVERAGE_POOLING_GRAD: ", "^MAX_POOLING_GRAD: "


def average(dy=d(1, 1, 2, 2), dx=d(1, 1, 3, 3), strides=(1, 1), window=(2, 2), start=(0, 0),
            end=(0, 0), include_padding=False):
    """The maker of an AveragePoolingGradDesc: a valid 2x2 window over 3x3 but for the fields
    given."""
    return lambda: pyvkgrad.AveragePoolingGradDesc(dy, dx, strides, window, start, end,
                                                   include_padding)


def maximum(x=d(1, 1, 3, 3), dilations=(1, 1)):
    """The maker of a MaxPoolingGradDesc: a valid 2x2 window over 3x3 but for the fields
    given."""
    return lambda: pyvkgrad.MaxPoolingGradDesc(x, d(1, 1, 2, 2), d(1, 1, 3, 3), (1, 1), (2, 2),
                                               (0, 0), (0, 0), dilations)


@pytest.mark.parametrize("make, error, message", [
    (average(d(1, 1, 3), d(1, 1, 3), (1,), (1,), (0,), (0,)),
     ValueError, A + r"OutputGradientTensor.DimensionCount is out of range: expected 4 to 5"),
    (average(dx=d(1, 1, 1, 3, 3)),
     ValueError, A + r"InputGradientTensor.DimensionCount must equal OutputGradientTensor"),
    (average(dy=d(1, 2, 2, 2)),
     ValueError, A + r"InputGradientTensor.Sizes must have OutputGradientTensor's N and C"),
    (average(dy=d(1, 1, 2, 2, data_type=F16)),
     TypeError, A + r"InputGradientTensor.DataType must equal OutputGradientTensor.DataType"),
    (average(strides=(1, 1, 1)),
     ValueError, A + r"Strides must have one entry per spatial dimension"),
    (average(strides=(1, 0)), ValueError, A + r"Strides\[1\] must be at least 1"),
    (average(start=(0, -1)), ValueError, A + r"StartPadding must not be negative"),
    (average(window=(2, 2.0)), TypeError, A + r"WindowSize must hold integers"),
    (average(dy=d(1, 1, 1, 1), window=(4, 4)),
     ValueError, A + r"WindowSize\[0\] must fit the padded input"),
    (average(dy=d(1, 1, 3, 2)),
     ValueError, A + r"InputGradientTensor.Sizes\[2\] must follow the pooling's floor or ceil "
                 r"rule: expected 2, got 3"),
    (average(include_padding=1), TypeError, A + r"IncludePadding must be a bool"),
    (maximum(x=d(1, 1, 3, 4)),
     ValueError, M + r"OutputGradientTensor.Sizes must equal InputTensor.Sizes"),
    (maximum(dilations=(1, 0)), ValueError, M + r"Dilations\[1\] must be at least 1"),
    (maximum(dilations=(2, 2)), ValueError, M + r"InputGradientTensor.Sizes\[2\] must follow"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_descriptor_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_one_call_errors_before_device_work(device, monkeypatch):
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    dy = np.ones((1, 1, 2, 2), np.float32)
    with pytest.raises(ValueError, match=r"^AVERAGE_POOLING_GRAD: InputGradientTensor.Sizes"
                                         r"\[3\] must follow"):
        pyvkgrad.average_pooling_grad(dy, (1, 1, 3, 5), (1, 1), (2, 2), (0, 0), (0, 0), False,
                                      device=device)
    with pytest.raises(TypeError, match=r"^AVERAGE_POOLING_GRAD: output_gradient_sizes must "
                                        r"hold integers"):
        pyvkgrad.average_pooling_grad(dy, (1, 1, 3, 3.0), (1, 1), (2, 2), (0, 0), (0, 0),
                                      False, device=device)
    with pytest.raises(ValueError, match=r"^MAX_POOLING_GRAD: WindowSize\[0\] must be at least"):
        pyvkgrad.max_pooling_grad(np.ones((1, 1, 3, 3), np.float32), dy, (1, 1), (0, 2), (0, 0),
                                  (0, 0), (1, 1), device=device)
    with pytest.raises(TypeError, match=r"^MAX_POOLING_GRAD: InputGradientTensor has unsupported "
                                        r"dtype"):
        pyvkgrad.max_pooling_grad(np.ones((1, 1, 3, 3), np.float32), dy.astype(np.float64),
                                  (1, 1), (2, 2), (0, 0), (0, 0), (1, 1), device=device)
