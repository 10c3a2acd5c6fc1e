"""Problems larger than the device's storage buffer range: the one-call functions cut them
along independent axes (pyvkgrad/ops/_split.py) and get the operator's own results; what no
cut can make fit, and any descriptor the device cannot bind, is refused before device work.

PYVKGRAD_MAX_BUFFER_BYTES lowers the limit so that small arrays exercise the cuts; one test
uses lavapipe's real 128 MiB limit."""

import dataclasses

import numpy as np
import pytest

from pyvkgrad.one_call_cache import OneCallCache
from hypothesis import given, strategies as st

import pyvkgrad
import pyvkgrad._context
from pyvkgrad import kernels, reference
from cases import random_array, strided_view

LIMIT = 4096  # bytes: 1024 float32 elements per tensor


@pytest.fixture
def small_buffers(monkeypatch):
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", str(LIMIT))


def no_device_work(monkeypatch, device):
    def refuse(*args, **kwargs):
        raise AssertionError("device work started")
    monkeypatch.setattr(OneCallCache, "run", refuse)


def bn_inputs(rng, shape, stat_shape, dtype):
    x = random_array(rng, shape, dtype)
    axes = tuple(a for a, n in enumerate(stat_shape) if n == 1)
    mean = x.astype(np.float64).mean(axis=axes, keepdims=True).astype(dtype)
    var = x.astype(np.float64).var(axis=axes, keepdims=True).astype(dtype)
    scale = random_array(rng, stat_shape, dtype)
    return x, random_array(rng, shape, dtype), mean, var, scale


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_relu_grad_in_pieces_is_bitwise_the_whole(device, rng, small_buffers, dtype):
    """Element-wise: any view, any rank; cut along the leading axes, then further ones."""
    x = strided_view(rng, (3, 7, 11, 13), dtype)
    dy = np.broadcast_to(random_array(rng, (1, 7, 1, 13), dtype), x.shape)
    out = pyvkgrad.activation_relu_grad(x, dy, device=device)
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_array_equal(out, reference.activation_relu_grad(x, dy).astype(dtype))
    long = random_array(rng, (5000,), dtype)  # rank 1: one axis, cut into many pieces
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(long, long, device=device),
                                  reference.activation_relu_grad(long, long).astype(dtype))


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "2d"])
def test_batch_normalization_grads_in_pieces(device, rng, small_buffers, layout, training):
    """Cut along the statistics' (channel) axes only; each channel's reduction stays whole."""
    shape, stat = {"nchw": ((4, 37, 5, 7), (1, 37, 1, 1)),
                   "nhwc": ((4, 5, 7, 37), (1, 1, 1, 37)),
                   "2d": ((300, 45), (1, 45))}[layout]
    args = bn_inputs(rng, shape, stat, np.float32)
    fn = (pyvkgrad.batch_normalization_training_grad if training
          else pyvkgrad.batch_normalization_grad)
    ref = (reference.batch_normalization_training_grad if training
           else reference.batch_normalization_grad)
    got = fn(*args, 1e-3, device=device)
    want = ref(*(a.astype(np.float64) for a in args), 1e-3)
    for g, w, name in zip(got, want, ("output_gradient", "scale", "bias")):
        assert g.shape == w.shape and g.dtype == np.float32, name
        # float32 accumulation over at most 140 elements per channel
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * np.abs(w).max(), err_msg=name)


