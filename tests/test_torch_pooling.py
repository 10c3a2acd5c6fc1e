"""The PyTorch bridge's pooling: avg_pool2d/3d and max_pool2d/3d (functions and modules,
`convert`, chains in Sequential) against PyTorch's own backward, bit for bit in float32 (the
same divisions and the same summation order), float16 within one rounding; the options
DirectML cannot express raise; a small CNN with pooling trains as PyTorch's does."""

import copy

import numpy as np
import pytest

from torch_support import require

torch = require("torch")
F = torch.nn.functional
nn = torch.nn

import pyvkgrad.torch as vt  # noqa: E402
from torch_support import on_the_test_device  # noqa: E402,F401 (autouse: every test)


def grads(fn, x, dy, *args, **kwargs):
    x = x.detach().clone().requires_grad_()
    y = fn(x, *args, **kwargs)
    y.backward(dy)
    return y.detach(), x.grad


def assert_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = got.contiguous().numpy(), want.contiguous().numpy()
    assert np.array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}")), \
        f"max difference {np.abs(g.astype(np.float64) - w).max()}"


def assert_same_bits_as_torch(rng, functions, x, *args):
    """PyTorch's function and ours (`functions`) on x and args with a random float32 dY: the
    same forward and dX, bit for bit; returns (our dX, PyTorch's)."""
    ref_y = functions[0](x, *args)
    dy = torch.tensor(rng.standard_normal(ref_y.shape), dtype=torch.float32)
    y, want = grads(functions[0], x, dy, *args)
    y2, got = grads(functions[1], x, dy, *args)
    assert_bits(y2, y)
    assert_bits(got, want)
    return got, want


CASES_2D = [  # shape, kernel_size, stride, padding, dilation, ceil_mode
    ((4, 3, 16, 16), 2, None, 0, 1, False), ((2, 5, 17, 13), 3, 2, 1, 1, False),
    ((2, 5, 17, 13), 3, 2, 1, 2, True), ((1, 2, 9, 11), (3, 2), (2, 1), (1, 0), (1, 2), True),
    ((3, 1, 7), 2, 1, 1, 1, True),  # unbatched (C, H, W)
]
CASES_3D = [((2, 3, 5, 6, 7), 2, None, 0, 1, False), ((1, 2, 7, 5, 6), 3, 2, 1, (1, 2, 1), True)]


