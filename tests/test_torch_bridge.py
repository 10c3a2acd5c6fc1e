"""pyvkgrad.torch against PyTorch's own backward on the same inputs: every function in float32
and float16, contiguous and channels-last, every mode and flag; modules, conversion, chaining.

Tolerances: tests/torch_support.py (the operator tests' float32 and float16 bounds, relative to
each element's magnitude). ReLU, threshold, hardtanh and relu6 gradients are selects, compared
bit for bit.
Batch norm reuses the operator tests' magnitudes (tests/test_batch_normalization_grad.py) with
PyTorch's float64 backward on the same values as the oracle; interpolate uses the transpose of
PyTorch's float32 forward (torch_support.interpolate_reference) and PyTorch's float32 backward
wherever that backward is the forward's transpose.
"""

import copy

import gc

import numpy as np
import pytest

from cases import released_memory
from torch_support import (DTYPES, F, assert_close, interpolate_reference, laid_out, layouts,
                           randn, same_layout, torch)
from torch_support import on_the_test_device  # noqa: F401 (autouse: every test on the device)

import pyvkgrad.torch as vt
from pyvkgrad.torch import _runtime
from test_batch_normalization_grad import magnitudes

nn = torch.nn


def grads(fn, inputs, dy):
    """Gradients of fn(*inputs) w.r.t. the inputs that require grad, for output gradient dy."""
    out = fn(*inputs)
    wanted = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return out, torch.autograd.grad(out, wanted, dy)


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int16 if t.dtype == torch.float16 else torch.int32)


SHAPES = {1: (37,), 2: (5, 7), 3: (2, 3, 11), 4: (2, 3, 5, 7), 5: (2, 3, 2, 5, 3)}


# ---- relu and threshold --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_relu_bitwise_as_pytorch(rng, dtype, rank):
    for layout in layouts(rank):
        x = randn(rng, SHAPES[rank], dtype)
        x.view(-1)[:3] = torch.tensor([0.0, -0.0, 1e-4], dtype=dtype)  # zeros give 0
        x = laid_out(x, layout).requires_grad_()
        dy = laid_out(randn(rng, SHAPES[rank], dtype), "contiguous")
        y, (gx,) = grads(vt.relu, [x], dy)
        ey, (ex,) = grads(F.relu, [x], dy)
        assert torch.equal(bits(y), bits(ey))
        same_layout(gx, x)
        assert torch.equal(bits(gx), bits(ex)), f"{layout}"


@pytest.mark.parametrize("shape", [(3, 4, 5), ()], ids=["3-D", "0-d"])
def test_relu_inplace(rng, shape):
    """In place returns the input itself (a 0-d one too, which runs as one element)."""
    base = randn(rng, shape)
    a = base.clone().requires_grad_()
    b = base.clone().requires_grad_()
    ha, hb = a * 1, b * 1
    ya, yb = vt.relu(ha, inplace=True), F.relu(hb, inplace=True)
    assert ya is ha and torch.equal(ha, hb), "modified in place, as F.relu(inplace=True)"
    dy = randn(rng, shape)
    (ga,) = torch.autograd.grad(ya, a, dy)
    (gb,) = torch.autograd.grad(yb, b, dy)
    assert torch.equal(ga, gb)