@pytest.mark.parametrize("algorithm", ["gather", "atomic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_resample_grad_in_pieces(device, rng, monkeypatch, dtype, algorithm):
    """Cut along the axes that are not resampled (N, C); gather pieces equal the whole."""
    dy = random_array(rng, (3, 10, 16, 12), dtype)
    kwargs = dict(interpolation_mode="linear", algorithm=algorithm, device=device)
    whole = pyvkgrad.resample_grad(dy, (3, 10, 8, 5), **kwargs)
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", str(LIMIT))
    pieces = pyvkgrad.resample_grad(dy, (3, 10, 8, 5), **kwargs)
    assert pieces.dtype == dtype and pieces.shape == (3, 10, 8, 5)
    # Upsampling's backward: dX is the smaller side of the resampled axes, dY the larger one;
    # each piece must fit for both.
    if algorithm == "gather":
        np.testing.assert_array_equal(pieces, whole)
    else:  # atomic adds land in any order
        np.testing.assert_allclose(pieces, whole, rtol=1e-3 if dtype == np.float16 else 1e-5,
                                   atol=1e-3 if dtype == np.float16 else 1e-6)


def test_what_no_cut_fits_is_refused_before_device_work(device, rng, small_buffers,
                                                        monkeypatch):
    no_device_work(monkeypatch, device)
    x, dy, mean, var, scale = bn_inputs(rng, (4, 3, 16, 16), (1, 1, 1, 1), np.float32)
    with pytest.raises(ValueError, match=r"BATCH_NORMALIZATION_GRAD: tensor sizes exceed the "
                                         r"device's maximum storage buffer range.*reduce"):
        pyvkgrad.batch_normalization_grad(x, dy, mean, var, scale, 1e-5, device=device)
    with pytest.raises(ValueError, match=r"RESAMPLE_GRAD: tensor sizes exceed.*not resampled"):
        pyvkgrad.resample_grad(random_array(rng, (64, 64), np.float32), (32, 32), device=device)


def test_descriptors_beyond_the_limit_are_refused(device, small_buffers):
    desc = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (LIMIT // 4 + 1,))
    with pytest.raises(ValueError, match="exceeds the maximum storage buffer range"):
        device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))


def test_limit_override_is_validated(device, monkeypatch):
    assert device.max_buffer_bytes == device.info.max_storage_buffer_range
    monkeypatch.setenv("PYVKGRAD_MAX_BUFFER_BYTES", "512")
    with pytest.raises(ValueError, match="PYVKGRAD_MAX_BUFFER_BYTES"):
        device.max_buffer_bytes


def test_beyond_lavapipes_real_limit(device, rng):
    """A ReLU grad over 160 MiB tensors on lavapipe, whose buffers stop at 128 MiB."""
    limit = device.info.max_storage_buffer_range
    if limit > 2**28:
        pytest.skip(f"{device.name} binds {limit} bytes; this test is sized for lavapipe")
    n = limit // 4 * 5 // 4
    x = rng.standard_normal(n, dtype=np.float32)
    dy = rng.standard_normal(n, dtype=np.float32)
    out = pyvkgrad.activation_relu_grad(x, dy, device=device)
    np.testing.assert_array_equal(out, np.where(x > 0, dy, np.float32(0)))


def test_pieces_count_every_tensor_whole_along_uncut_axes(device, rng, small_buffers):
    """dY larger along one resampled axis, dX along the other: neither spans both, and each
    piece (cut along N and C only) must fit for both."""
    dy = random_array(rng, (4, 6, 16, 4), np.float32)
    sizes = (4, 6, 8, 40)
    out = pyvkgrad.resample_grad(dy, sizes, interpolation_mode="linear", device=device)
    want = reference.resample_grad(dy, sizes, interpolation_mode="linear")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@given(data=st.data())
def test_property_pieces_equal_the_whole(device, data):
    """Random ranks, sizes, resampled axes and limits: a ResampleGrad (gather) run in pieces
    is bitwise the whole, or it is refused when no cut can fit; a BatchNorm grad in pieces
    matches the whole to float32 accumulation."""
    rank = data.draw(st.integers(1, 4), label="rank")
    dy_sizes = data.draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank), label="dY")
    resampled = data.draw(st.lists(st.booleans(), min_size=rank, max_size=rank), label="axes")
    dx_sizes = [data.draw(st.integers(1, 9)) if r else n for n, r in zip(dy_sizes, resampled)]
    mode = data.draw(st.sampled_from(["nearest_neighbor", "linear"]), label="mode")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dy = random_array(rng, tuple(dy_sizes), np.float32)
    whole = pyvkgrad.resample_grad(dy, dx_sizes, interpolation_mode=mode, device=device)
    limit = data.draw(st.integers(1024, max(1024, 4 * max(dy.size, whole.size))), label="limit")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYVKGRAD_MAX_BUFFER_BYTES", str(limit))
        try:
            pieces = pyvkgrad.resample_grad(dy, dx_sizes, interpolation_mode=mode,
                                            device=device)
        except ValueError as e:
            assert "no cut along independent axes makes them fit" in str(e)
        else:
            np.testing.assert_array_equal(pieces, whole)

    stat = tuple(n if data.draw(st.booleans()) else 1 for n in dy_sizes)
    args = bn_inputs(rng, tuple(dy_sizes), stat, np.float32)
    whole = pyvkgrad.batch_normalization_training_grad(*args, 1e-3, device=device)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYVKGRAD_MAX_BUFFER_BYTES", str(limit))
        try:
            pieces = pyvkgrad.batch_normalization_training_grad(*args, 1e-3, device=device)
        except ValueError as e:
            assert "no cut along independent axes makes them fit" in str(e)
        else:
            for p, w in zip(pieces, whole):
                np.testing.assert_allclose(p, w, rtol=1e-4, atol=1e-4 * (np.abs(w).max() + 1))