@pytest.mark.parametrize("case", CASES_2D + CASES_3D, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_functions_bit_for_bit(rng, case, layout):
    shape, kernel, stride, padding, dilation, ceil = case
    k = 3 if len(shape) == 5 else 2
    x = torch.tensor(rng.standard_normal(shape), dtype=torch.float32)
    ties = torch.tensor(rng.integers(-2, 3, shape), dtype=torch.float32)
    if layout == "channels_last":
        if len(shape) < 4:
            pytest.skip("unbatched input has no channels_last")
        fmt = torch.channels_last if k == 2 else torch.channels_last_3d
        x, ties = x.contiguous(memory_format=fmt), ties.contiguous(memory_format=fmt)
    avg = (F.avg_pool2d, vt.avg_pool2d) if k == 2 else (F.avg_pool3d, vt.avg_pool3d)
    mx = (F.max_pool2d, vt.max_pool2d) if k == 2 else (F.max_pool3d, vt.max_pool3d)
    for include in (True, False):
        got, want = assert_same_bits_as_torch(rng, avg, x, kernel, stride, padding, ceil,
                                              include)
        assert got.stride() == want.stride() or layout == "contiguous"
    assert_same_bits_as_torch(rng, mx, ties, kernel, stride, padding, dilation, ceil)


# ceil_mode with a window larger than the padded input: one output along that axis, the
# window cut at the input's end (GoogLeNet's MaxPool2d(3, 2, ceil_mode=True) on a 2x2 map).
CEIL_WINDOWS = [  # shape, kernel_size, stride, padding, dilation
    ((1, 2, 2, 2), 3, 2, 0, 1), ((2, 1, 1, 1), 2, None, 0, 1), ((1, 2, 4, 4), 3, 3, 0, 2),
    ((1, 1, 2, 5), (5, 2), 2, (1, 0), 1), ((1, 2, 2, 3, 2), 3, 2, 0, 1),
    ((1, 1, 3, 2, 2), 2, 2, 0, (3, 1, 1)),
]


@pytest.mark.parametrize("case", CEIL_WINDOWS, ids=str)
def test_ceil_mode_windows_larger_than_the_padded_input(rng, case):
    """PyTorch's bits, where DirectML asks the window to fit: max pooling pads the end
    further, average pooling cuts the window (both divisors: padded and real positions)."""
    shape, kernel, stride, padding, dilation = case
    k = len(shape) - 2
    x = torch.tensor(rng.standard_normal(shape), dtype=torch.float32)
    avg = (F.avg_pool2d, vt.avg_pool2d) if k == 2 else (F.avg_pool3d, vt.avg_pool3d)
    mx = (F.max_pool2d, vt.max_pool2d) if k == 2 else (F.max_pool3d, vt.max_pool3d)
    if dilation == 1 and k == 2:  # (no dilation; avg_pool3d refuses an input below the window)
        for include in (True, False):
            assert_same_bits_as_torch(rng, avg, x, kernel, stride, padding, True, include)
    assert_same_bits_as_torch(rng, mx, x, kernel, stride, padding, dilation, True)


def test_integer_forms_pytorch_takes(rng):
    """kernel_size, stride and padding as NumPy integers or 0-d tensors, as PyTorch takes
    them, in the functions and in converted modules."""
    x = torch.tensor(rng.standard_normal((1, 2, 6, 6)), dtype=torch.float32)
    for kernel, stride in ((np.int64(2), None), (2, np.int32(1)), (torch.tensor(3), 2)):
        assert_same_bits_as_torch(rng, (F.avg_pool2d, vt.avg_pool2d), x, kernel, stride)
        assert_same_bits_as_torch(rng, (F.max_pool2d, vt.max_pool2d), x, kernel, stride)
    model = vt.convert(nn.Sequential(nn.AvgPool2d(np.int64(2)), nn.MaxPool2d(np.int64(2))))
    dy = torch.ones(1, 2, 1, 1)
    _, got = grads(model, x, dy)
    _, want = grads(nn.Sequential(nn.AvgPool2d(2), nn.MaxPool2d(2)), x, dy)
    assert_bits(got, want)


def test_float16_within_one_rounding(rng):
    x = torch.tensor(rng.standard_normal((2, 3, 12, 10)), dtype=torch.float16)
    dy = torch.tensor(rng.standard_normal((2, 3, 6, 5)), dtype=torch.float16)
    for ref, ours, args in ((F.avg_pool2d, vt.avg_pool2d, (3, 2, 1)),
                            (F.max_pool2d, vt.max_pool2d, (3, 2, 1))):
        _, want = grads(ref, x.float(), dy.float(), *args)
        _, got = grads(ours, x, dy, *args)
        assert got.dtype == torch.float16
        np.testing.assert_allclose(got.float().numpy(), want.numpy(), rtol=2.0**-10,
                                   atol=2.0**-24)


def test_what_directml_cannot_express_raises():
    x = torch.ones(1, 1, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match=r"avg_pool2d: divisor_override=3 has no DirectML"):
        vt.avg_pool2d(x, 2, divisor_override=3)
    with pytest.raises(ValueError, match=r"max_pool3d: return_indices=True has no DirectML"):
        vt.max_pool3d(x[None], 2, return_indices=True)
    with pytest.raises(ValueError, match=r"divisor_override"):
        vt.AvgPool2d(2, divisor_override=2)
    with pytest.raises(ValueError, match=r"return_indices"):
        vt.MaxPool2d(2, return_indices=True)
    with pytest.raises(TypeError, match=r"max_pool2d: torch.float64 tensors are not supported"):
        vt.max_pool2d(x.double(), 2)
    model = vt.convert(nn.Sequential(nn.AvgPool2d(2, divisor_override=2),
                                     nn.MaxPool2d(2, return_indices=True)))
    assert type(model[0]) is nn.AvgPool2d and type(model[1]) is nn.MaxPool2d
    # Set after construction: refused at the call, not ignored.
    avg, mx = vt.AvgPool2d(2), vt.MaxPool2d(2)
    avg.divisor_override, mx.return_indices = 1, True
    for module, what in ((avg, "divisor_override"), (mx, "return_indices")):
        with pytest.raises(ValueError, match=what):
            module(x)
        with pytest.raises(ValueError, match=what):
            vt.convert(nn.Sequential(module, nn.ReLU()))(x)


def test_modules_convert_and_chain(rng):
    """convert swaps the pooling modules (their repr and options kept); in a Sequential they
    chain with BatchNorm and ReLU (one backward submission) and give PyTorch's gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(3, 2, 1, ceil_mode=True), nn.ReLU(),
                          nn.AvgPool2d(2, count_include_pad=False, padding=1), nn.Identity())
    ours = vt.convert(copy.deepcopy(model))
    assert [type(m).__name__ for m in ours] == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d",
                                                "ReLU", "AvgPool2d", "Identity"]
    assert isinstance(ours, vt.Sequential) and isinstance(ours[3], vt.MaxPool2d)
    assert repr(ours[5]) == repr(model[5])
    x = torch.tensor(rng.standard_normal((3, 2, 11, 9)), dtype=torch.float32)
    for m in (model, ours):
        m.zero_grad()
        xi = x.clone().requires_grad_()
        m(xi).square().sum().backward()
        m.input_grad = xi.grad
    # The training BatchNorm's forward runs on the device (float32 rounding from PyTorch's), and
    # the conv bias before it has a gradient that sums to nearly 0 (rounding noise): errors
    # are bounded relative to the largest parameter gradient, as in test_torch_bridge.py.
    scale = max(a.grad.abs().max().item() for a in model.parameters())
    for a, b in zip(model.parameters(), ours.parameters()):
        np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=1e-5 * scale)
    np.testing.assert_allclose(ours.input_grad.numpy(), model.input_grad.numpy(), rtol=1e-4,
                               atol=1e-5)
    m3 = vt.convert(nn.Sequential(nn.MaxPool3d(2), nn.AvgPool3d(2)))
    assert [type(m) for m in m3] == [vt.MaxPool3d, vt.AvgPool3d]


def test_a_cnn_with_pooling_trains_as_pytorchs():
    """examples/train_digits.py's CNN with its Upsample(scale 0.5) replaced by MaxPool2d(2)
    and an AvgPool2d(3, 1, 1) added: 20 SGD steps from the same weights on the same batches,
    the losses within 1e-4 of PyTorch's."""
    require("sklearn", "scikit-learn is not installed: pip install scikit-learn")
    from test_torch_example import load_example

    example = load_example()
    torch.manual_seed(0)
    initial = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AvgPool2d(3, 1, 1, count_include_pad=False),       # 8 x 8
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),                                      # 4 x 4
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    data = example.load_data(0)
    ref, ref_acc, _ = example.train(copy.deepcopy(initial), data, 20)
    ours, our_acc, _ = example.train(vt.convert(copy.deepcopy(initial)), data, 20)
    worst = max(abs(a - b) for a, b in zip(ref, ours))
    assert worst <= 1e-4, f"losses differ by {worst:.3g}"
    assert ref[-1] < ref[0] * 0.7, "the model learns"
    assert abs(our_acc - ref_acc) <= 0.01