def test_relu_nan_input_gets_zero_gradient():
    """DirectML's ReLU grad is X > 0 ? dY : 0 (docs/semantics.md §6.6): a NaN input gets 0, where
    PyTorch (y <= 0 ? 0 : dy on the output) passes dY. Documented in docs/torch.md."""
    x = torch.tensor([float("nan"), 1.0, -1.0], requires_grad=True)
    (g,) = torch.autograd.grad(vt.relu(x), x, torch.tensor([5.0, 6.0, 7.0]))
    assert g.tolist() == [0.0, 6.0, 0.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("threshold,value", [(0.3, -1.0), (-0.7, 2.0), (0.0, 0.0),
                                             (0.10002, 5.0), (1e-30, 0.0)])
def test_threshold_bitwise_as_pytorch(rng, dtype, threshold, value):
    for layout in ("contiguous", "channels_last"):
        x = randn(rng, (2, 3, 4, 5), dtype)
        # Values at and next to the threshold in x's dtype (float16: 0.10002 lies between two
        # float16 values, and PyTorch compares in float32).
        t16 = torch.tensor(threshold, dtype=dtype)
        near = torch.stack([t16, torch.nextafter(t16.float(), torch.tensor(1.0)).to(dtype),
                            torch.nextafter(t16, torch.tensor(9.0, dtype=dtype)),
                            torch.nextafter(t16, torch.tensor(-9.0, dtype=dtype))])
        x.view(-1)[:4] = near
        x = laid_out(x, layout).requires_grad_()
        dy = randn(rng, (2, 3, 4, 5), dtype)
        y, (gx,) = grads(lambda t: vt.threshold(t, threshold, value), [x], dy)
        ey, (ex,) = grads(lambda t: F.threshold(t, threshold, value), [x], dy)
        assert torch.equal(bits(y), bits(ey))
        same_layout(gx, x)
        assert torch.equal(bits(gx), bits(ex)), (layout, x.detach().view(-1)[:4].tolist(),
                                                 gx.reshape(-1)[:4].tolist(),
                                                 ex.reshape(-1)[:4].tolist())


def test_threshold_inplace(rng):
    base = randn(rng, (4, 6))
    a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
    ha, hb = a * 1, b * 1
    ya, yb = vt.threshold(ha, 0.5, -3.0, inplace=True), F.threshold(hb, 0.5, -3.0, inplace=True)
    assert ya is ha and torch.equal(ha, hb)
    dy = randn(rng, (4, 6))
    assert torch.equal(torch.autograd.grad(ya, a, dy)[0], torch.autograd.grad(yb, b, dy)[0])


# ---- batch norm ----------------------------------------------------------------------------------

BN_SHAPES = {2: (6, 3), 3: (4, 3, 9), 4: (3, 4, 5, 7), 5: (2, 3, 3, 4, 5)}


def check_training_forward(y, ey, running, their_running, dtype):
    """The training forward runs on the device (BATCH_NORMALIZATION_TRAINING): within float32
    rounding of PyTorch's Output (float16: a rounding of the statistics, the float16 weight and
    the result, 2^-9 of the values' size), and running statistics updated as PyTorch's."""
    rtol = 2.0**-9 if dtype == torch.float16 else 1e-5
    size = y.double().abs().max().item() + 1
    np.testing.assert_allclose(y.detach().double().numpy(), ey.detach().double().numpy(), rtol=rtol,
                               atol=rtol * size)
    for a, b in zip(running, their_running):
        np.testing.assert_allclose(a.double().numpy(), b.double().numpy(), rtol=rtol,
                                   atol=rtol)


def check_state_dicts(ref, model):
    """Parameters as torch.nn's, bit for bit; running statistics from the device's batch
    statistics, float32 rounding apart."""
    for name, t in ref.state_dict().items():
        mine = model.state_dict()[name]
        if name.endswith(("running_mean", "running_var")):
            np.testing.assert_allclose(mine.double().numpy(), t.double().numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
        else:
            assert torch.equal(t, mine), name


def bn_check(rng, dtype, rank, layout, training, affine, eps=1e-3):
    shape = BN_SHAPES[rank]
    c = shape[1]
    x = laid_out(randn(rng, shape, dtype) + 0.5, layout).requires_grad_()
    dy = randn(rng, shape, dtype)
    w = randn(rng, (c,), dtype).requires_grad_() if affine in ("both", "weight") else None
    b = randn(rng, (c,), dtype).requires_grad_() if affine in ("both", "bias") else None
    rm, rv = randn(rng, (c,), dtype), randn(rng, (c,), dtype, 0.25, 2.0)
    rm2, rv2 = rm.clone(), rv.clone()
    inputs = [x] + [t for t in (w, b) if t is not None]

    def ours(*_):
        return vt.batch_norm(x, rm, rv, w, b, training, 0.1, eps)

    def theirs(*_):
        return F.batch_norm(x, rm2, rv2, w, b, training, 0.1, eps)

    y, got = grads(ours, inputs, dy)
    ey, _ = grads(theirs, inputs, dy)
    if training:
        check_training_forward(y, ey, (rm, rv), (rm2, rv2), x.dtype)
    else:
        assert torch.equal(y, ey), "the evaluation forward is PyTorch's own"
        assert torch.equal(rm, rm2) and torch.equal(rv, rv2), "running statistics untouched"
    same_layout(got[0], x)
    # Oracle: PyTorch's backward in float64 on the same values.
    x64 = x.detach().double().requires_grad_()
    w64 = None if w is None else w.detach().double().requires_grad_()
    b64 = None if b is None else b.detach().double().requires_grad_()
    inputs64 = [x64] + [t for t in (w64, b64) if t is not None]
    mean_arg = rm.detach().double() if not training else None
    var_arg = rv.detach().double() if not training else None
    _, exp = grads(lambda *_: F.batch_norm(x64, mean_arg if not training else None,
                                           var_arg if not training else None, w64, b64,
                                           training, 0.1, eps), inputs64, dy.double())
    # Magnitudes (tests/test_batch_normalization_grad.py) on the statistics the oracle used.
    axes = (0,) + tuple(range(2, rank))
    stat = [1] * rank
    stat[1] = c
    xn = x.detach().double().numpy()
    if training:
        mean = xn.mean(axis=axes, keepdims=True)
        var = xn.var(axis=axes, keepdims=True)
    else:
        mean = rm.double().numpy().reshape(stat)
        var = rv.double().numpy().reshape(stat)
    scale = np.ones(stat) if w is None else w.detach().double().numpy().reshape(stat)
    mags = magnitudes("training" if training else "grad", xn, dy.double().numpy(), mean, var,
                      scale, eps)
    names = ["input"] + [n for n, t in (("weight", w), ("bias", b)) if t is not None]
    mag_for = {"input": mags[0], "weight": mags[1].reshape(c), "bias": mags[2].reshape(c)}
    for name, g, e in zip(names, got, exp):
        extra = 0.0
        if dtype == torch.float16:
            # The statistics, Scale and parameter gradients travel in float16 (DirectML takes
            # one data type): Mean, Variance and Scale each carry one float16 rounding
            # (2^-11 relative), which the result inherits once more: 2^-10 of its magnitude.
            extra = 2.0**-10 * mag_for[name]
        assert_close(g, e, mag_for[name], dtype, f"batch_norm {name}", extra)
        assert g.dtype == dict(input=x, weight=w, bias=b)[name].dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rank", [2, 3, 4, 5])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_matches_pytorch(rng, dtype, rank, training):
    for layout in layouts(rank):
        bn_check(rng, dtype, rank, layout, training, "both")


@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_batch_norm_weight_bias_none(rng, affine, training):
    bn_check(rng, torch.float32, 4, "channels_last", training, affine)


def test_batch_norm_float32_matches_pytorch_float32(rng):
    """Also against PyTorch's own float32 backward, not only its float64 one."""
    x = laid_out(randn(rng, (4, 5, 6, 7)), "channels_last").requires_grad_()
    w, b = randn(rng, (5,)).requires_grad_(), randn(rng, (5,)).requires_grad_()
    dy = randn(rng, (4, 5, 6, 7))
    _, got = grads(lambda *_: vt.batch_norm(x, None, None, w, b, True), [x, w, b], dy)
    _, exp = grads(lambda *_: F.batch_norm(x, None, None, w, b, True), [x, w, b], dy)
    for g, e in zip(got, exp):
        scale = e.abs().max().item()
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_checks_its_per_channel_tensors(rng, training):
    """weight, bias and the running statistics must hold one value per channel, as ATen
    checks (the device's kernels and torch.native_batch_norm index them by channel unchecked:
    eval mode read past the buffers, or crashed, for a module of 3 channels on 6); the
    functional form refuses momentum=None as F.batch_norm does. Raised before any work, the
    running statistics untouched."""
    x = randn(rng, (2, 6, 3, 3)).requires_grad_()
    module = vt.BatchNorm2d(3).train(training)
    with pytest.raises(RuntimeError, match="should contain 6 elements not 3"):
        module(x)
    big = vt.BatchNorm1d(2).train(training)
    with pytest.raises(RuntimeError, match="should contain 4000 elements not 2"):
        big(randn(rng, (2, 4000)).requires_grad_())
    ones, zeros = torch.ones(6), torch.zeros(6)
    for name in ("running_mean", "running_var", "weight", "bias"):
        args = dict(running_mean=zeros.clone(), running_var=ones.clone(), weight=ones.clone(),
                    bias=zeros.clone())
        args[name] = args[name][:5].clone()
        before = {k: v.clone() for k, v in args.items()}
        with pytest.raises(RuntimeError, match=f"{name} should contain 6 elements not 5"):
            vt.batch_norm(x, training=training, **args)
        assert all(torch.equal(args[k], before[k]) for k in args)
    with pytest.raises(TypeError, match="momentum"):
        vt.batch_norm(x, zeros.clone(), ones.clone(), training=True, momentum=None)


def test_batch_norm_refuses_what_would_crash_or_overflow(rng):
    """Evaluation mode without running statistics raises as F.batch_norm does (the bridge
    called torch.native_batch_norm, which crashed on them). Float16 statistics or weights
    beyond 65504 raise instead of turning the gradients into zeros: a training batch whose
    standard deviation exceeds 256, float32 running_var or weight too large for float16."""
    x = randn(rng, (2, 3, 4)).requires_grad_()
    with pytest.raises(RuntimeError, match="must be defined in evaluation mode"):
        vt.batch_norm(x, None, None, training=False)
    for training in (False, True):  # (F.batch_norm's refusals and messages)
        for mean, var in ((torch.zeros(3), None), (None, torch.ones(3))):
            with pytest.raises(ValueError, match="must either both be None or neither"):
                vt.batch_norm(x, mean, var, training=training)
    with pytest.raises(ValueError, match="eps must be positive during training"):
        vt.batch_norm(x, None, None, training=True, eps=0.0)
    wide = (randn(rng, (4, 3, 5)) * 1000).half().requires_grad_()
    with pytest.raises(ValueError, match="variance exceeds float16's range"):
        vt.batch_norm(wide, None, None, training=True)
    half = randn(rng, (4, 3, 5)).half().requires_grad_()
    huge = torch.full((3,), 1e5)
    cases = (dict(running_mean=torch.zeros(3), running_var=huge, training=False),
             dict(running_mean=torch.zeros(3), running_var=torch.ones(3), weight=huge,
                  training=False),
             dict(running_mean=None, running_var=None, weight=huge, training=True))
    for kwargs, what in zip(cases, ("running_var", "weight", "weight")):
        with pytest.raises(ValueError, match=f"{what} holds values beyond float16's range"):
            vt.batch_norm(half, **kwargs).float().sum().backward()


@pytest.mark.parametrize("dims", [4, 5])
def test_batch_norm_training_keeps_channels_last(rng, dims):
    """A channels-last input gives a channels-last Output, as PyTorch's batch_norm does."""
    shape, fmt = ((2, 3, 4, 5), torch.channels_last) if dims == 4 else (
        (2, 3, 2, 4, 5), torch.channels_last_3d)
    x = randn(rng, shape).contiguous(memory_format=fmt).requires_grad_()
    module = getattr(vt, f"BatchNorm{dims - 2}d")(3)
    reference = getattr(nn, f"BatchNorm{dims - 2}d")(3)
    y = module(x)
    assert y.stride() == reference(x).stride()
    check_training_forward(y, reference(x), (), (), x.dtype)


def test_many_batch_norm_shapes_compile_once():
    """24 BatchNorm2d layers of distinct channel counts (MobileNetV2 has about 19 distinct
    BatchNorm shapes): their training forwards, which go through the one-call cache, stay
    cached, so steps after the first compile nothing and miss nothing (with 16 entries every
    step missed 24 times, at twice the time a step)."""
    torch.manual_seed(0)
    layers, c = [], 3
    for co in range(8, 8 + 4 * 24, 4):
        layers += [nn.Conv2d(c, co, 1), vt.BatchNorm2d(co), nn.ReLU()]
        c = co
    model = nn.Sequential(*layers)
    device = _runtime.get_device()
    counts = []
    for _ in range(3):
        x = torch.randn(2, 3, 4, 4)
        model(x).sum().backward()
        counts.append((device.runtime().pipelines_made, device.cache_info().misses))
    assert counts[2] == counts[1], counts


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"])
def test_batch_norm_modules_as_torch(rng, cls, momentum):
    """Running statistics (unbiased variance, momentum, cumulative average with momentum None),
    num_batches_tracked, eval mode and gradients as torch.nn's, over a few steps."""
    shape = {"BatchNorm1d": (6, 4, 5), "BatchNorm2d": (3, 4, 5, 3),
             "BatchNorm3d": (2, 4, 3, 2, 3)}[cls]
    torch.manual_seed(0)
    ref = getattr(nn, cls)(4, momentum=momentum)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    ours = getattr(vt, cls)(4, momentum=momentum)
    ours.load_state_dict(ref.state_dict())
    for step in range(3):
        x = randn(rng, shape).requires_grad_()
        dy = randn(rng, shape)
        for mode in ("train", "eval") if step == 2 else ("train",):
            ref.train(mode == "train")
            ours.train(mode == "train")
            y1, g1 = grads(ref, [x], dy)
            y2, g2 = grads(ours, [x], dy)
            # Training: the device's forward; evaluation: PyTorch's forward on running
            # statistics that came from the device's batch statistics. Both within float32
            # rounding of torch.nn's (bn_check pins the evaluation forward's bits).
            check_training_forward(y2, y1, (), (), x.dtype)
            scale = g1[0].abs().max().item()
            np.testing.assert_allclose(g2[0].numpy(), g1[0].numpy(), rtol=1e-4,
                                       atol=1e-5 * scale)
        check_state_dicts(ref, ours)


# ---- interpolate ---------------------------------------------------------------------------------

INTERPOLATE_CASES = [
    # (mode, input shape, kwargs)
    ("nearest", (2, 3, 7), dict(size=13)),
    ("nearest", (2, 3, 9), dict(size=4)),
    ("nearest", (2, 3, 5, 6), dict(scale_factor=2)),
    ("nearest", (2, 3, 5, 7), dict(scale_factor=1.5, recompute_scale_factor=True)),
    ("nearest", (2, 3, 5, 7), dict(scale_factor=(1.5, 0.7))),
    ("nearest", (1, 2, 3, 4, 5), dict(size=(5, 4, 9))),
    ("nearest", (1, 2, 5, 5), dict(scale_factor=(1.05, 2.3))),  # 2-D copies where in == out
    ("nearest-exact", (2, 3, 7), dict(size=12)),
    ("nearest-exact", (2, 3, 5, 7), dict(scale_factor=(2.5, 0.5))),
    ("nearest-exact", (2, 3, 5, 7), dict(size=(9, 4))),
    ("nearest-exact", (2, 2, 3, 4, 5), dict(scale_factor=2, recompute_scale_factor=True)),
    ("linear", (2, 3, 7), dict(size=12, align_corners=False)),
    ("linear", (2, 3, 7), dict(scale_factor=1.7, align_corners=True)),
    ("linear", (2, 3, 13), dict(scale_factor=0.4, align_corners=False)),
    ("bilinear", (2, 3, 5, 7), dict(scale_factor=2, align_corners=False)),
    ("bilinear", (2, 3, 5, 7), dict(size=(11, 4), align_corners=True)),
    ("bilinear", (2, 3, 6, 7), dict(scale_factor=1.7, align_corners=False,
                                    recompute_scale_factor=True)),
    ("bilinear", (2, 3, 6, 7), dict(scale_factor=(0.6, 1.3), align_corners=False)),
    ("bilinear", (2, 3, 5, 5), dict(scale_factor=1.05)),  # in == out with a scale: a copy
    ("trilinear", (2, 3, 3, 4, 5), dict(scale_factor=(2, 1.5, 1), align_corners=False)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 3, 8), align_corners=True)),
]