def test_kernels_beyond_the_storage_buffer_limit_are_refused(device, monkeypatch, rng):
    """A device that lets a shader bind fewer storage buffers than a kernel of the plan binds
    (Vulkan guarantees 4; the BatchNorm grads' direct kernel binds 8, the sums 14) gets a clear
    error while the operator compiles, before any device work: Vulkan leaves such a binding
    undefined."""
    x, stat = (3, 5, 7, 11), (1, 5, 1, 1)
    monkeypatch.setattr(device, "info", dataclasses.replace(
        device.info, max_per_stage_descriptor_storage_buffers=6))
    # The one-call caches hold operators compiled under the device's real limit (a real
    # device's limits never change): start this test without them.
    device.cache_clear()
    f32 = lambda shape: pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, shape)  # noqa: E731
    desc = pyvkgrad.BatchNormalizationGradDesc(f32(x), f32(x), f32(stat), f32(stat), f32(stat),
                                               f32(x), f32(stat), f32(stat), 1e-5)
    refused = (r"^BATCH_NORMALIZATION_GRAD: kernel batch_normalization_training_sums binds more "
               r"storage buffers than .* allows a shader \(maxPerStageDescriptorStorageBuffers\)"
               r": expected <= 6, got 14$")
    with pytest.raises(RuntimeError, match=refused):
        device.compile(desc)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in (x, x, stat, stat, stat)]
    copies = [a.copy() for a in arrays]
    with pytest.raises(RuntimeError, match=refused):
        pyvkgrad.batch_normalization_grad(*arrays, 1e-5, device=device)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)
    relu = pyvkgrad.ActivationReluGradDesc(f32(x), f32(x), f32(x))  # 3 buffers: allowed
    device.compile(relu).close()


@pytest.mark.parametrize("operations, stages, missing, have", [
    (0x1, 0x20, "arithmetic", "basic"),  # all Vulkan 1.1 promises: no subgroupAdd
    (0xBF, 0x10, "basic, arithmetic", "none"),  # every operation, but not in compute shaders
])
def test_kernels_beyond_the_subgroup_operations_are_refused(device, rng, monkeypatch, operations,
                                                            stages, missing, have):
    """A device without subgroup arithmetic in compute shaders (Vulkan 1.1 promises only
    basic operations) gets a clear error for a kernel that uses subgroupAdd, while the
    operator compiles, before any device work; kernels that use no subgroup operations still
    compile. No kernel uses subgroup operations since the exact sums, so BatchNorm's sums
    kernel claims them here (as the reductions before the exact sums did)."""
    real = kernels.interface
    monkeypatch.setattr(kernels, "interface", lambda name: dataclasses.replace(
        real(name), capabilities=real(name).capabilities + (
            "GroupNonUniform", "GroupNonUniformArithmetic"))
        if name == "batch_normalization_training_sums" else real(name))
    fake = pyvkgrad.device.Device(dataclasses.replace(
        device.info, subgroup_operations=operations, subgroup_stages=stages))
    opened = []  # no device work: the Vulkan device is never opened for the refusals
    monkeypatch.setattr(pyvkgrad._context, "Runtime", lambda *a, **k: opened.append(a))
    x, stat = (3, 5, 7, 11), (1, 5, 1, 1)
    f32 = lambda shape: pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, shape)  # noqa: E731
    for cls, op in ((pyvkgrad.BatchNormalizationGradDesc, "BATCH_NORMALIZATION_GRAD"),
                    (pyvkgrad.BatchNormalizationTrainingGradDesc,
                     "BATCH_NORMALIZATION_TRAINING_GRAD")):
        desc = cls(f32(x), f32(x), f32(stat), f32(stat), f32(stat), f32(x), f32(stat), f32(stat),
                   1e-5)
        refused = (rf"^{op}: kernel batch_normalization_training_sums uses subgroup "
                   rf"operations that .* lacks in compute shaders \({missing}; "
                   rf"VkPhysicalDeviceSubgroupProperties\): expected basic, arithmetic, got "
                   rf"{have}$")
        with pytest.raises(RuntimeError, match=refused):
            fake.compile(desc)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in (x, x, stat, stat, stat)]
        with pytest.raises(RuntimeError, match=refused):
            getattr(pyvkgrad, op.lower())(*arrays, 1e-5, device=fake)
    assert opened == []
    monkeypatch.undo()
    try:
        fake.compile(pyvkgrad.ActivationReluGradDesc(f32(x), f32(x), f32(x)))
        assert kernels.interface("batch_normalization_training_sums").subgroup_features == ()
        short = (3, 5)  # 3 elements per channel: the direct kernel
        fake.compile(pyvkgrad.BatchNormalizationGradDesc(
            f32(short), f32(short), f32((1, 5)), f32((1, 5)), f32((1, 5)), f32(short),
            f32((1, 5)), f32((1, 5)), 1e-5))
    finally:
        fake.close()