def case_id(case):
    mode, shape, kw = case
    return f"{mode}-{len(shape)}d-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", INTERPOLATE_CASES, ids=case_id)
def test_interpolate_matches_pytorch(rng, dtype, case):
    mode, shape, kw = case
    for layout in layouts(len(shape)):
        x = laid_out(randn(rng, shape, dtype), layout).requires_grad_()
        y = vt.interpolate(x, mode=mode, **kw)
        ey = F.interpolate(x, mode=mode, **kw)
        assert torch.equal(y, ey), "the forward is PyTorch's own"
        dy = randn(rng, tuple(ey.shape), dtype)
        (gx,) = torch.autograd.grad(y, x, dy)
        same_layout(gx, x)
        expected, magnitude, coordinate, consistent, pt = interpolate_reference(
            shape, dy, mode, **kw)
        what = f"{mode} {dtype} {layout} {kw}"
        assert_close(gx, expected, magnitude, dtype, what, coordinate)
        if consistent:
            assert_close(gx, pt.double().numpy(), magnitude, dtype, what + " vs PyTorch",
                         coordinate)


def test_interpolate_where_pytorch_backward_is_not_its_forward_transpose(rng):
    """PyTorch's nearest forward with a scale factor and in == out sizes reads o * s; its
    backward copies (o -> o). The bridge transposes what the forward did."""
    x = randn(rng, (1, 1, 5)).requires_grad_()
    dy = torch.arange(1.0, 6.0).reshape(1, 1, 5) * 10
    kw = dict(scale_factor=1.05, mode="nearest", recompute_scale_factor=False)
    assert F.interpolate(x, **kw)[0, 0, 1] == x[0, 0, 0], "PyTorch's forward reads 0 for o=1"
    (g,) = torch.autograd.grad(vt.interpolate(x, **kw), x, dy)
    (pt,) = torch.autograd.grad(F.interpolate(x, **kw), x, dy)
    assert g.reshape(-1).tolist() == [30.0, 30.0, 40.0, 50.0, 0.0]
    assert pt.reshape(-1).tolist() == [10.0, 20.0, 30.0, 40.0, 50.0]


@pytest.mark.parametrize("mode,kw", [("bicubic", {}), ("area", {}),
                                     ("nearest", {"antialias": True}),
                                     ("bilinear", {"antialias": True})])
def test_interpolate_modes_directml_cannot_express_raise(mode, kw):
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    with pytest.raises(ValueError, match=repr(mode) if "antialias" not in kw else "antialias"):
        vt.interpolate(x, scale_factor=2, mode=mode, **kw)
    if not kw:
        with pytest.raises(ValueError, match=repr(mode)):
            vt.interpolate(x.detach(), scale_factor=2, mode=mode)  # even without a gradient
        with pytest.raises(ValueError, match=repr(mode)):
            vt.Upsample(scale_factor=2, mode=mode)


def test_interpolate_inexpressible_taps_raise_in_forward():
    """nearest-exact 20 -> 46: PyTorch's float32 taps round integer coordinates both ways on one
    axis; no RESAMPLE1 parameters reproduce them, so the bridge refuses (never a different
    gradient), naming the sizes. Without a gradient the forward is PyTorch's, unchanged."""
    x = torch.randn(1, 1, 20, requires_grad=True)
    with pytest.raises(vt.InexactResample, match="20 to 46"):
        vt.interpolate(x, size=46, mode="nearest-exact")
    with torch.no_grad():
        assert torch.equal(vt.interpolate(x, size=46, mode="nearest-exact"),
                           F.interpolate(x, size=46, mode="nearest-exact"))


def test_bilinear_backward_deterministic_and_bitwise_reproducible(rng):
    """Under torch.use_deterministic_algorithms(True) bilinear backward through pyvkgrad runs
    (ResampleGrad's gather kernel: a fixed summation order, no atomics) and gives the same bits
    every run."""
    x = laid_out(randn(rng, (2, 4, 13, 17)), "channels_last").requires_grad_()
    dy = randn(rng, (2, 4, 29, 31))
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [torch.autograd.grad(vt.interpolate(x, size=(29, 31), mode="bilinear"), x, dy)[0]
                for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(before)
    for r in runs[1:]:
        assert torch.equal(bits(r), bits(runs[0]))


def test_odd_tensors(rng):
    """0-d, empty, strided (a slice) and broadcast (expanded) inputs: as PyTorch."""
    x = torch.tensor(1.5, requires_grad=True)
    assert torch.autograd.grad(vt.relu(x), x)[0].item() == 1.0
    x = torch.zeros(3, 0, 4, requires_grad=True)
    assert torch.autograd.grad(vt.relu(x).sum(), x)[0].shape == (3, 0, 4)
    base = randn(rng, (4, 6, 5)).requires_grad_()
    dy = randn(rng, (4, 3, 5))
    assert torch.equal(torch.autograd.grad(vt.relu(base[:, ::2]), base, dy)[0],
                       torch.autograd.grad(F.relu(base[:, ::2]), base, dy)[0])
    small = randn(rng, (1, 3, 1, 1)).requires_grad_()
    dy = randn(rng, (2, 3, 8, 8))
    g = torch.autograd.grad(vt.interpolate(small.expand(2, 3, 4, 4), scale_factor=2,
                                           mode="bilinear"), small, dy)[0]
    e = torch.autograd.grad(F.interpolate(small.expand(2, 3, 4, 4), scale_factor=2,
                                          mode="bilinear"), small, dy)[0]
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)


def test_unsupported_dtype_raises():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match="float64"):
        vt.relu(x)


def test_double_backward_is_refused(rng):
    """create_graph=True through a bridged operator raises at once, naming the cause: with
    once_differentiable alone, a gradient penalty's torch.autograd.grad(..., allow_unused=True)
    returned a gradient silently cut at the bridged ReLU."""
    x = randn(rng, (5,)).requires_grad_()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(vt.relu(x).pow(2).sum(), x, create_graph=True)
    w1, w2 = randn(rng, (4, 3)).requires_grad_(), randn(rng, (2, 4)).requires_grad_()
    x = randn(rng, (5, 3)).requires_grad_()
    f = (vt.relu(x @ w1.T) @ w2.T).pow(2).sum()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(f, x, create_graph=True)
    (g,) = torch.autograd.grad(f, x)  # (without create_graph: the usual gradient)
    assert g.shape == x.shape


# ---- hardtanh and relu6 ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rank", [1, 2, 4, 5])
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (0.0, 6.0), (0.3, 0.30004), (-0.1, 2.5)])
def test_hardtanh_and_relu6_bitwise_as_pytorch(rng, dtype, rank, bounds):
    """Values at and next to the bounds (0.3 and -0.1 lie between two float16 values, and
    PyTorch compares float16 with float32 bounds), every layout; relu6 is hardtanh(0, 6)."""
    low, high = bounds
    for layout in layouts(rank):
        x = randn(rng, SHAPES[rank], dtype) * 3
        near = [low, high, 0.0, 6.0, -1.0, 1.0]
        for v in (low, high):
            t = torch.tensor(v, dtype=dtype)
            near += [torch.nextafter(t, torch.tensor(9.0, dtype=dtype)).item(),
                     torch.nextafter(t, torch.tensor(-9.0, dtype=dtype)).item()]
        x.view(-1)[:len(near)] = torch.tensor(near, dtype=dtype)
        x = laid_out(x, layout).requires_grad_()
        dy = laid_out(randn(rng, SHAPES[rank], dtype), "contiguous")
        for ours, theirs in ((lambda t: vt.hardtanh(t, low, high),
                              lambda t: F.hardtanh(t, low, high)), (vt.relu6, F.relu6)):
            y, (gx,) = grads(ours, [x], dy)
            ey, (ex,) = grads(theirs, [x], dy)
            assert torch.equal(bits(y), bits(ey))
            same_layout(gx, x)
            assert torch.equal(bits(gx), bits(ex)), f"{layout} {bounds}"


@pytest.mark.parametrize("fn", ["hardtanh", "relu6"])
def test_hardtanh_inplace(rng, fn):
    """In place, as PyTorch's; the gradient from the input as it was (its copy), so a bound
    float16 does not hold cannot shift it."""
    for dtype in DTYPES:
        base = randn(rng, (3, 4, 5), dtype) * 4
        a, b = base.clone().requires_grad_(), base.clone().requires_grad_()
        ha, hb = a * 1, b * 1
        args = (0.3, 2.5) if fn == "hardtanh" else ()
        ya = getattr(vt, fn)(ha, *args, inplace=True)
        yb = getattr(F, fn)(hb, *args, inplace=True)
        assert ya is ha and torch.equal(ha, hb), "modified in place"
        dy = randn(rng, (3, 4, 5), dtype)
        (ga,) = torch.autograd.grad(ya, a, dy)
        (gb,) = torch.autograd.grad(yb, b, dy)
        assert torch.equal(bits(ga), bits(gb))


def test_hardtanh_nan_input_passes_the_gradient():
    """DirectML's clip grad passes dY where X is NaN (both comparisons false), as PyTorch's
    scalar loop does; PyTorch's 16-lane vector loop gives 0 there. docs/torch.md."""
    x = torch.tensor([float("nan"), 7.0, -1.0, 3.0], requires_grad=True)
    (g,) = torch.autograd.grad(vt.relu6(x), x, torch.tensor([5.0, 6.0, 7.0, 8.0]))
    assert g.tolist() == [5.0, 0.0, 0.0, 8.0]
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        vt.hardtanh(x, 2.0, 1.0)


def test_hardtanh_and_relu6_modules_chain_and_convert(rng):
    """Hardtanh and ReLU6 join a Sequential's chain (not in place: they would clamp the output
    an earlier ReLU step keeps), and convert swaps nn.Hardtanh and nn.ReLU6."""
    ref = nn.Sequential(nn.BatchNorm1d(6), nn.ReLU(), nn.Hardtanh(-0.5, 0.75), nn.ReLU6(),
                        nn.ReLU6(inplace=True), nn.Hardtanh(0.1, 0.2, inplace=True))
    model = vt.convert(copy.deepcopy(ref))
    assert [type(m) for m in model] == [vt.BatchNorm1d, vt.ReLU, vt.Hardtanh, vt.ReLU6,
                                        vt.ReLU6, vt.Hardtanh]
    assert (model[2].min_val, model[2].max_val, model[4].inplace) == (-0.5, 0.75, True)
    from pyvkgrad.torch.modules import _run_at
    x = randn(rng, (5, 6)).requires_grad_()
    assert len(_run_at(list(model), 0, x)) == 4, "BatchNorm, ReLU, Hardtanh, ReLU6"
    x2 = x.detach().clone().requires_grad_()
    dy = randn(rng, (5, 6))
    (g,) = torch.autograd.grad(model(x), x, dy)
    (e,) = torch.autograd.grad(ref(x2), x2, dy)
    assert_close(g, e.double().numpy(), np.abs(e.double().numpy()) + 1, torch.float32, "dx")


# ---- modules, state dicts, convert ---------------------------------------------------------------

MODULE_PAIRS = [
    (lambda: nn.ReLU(), lambda: vt.ReLU()),
    (lambda: nn.ReLU(inplace=True), lambda: vt.ReLU(inplace=True)),
    (lambda: nn.Hardtanh(-2.0, 0.5), lambda: vt.Hardtanh(-2.0, 0.5)),
    (lambda: nn.ReLU6(inplace=True), lambda: vt.ReLU6(inplace=True)),
    (lambda: nn.BatchNorm1d(3), lambda: vt.BatchNorm1d(3)),
    (lambda: nn.BatchNorm2d(3, momentum=None, affine=False), lambda: vt.BatchNorm2d(
        3, momentum=None, affine=False)),
    (lambda: nn.BatchNorm3d(3, track_running_stats=False),
     lambda: vt.BatchNorm3d(3, track_running_stats=False)),
    (lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
     lambda: vt.Upsample(scale_factor=2, mode="bilinear", align_corners=True)),
]


@pytest.mark.parametrize("pair", MODULE_PAIRS, ids=lambda p: repr(p[0]()))
def test_modules_are_drop_in(pair):
    ref, ours = pair[0](), pair[1]()
    assert isinstance(ours, type(ref))
    assert repr(ours) == repr(ref)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for name, t in ref.state_dict().items():
        if t.is_floating_point():
            t.uniform_(0.5, 1.5)
    ours.load_state_dict(ref.state_dict())  # torch.nn -> pyvkgrad
    back = pair[0]()
    back.load_state_dict(ours.state_dict())  # pyvkgrad -> torch.nn
    for name, t in ref.state_dict().items():
        assert torch.equal(back.state_dict()[name], t), name


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class MyBatchNorm(nn.BatchNorm2d):
    pass


def make_model():
    torch.manual_seed(1)
    return nn.Sequential(
        Block(),
        nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(4, 4, 1),
                      nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                      nn.UpsamplingBilinear2d(scale_factor=0.5)),
        nn.Upsample(scale_factor=2, mode="bicubic"),
        MyBatchNorm(4),
        nn.Conv2d(4, 2, 1))


def test_convert_swaps_recursively_and_shares_parameters():
    ref = make_model()
    params = list(ref.parameters())
    ref.eval()
    model = vt.convert(ref)
    assert type(model) is vt.Sequential
    assert type(model[0]) is Block and type(model[0].bn) is vt.BatchNorm2d
    assert type(model[0].act) is vt.ReLU
    assert type(model[1]) is vt.Sequential and type(model[1][0]) is vt.Upsample
    assert type(model[1][3]) is vt.ReLU and model[1][3].inplace
    assert type(model[1][4]) is vt.Upsample and model[1][4].align_corners
    assert type(model[2]) is nn.Upsample, "bicubic stays PyTorch's"
    assert type(model[3]) is MyBatchNorm, "subclasses are left alone"
    assert all(a is b for a, b in zip(model.parameters(), params)), "the same parameters"
    assert model[0].bn.running_mean is ref[0].bn.running_mean
    assert not model.training and not model[0].bn.training
    assert list(model.state_dict()) == list(ref.state_dict())


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_converted_model_trains_as_pytorch(rng, layout):
    ref = make_model()
    model = vt.convert(copy.deepcopy(ref))
    x = laid_out(randn(rng, (3, 3, 6, 6)), layout)
    for step in range(2):
        y1, y2 = ref(x), model(x)
        # The training BatchNorms' forward runs on the device: float32 rounding apart.
        check_training_forward(y2, y1, (), (), x.dtype)
        dy = randn(rng, tuple(y1.shape))
        g1 = torch.autograd.grad(y1, list(ref.parameters()), dy)
        g2 = torch.autograd.grad(y2, list(model.parameters()), dy)
        # Parameter gradients are sums over the batch whose terms are about the largest
        # gradient's size (a conv bias after a training BatchNorm sums to nearly 0): errors
        # are bounded relative to that scale.
        scale = max(a.abs().max().item() for a in g1)
        for (name, _), a, b in zip(ref.named_parameters(), g1, g2):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5 * scale,
                                       err_msg=name)
    check_state_dicts(ref, model)


def test_convert_keeps_repeated_and_shared_modules(rng):
    """A Sequential using one module at several places (a repeated activation, a weight-tied
    Linear, a shared BatchNorm) keeps every place, and each original becomes one new module:
    the same layers, the same parameters, the same results and gradients."""
    torch.manual_seed(2)
    lin, act, bn = nn.Linear(6, 6), nn.ReLU(), nn.BatchNorm1d(6)
    ref = nn.Sequential(lin, act, nn.Linear(6, 6), act, lin, bn, act, bn)
    model = vt.convert(copy.deepcopy(ref))
    assert len(model) == len(ref) == 8
    assert type(model[1]) is vt.ReLU and model[1] is model[3] is model[6]
    assert type(model[5]) is vt.BatchNorm1d and model[5] is model[7]
    assert model[0] is model[4]
    assert len(list(model.parameters())) == len(list(ref.parameters())) == 6
    x = randn(rng, (5, 6)).requires_grad_()
    dy = randn(rng, (5, 6))
    y1, y2 = ref(x), model(x)
    check_training_forward(y2, y1, (), (), x.dtype)  # training BatchNorms on the device
    g1 = torch.autograd.grad(y1, [x, *ref.parameters()], dy)
    g2 = torch.autograd.grad(y2, [x, *model.parameters()], dy)
    scale = max(a.abs().max().item() for a in g1)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5 * scale)
    check_state_dicts(ref, model)


def test_convert_carries_hooks(rng):
    """Forward and backward hooks of a replaced module fire on its replacement (which then
    runs on its own, outside any chain), and their handles still remove them."""
    act = nn.ReLU()
    seen = []
    handles = [act.register_forward_pre_hook(lambda m, i: seen.append(("pre", type(m)))),
               act.register_forward_hook(lambda m, i, o: seen.append(("forward", type(m)))),
               act.register_full_backward_hook(
                   lambda m, gi, go: seen.append(("backward", type(m))))]
    ref = nn.Sequential(nn.BatchNorm1d(4), act, nn.ReLU())
    model = vt.convert(copy.deepcopy(ref))
    assert type(model[1]) is vt.ReLU
    x = randn(rng, (3, 4)).requires_grad_()
    dy = randn(rng, (3, 4))
    (g,) = torch.autograd.grad(model(x), x, dy)
    assert seen == [("pre", vt.ReLU), ("forward", vt.ReLU), ("backward", vt.ReLU)]
    seen.clear()
    (e,) = torch.autograd.grad(ref(x), x, dy)
    assert seen == [("pre", nn.ReLU), ("forward", nn.ReLU), ("backward", nn.ReLU)]
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    model = vt.convert(ref)
    for h in handles:
        h.remove()
    seen.clear()
    torch.autograd.grad(model(x), x, dy)
    assert seen == []


# ---- chaining ------------------------------------------------------------------------------------

@pytest.fixture
def execution(request):
    """Run the test under the execution named by its parameter, then restore the default."""
    vt.set_options(execution=request.param)
    yield request.param
    vt.set_options(execution=_runtime.DEFAULT_EXECUTION)


EXECUTIONS = list(_runtime.EXECUTIONS)


@pytest.mark.parametrize("execution", EXECUTIONS, indirect=True)
def test_sequential_runs_a_chain_as_one_node(rng, execution):
    """BatchNorm -> ReLU -> Upsample in a pyvkgrad Sequential: one autograd node whose backward
    uploads dY once and each saved input once ("fresh" and "reuse": one submission, the
    chain's intermediate gradients stay on the device). Results equal the same modules run
    one by one, over several steps (new data every run)."""
    torch.manual_seed(0)
    mods = [vt.BatchNorm2d(4), vt.ReLU(), vt.Upsample(scale_factor=2, mode="bilinear")]
    chain = vt.Sequential(*mods)
    x = laid_out(randn(rng, (2, 4, 5, 6)), "channels_last").requires_grad_()
    for step in range(3):
        x = laid_out(randn(rng, (2, 4, 5, 6)), "channels_last").requires_grad_()
        dy = randn(rng, (2, 4, 10, 12))
        _runtime.stats.clear()
        y = chain(x)
        assert type(y.grad_fn).__name__ == "_ChainBackward"
        assert y.grad_fn.next_functions[0][0].name().endswith("AccumulateGrad"), "one node"
        g_chain = torch.autograd.grad(y, [x, mods[0].weight, mods[0].bias], dy)
        # dY; X, mean, variance, scale for BatchNorm; Y for ReLU: six uploads, no more. In
        # "reuse" its first run also uploads the zeros of the three outputs (dX, dScale,
        # dBias); the two intermediate gradients live on the device alone (no host copy).
        if execution == "fresh" or (execution == "reuse" and step > 0):
            assert _runtime.stats["uploads"] == 6
        elif execution == "reuse":
            assert _runtime.stats["uploads"] == 6 + 3
        one_by_one = mods[2](mods[1](mods[0](x)))
        g_single = torch.autograd.grad(one_by_one, [x, mods[0].weight, mods[0].bias], dy)
        for a, b in zip(g_chain, g_single):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("execution", ["fresh"], indirect=True)
def test_hand_off_between_separate_calls(rng, execution):
    """Functional code (no Sequential), "fresh" execution: each bridged backward keeps its
    input gradient on the device for the bridged backward that consumes it, so the consumer
    uploads no dY."""
    bn = vt.BatchNorm2d(3)
    x = randn(rng, (2, 3, 4, 5)).requires_grad_()
    dy = randn(rng, (2, 3, 8, 10))

    def net(t):
        return vt.interpolate(vt.relu(bn(t)), scale_factor=2, mode="nearest")

    _runtime.stats.clear()
    (g,) = torch.autograd.grad(net(x), x, dy)
    assert _runtime.stats["hand_off_hits"] == 2
    vt.set_options(hand_off=False)
    try:
        (g_plain,) = torch.autograd.grad(net(x), x, dy)
    finally:
        vt.set_options(hand_off=True)
    assert torch.equal(g, g_plain)


@pytest.mark.parametrize("execution", ["fresh"], indirect=True)
def test_hand_off_skips_a_modified_gradient(rng, execution):
    """A hook that modifies the handed-over gradient in place bumps its version: the consumer
    uploads the modified tensor instead of reusing the device copy."""
    x = randn(rng, (3, 7)).requires_grad_()
    dy = randn(rng, (3, 7))

    def net(relu, t):
        h = relu(t * 1)
        h.register_hook(lambda g: g.mul_(3))
        return relu(h - 0.5)

    _runtime.stats.clear()
    (g,) = torch.autograd.grad(net(vt.relu, x), x, dy)
    (e,) = torch.autograd.grad(net(F.relu, x), x, dy)
    assert torch.equal(g, e)
    assert _runtime.stats["hand_off_hits"] == 0


@pytest.mark.parametrize("execution", EXECUTIONS, indirect=True)
def test_programs_run_again_with_new_data(rng, execution):
    """Each execution runs a cached program again and again: every run must see its own
    inputs ("reuse": written into the program's device tensors, then a replay)."""
    _runtime.clear_programs()
    try:
        bn, ref = vt.BatchNorm2d(3), nn.BatchNorm2d(3)
        for _ in range(3):
            x = randn(rng, (2, 3, 4, 5)).requires_grad_()
            dy = randn(rng, (2, 3, 4, 5))
            (g,) = torch.autograd.grad(vt.relu(bn(x)), x, dy)
            (e,) = torch.autograd.grad(F.relu(ref(x)), x, dy)
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)
    finally:
        _runtime.clear_programs()


def _bn_relu_check(rng, bn, ref):
    """One backward of relu(bn(x)) against PyTorch's."""
    x = randn(rng, (2, 3, 4, 5)).requires_grad_()
    dy = randn(rng, (2, 3, 4, 5))
    (g,) = torch.autograd.grad(vt.relu(bn(x)), x, dy)
    (e,) = torch.autograd.grad(F.relu(ref(x)), x, dy)
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("execution", EXECUTIONS, indirect=True)
def test_backward_after_device_close(rng, execution, device):
    """A device close ends the cached programs' tensors, recordings and operators: the next
    backward of the same structure builds them again, transparently."""
    bn, ref = vt.BatchNorm2d(3), nn.BatchNorm2d(3)
    _bn_relu_check(rng, bn, ref)
    device.close()
    for _ in range(2):
        _bn_relu_check(rng, bn, ref)


@pytest.mark.parametrize("execution", ["fresh"], indirect=True)
def test_hand_off_after_device_close(rng, execution, device):
    """A device close between a bridged backward and the one consuming its kept gradient:
    the consumer uploads the gradient instead of binding the closed device tensor."""
    bn, ref = vt.BatchNorm2d(3), nn.BatchNorm2d(3)
    x = randn(rng, (2, 3, 4, 5)).requires_grad_()
    dy = randn(rng, (2, 3, 4, 5))

    def net(relu, norm):
        h = norm(x)
        h.register_hook(lambda g: device.close())  # after relu's backward kept its gradient
        return relu(h)

    _runtime.stats.clear()
    (g,) = torch.autograd.grad(net(vt.relu, bn), x, dy)
    assert _runtime.stats["hand_off_hits"] == 0
    (e,) = torch.autograd.grad(net(F.relu, ref), x, dy)
    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("execution", ["reuse"], indirect=True)
@pytest.mark.parametrize("where, exception", [("DeviceTensor.write", KeyboardInterrupt),
                                              ("Recording.submit", KeyboardInterrupt),
                                              ("Recording.submit", RuntimeError)])
def test_interrupted_first_run_leaves_no_half_program(rng, monkeypatch, execution, where,
                                                      exception):
    """An exception (a Ctrl-C) in the first "reuse" run of a structure, as it fills its
    inputs or submits: the next backward of that structure builds and runs the program."""
    import pyvkgrad.device
    vt.cache_clear()
    cls, method = where.split(".")
    cls = getattr(pyvkgrad.device, cls)
    original = getattr(cls, method)
    calls = []

    def failing_once(self, *args):
        calls.append(self)
        if len(calls) == 1:
            raise exception("interrupted")
        return original(self, *args)

    monkeypatch.setattr(cls, method, failing_once)
    bn, ref = vt.BatchNorm2d(3), nn.BatchNorm2d(3)
    with pytest.raises(exception, match="interrupted"):
        _bn_relu_check(rng, bn, ref)
    for _ in range(2):
        _bn_relu_check(rng, bn, ref)
    vt.cache_clear()


@pytest.mark.parametrize("execution", EXECUTIONS, indirect=True)
def test_cache_clear_releases_programs(rng, execution):
    """cache_clear() gives back every cached program and its device memory (cache_info() shows
    none left); later backward calls build them again."""
    vt.cache_clear()
    bn, ref = vt.BatchNorm2d(3), nn.BatchNorm2d(3)
    for _ in range(2):
        _bn_relu_check(rng, bn, ref)
    info = vt.cache_info()
    assert (info.entries, info.hits, info.misses) == (2, 2, 2) and info.nbytes > 0
    vt.cache_clear()
    info = vt.cache_info()
    assert (info.entries, info.nbytes, info.hits, info.misses) == (0, 0, 0, 0)
    _bn_relu_check(rng, bn, ref)
    assert vt.cache_info().entries == 2
    assert vt.clear_programs is vt.cache_clear


@pytest.mark.parametrize("execution", ["reuse"], indirect=True)
def test_many_chains_stay_cached(device, execution):
    """70 bridged chains of distinct shapes a step (more than the 64 programs the cache once
    kept, which it then missed every step): after the first step every chain is a hit."""
    vt.cache_clear()
    xs = [torch.randn(1, 2, 4 + i, 4, requires_grad=True) for i in range(70)]
    for _ in range(2):
        before = vt.cache_info()
        sum(vt.avg_pool2d(x, 2).sum() for x in xs).backward()
    after = vt.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (70, 0)
    vt.cache_clear()


@pytest.mark.parametrize("execution", ["reuse"], indirect=True)
def test_cache_clear_gives_the_memory_back(device, execution):
    """After backward calls whose programs keep about 100 MiB on the device ("reuse"
    execution), cache_clear() and the device's one-call cache_clear() bring the process's
    memory back within 64 MiB of where it started."""
    vt.cache_clear()
    device.cache_clear()
    gc.collect()
    before = released_memory(device)
    for n in range(4):  # a structure each: 4 programs of [2, 16, 256, 256 + n] float32
        x = torch.randn(2, 16, 256, 256 + n, requires_grad=True)
        vt.relu(x).sum().backward()
    assert vt.cache_info().nbytes >= 4 * 2 * 2 * (8 << 20)  # device and staging buffers
    vt.cache_clear()
    device.cache_clear()
    gc.collect()
    assert released_memory(device) - before < 64 << 20


def test_execution_option_is_checked():
    with pytest.raises(ValueError, match="execution"):
        vt.set_options(execution="fast")


def test_core_package_does_not_import_torch():
    """`import pyvkgrad` (and every one-call function) stays free of torch."""
    import subprocess
    import sys

    code = ("import sys, numpy as np, pyvkgrad; "
            "pyvkgrad.activation_relu_grad(np.ones(3, np.float32), np.ones(3, np.float32)); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the bridge "
                    "moves CUDA gradients through the host to the Vulkan device and back)")
def test_cuda_tensors(rng):
    """Inputs on a CUDA device: gradients come back on it, equal to the CPU inputs' (the
    backward runs on the same Vulkan device either way); PyTorch's CUDA forward is used, so
    batch statistics may differ in the last bits from the CPU's."""
    cuda = torch.device("cuda")
    x = laid_out(randn(rng, (2, 4, 5, 6)), "channels_last")
    dy = randn(rng, (2, 4, 10, 12))
    bn = vt.BatchNorm2d(4)

    def net(t):
        return vt.interpolate(vt.relu(bn(t)), scale_factor=2, mode="nearest")

    xc = x.clone().requires_grad_()
    (g_cpu,) = torch.autograd.grad(net(xc), xc, dy)
    bn.to(cuda)
    xg = x.to(cuda).requires_grad_()
    (g_cuda,) = torch.autograd.grad(net(xg), xg, dy.to(cuda))
    assert g_cuda.device.type == "cuda"
    same_layout(g_cuda.cpu(), x)
    np.testing.assert_allclose(g_cuda.cpu().numpy(), g_cpu.numpy(), rtol=1e-4, atol=1e-5)


def test_batch_norm_one_value_per_channel_raises():
    x = torch.randn(1, 3, requires_grad=True)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        vt.BatchNorm1d(3)(x)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        vt.batch_norm(x, None, None, training=True)


def test_torch_compile_runs_the_bridge_as_it_is():
    """torch.compile (Dynamo) of a converted model with BatchNorm in training and nearest
    upsampling: it traced into the bridge's device calls and raised ("Expected np.nditer
    base"); the bridged calls are now left to run as they are (a graph break each), and the
    gradients are plain PyTorch's."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(4, 2, 1))
    bridged = vt.convert(copy.deepcopy(model))
    compiled = torch.compile(bridged, backend="eager")
    x = torch.randn(2, 3, 6, 6)
    for _ in range(2):
        for m in (model, compiled):
            m.zero_grad()
            m(x).square().sum().backward()
        for (name, a), b in zip(model.named_parameters(), bridged.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(bridged[1].running_mean, model[1].running_mean)


def test_batched_gradients_are_refused_by_name():
    """jacobian(vectorize=True) and grad(is_grads_batched=True) hand a backward a batch of
    gradients, which PyTorch refused deep inside the bridge ("Batching rule not implemented
    for aten::detach"); the bridge says what it cannot do, and the default jacobian works."""
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="one gradient at a time"):
        torch.autograd.grad(vt.relu(x), x, torch.randn(4, 2, 3), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="one gradient at a time"):
        torch.autograd.functional.jacobian(vt.relu, x, vectorize=True)
    torch.testing.assert_close(torch.autograd.functional.jacobian(vt.relu, x),
                               torch.autograd.functional.jacobian(torch.relu, x))


def test_batch_norm_parameter_dtypes_follow_pytorch():
    """F.batch_norm refuses weight, bias and running statistics of mixed dtypes, or of a dtype
    other than the input's (float32 beside float16 input excepted); training took them all
    (float64 statistics beside float32 input, say). Every combination: both refuse, or both
    run."""
    import itertools
    kinds = [torch.float32, torch.float16, torch.float64, None]
    for training, xd, wd, sd in itertools.product((True, False), kinds[:2], kinds, kinds):
        if sd is None and not training:
            continue
        outcomes = []
        for fn in (F.batch_norm, vt.batch_norm):
            x = torch.randn(2, 3, 4, 4, dtype=xd, requires_grad=True)
            w, b = ((torch.ones(3, dtype=wd, requires_grad=True),
                     torch.zeros(3, dtype=wd, requires_grad=True)) if wd else (None, None))
            rm, rv = (torch.zeros(3, dtype=sd), torch.ones(3, dtype=sd)) if sd else (None, None)
            try:
                fn(x, rm, rv, w, b, training=training).float().sum().backward()
                outcomes.append("ran")
            except RuntimeError:
                outcomes.append("refused")
        assert outcomes[0] == outcomes[1], (training, xd, wd, sd, outcomes)
