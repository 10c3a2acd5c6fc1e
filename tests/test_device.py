"""The device layer: tensors, compiled operators, recordings, barriers, errors."""

import time

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, kernels, reference
from pyvkgrad.device import DeviceError, get_device, one_call_cache

F32 = DataType.FLOAT32


def relu_op(device, sizes, dtype=F32):
    desc = TensorDesc(dtype, sizes)
    return device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))


def test_upload_round_trip_keeps_strides(device, rng):
    base = rng.standard_normal((4, 6)).astype(np.float16)
    view = base[:, ::2]
    t = device.upload(view)
    assert t.desc.strides == (6, 2)
    np.testing.assert_array_equal(t.numpy(), view)
    b = device.upload(np.broadcast_to(base[0], (4, 6)))
    assert b.desc.strides == (0, 1)
    np.testing.assert_array_equal(b.numpy(), np.broadcast_to(base[0], (4, 6)))


def test_recorded_chain_is_one_submission_with_barriers(device, rng):
    """Three dependent operators, one submission, a barrier before each dependent dispatch."""
    n = 1000
    op = relu_op(device, (n,))
    x = device.upload(rng.standard_normal(n).astype(np.float32))
    g = device.upload(rng.standard_normal(n).astype(np.float32))
    a, b, c = (device.empty(TensorDesc(F32, (n,))) for _ in range(3))
    with device.record() as rec:
        rec.execute(op, input_tensor=x, input_gradient_tensor=g, output_gradient_tensor=a)
        rec.execute(op, input_tensor=x, input_gradient_tensor=a, output_gradient_tensor=b)
        rec.execute(op, input_tensor=b, input_gradient_tensor=b, output_gradient_tensor=c)
        independent = device.empty(TensorDesc(F32, (n,)))
        rec.execute(op, input_tensor=x, input_gradient_tensor=g, output_gradient_tensor=independent)
    assert rec.labels.count("barrier") == 2, rec.labels
    xs, gs = x.numpy().astype(np.float64), g.numpy()
    want_a = reference.activation_relu_grad(xs, gs)
    want_b = reference.activation_relu_grad(xs, want_a)
    np.testing.assert_array_equal(c.numpy(), reference.activation_relu_grad(want_b, want_b))
    # Replay runs the same command buffer again on whatever the buffers now hold.
    x2 = rng.standard_normal(n).astype(np.float32)
    x.write(x2)
    rec.replay()
    want_a = reference.activation_relu_grad(x2, gs)
    np.testing.assert_array_equal(a.numpy(), want_a)
    np.testing.assert_array_equal(b.numpy(), reference.activation_relu_grad(x2, want_a))


def test_write_after_read_gets_a_barrier(device, rng):
    op = relu_op(device, (64,))
    x, g, out = (device.upload(rng.standard_normal(64).astype(np.float32)) for _ in range(3))
    with device.record() as rec:
        rec.execute(op, input_tensor=x, input_gradient_tensor=g, output_gradient_tensor=out)
        rec.execute(op, input_tensor=out, input_gradient_tensor=g, output_gradient_tensor=x)
    assert rec.labels == ["ACTIVATION_RELU_GRAD:activation_relu_grad_packed", "barrier",
                           "ACTIVATION_RELU_GRAD:activation_relu_grad_packed"]


def test_timestamps(device, rng):
    """One duration per step (dispatches and the barrier between them, as `labels`): each
    dispatch takes time, and together they fit in the replay's wall time."""
    n = 1 << 20
    op = relu_op(device, (n,))
    ts = [device.upload(rng.standard_normal(n).astype(np.float32)) for _ in range(4)]
    with device.record(timestamps=True) as rec:
        rec.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1],
                    output_gradient_tensor=ts[2])
        rec.execute(op, input_tensor=ts[2], input_gradient_tensor=ts[1],
                    output_gradient_tensor=ts[3])
    assert rec.labels == ["ACTIVATION_RELU_GRAD:activation_relu_grad_packed", "barrier",
                          "ACTIVATION_RELU_GRAD:activation_relu_grad_packed"]
    t0 = time.perf_counter_ns()
    rec.replay()
    wall = time.perf_counter_ns() - t0
    times = rec.kernel_times_ns()
    assert len(times) == 3
    assert times[0] > 0 and times[2] > 0 and times[1] >= 0, times
    assert sum(times) <= wall, (times, wall)
    with pytest.raises(RuntimeError, match="timestamps=True"):
        with device.record() as plain:
            plain.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1],
                          output_gradient_tensor=ts[2])
        plain.kernel_times_ns()


def test_execute_rejects_a_foreign_or_finished_recording(device, rng):
    op = relu_op(device, (8,))
    ts = [device.upload(np.ones(8, np.float32)) for _ in range(3)]
    with device.record() as rec:
        rec.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1], output_gradient_tensor=ts[2])
    with pytest.raises(RuntimeError, match="already submitted"):
        rec.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1], output_gradient_tensor=ts[2])
    with pytest.raises(TypeError, match="CompiledOperator"):
        device.record().execute("relu")


def test_update_push_constants_refuses_other_constant_tables(device, rng):
    """A descriptor whose plan differs in the constant tables uploaded at compile time
    (ResampleGrad's coordinates for another scale) is refused, not replayed with the old
    tables; one that differs in nothing the kernels hold is taken."""
    f32 = DataType.FLOAT32
    dy = rng.standard_normal((1, 1, 8, 8)).astype(np.float32)
    dy_desc, dx_desc = TensorDesc(f32, dy.shape), TensorDesc(f32, (1, 1, 4, 4))

    def desc(scale):
        return pyvkgrad.ResampleGradDesc(dy_desc, dx_desc, "linear", (1.0, 1.0, scale, scale),
                                         (0.5,) * 4, (-0.5,) * 4)

    op = device.compile(desc(2.0))
    tdy, tdx = device.upload(dy), device.empty(dx_desc)
    with device.record() as rec:
        rec.execute(op, input_gradient_tensor=tdy, output_gradient_tensor=tdx)
    for scale in (1.9, 2.1):
        with pytest.raises(ValueError, match="more than push-constant scalars"):
            rec.update_push_constants(op, desc(scale))
    rec.update_push_constants(op, desc(2.0))
    rec.replay()
    want = pyvkgrad.resample_grad(dy, (1, 1, 4, 4), interpolation_mode="linear",
                                  scales=(1.0, 1.0, 2.0, 2.0), input_pixel_offsets=(0.5,) * 4,
                                  output_pixel_offsets=(-0.5,) * 4, device=device)
    assert np.array_equal(tdx.numpy(), want)


def test_read_back_checks_its_tensors_and_keeps_their_contents(device):
    """read_back of a tensor no operator writes gives back what it holds (a run uploads it
    first where the host wrote it), not the device's stale memory; a tensor of another
    Device object or no tensor at all is refused before any work."""
    op = relu_op(device, (4,))
    ts = [device.upload(np.full(4, v, np.float32)) for v in (1.0, 2.0, 3.0)]
    other = device.upload(np.full(4, 7.0, np.float32))
    other.write(np.full(4, 8.0, np.float32))  # (staging newer than the device's copy)
    with device.record() as rec:
        rec.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1],
                    output_gradient_tensor=ts[2])
        rec.read_back([ts[2], other])
        with pytest.raises(TypeError, match="needs DeviceTensors"):
            rec.read_back([np.zeros(3)])
        second = pyvkgrad.device.Device(device.info)
        try:
            with pytest.raises(ValueError, match="another Device"):
                rec.read_back([second.upload(np.zeros(4, np.float32))])
            # Two Device objects of one GPU share its name: the errors say which is which.
            elsewhere = second.upload(np.zeros(4, np.float32))
            with pytest.raises(ValueError, match="InputTensor is on another Device object"):
                op(input_tensor=elsewhere, input_gradient_tensor=ts[1],
                   output_gradient_tensor=ts[2])
            with pytest.raises(ValueError, match="compiled for another Device object"):
                with second.record() as other_rec:
                    other_rec.execute(op, input_tensor=ts[0], input_gradient_tensor=ts[1],
                                      output_gradient_tensor=ts[2])
        finally:
            second.close()
    np.testing.assert_array_equal(ts[2].numpy(), np.full(4, 2.0))
    np.testing.assert_array_equal(other.numpy(), np.full(4, 8.0))
    other.write(np.full(4, 9.0, np.float32))
    rec.replay()
    np.testing.assert_array_equal(other.numpy(), np.full(4, 9.0))


def test_one_call_layout_index_is_bounded(device):
    """Arrays of many layouts can give one descriptor (windows of wider and wider arrays,
    packed alike; bounds equal in float32): the cache's index of layouts stays bounded while
    their one problem stays cached (it grew by one entry a call), and the calls stay right."""
    from pyvkgrad.one_call_cache import ONE_CALL_CACHE_LAYOUTS

    cache = one_call_cache(device)
    buf = np.arange(4 * 700, dtype=np.float32) - 1000.0
    g = np.ones((4, 5), np.float32)
    for width in range(5, 5 + ONE_CALL_CACHE_LAYOUTS + 40):
        x = np.lib.stride_tricks.as_strided(buf, (4, 5), (4 * width, 4))
        got = pyvkgrad.activation_relu_grad(x, g, device=device)
        np.testing.assert_array_equal(got, reference.activation_relu_grad(x, g))
    assert len(cache._layouts) <= ONE_CALL_CACHE_LAYOUTS


def test_closed_tensor_is_refused(device):
    t = device.upload(np.ones(4, np.float32))
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.numpy()


def test_device_selection_errors():
    n = len(pyvkgrad.devices())
    with pytest.raises(ValueError, match=f"device index {n} is out of range"):
        get_device(n)
    with pytest.raises(ValueError, match="no Vulkan device name contains"):
        get_device("no-such-gpu")
    with pytest.raises(TypeError):
        get_device(1.5)
    # A string of digits is an index (the command line's --device), never part of a name:
    # lavapipe's "llvmpipe (LLVM 15.0.6 ...)" contains "1".
    assert get_device("0") is get_device(0) and get_device(" 0 ") is get_device(0)
    with pytest.raises(ValueError, match=f"device index {n} is out of range"):
        get_device(str(n))


def test_pyvkgrad_device_env_selects(monkeypatch, device):
    monkeypatch.setenv("PYVKGRAD_DEVICE", "0")
    assert pyvkgrad.default_device() is pyvkgrad.devices()[0]
    monkeypatch.setenv("PYVKGRAD_DEVICE", device.name.split()[0])
    assert pyvkgrad.default_device() is device


def test_too_large_for_device_is_refused_before_device_work(device):
    limit = device.info.max_storage_buffer_range
    desc = TensorDesc(F32, (limit // 4 + 16,))
    with pytest.raises(ValueError, match="exceeds the maximum storage buffer range"):
        device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))


def test_corrupt_or_missing_kernel(monkeypatch):
    kernels.clear_caches()
    real = kernels.resources.files

    class Fake:
        def __init__(self, path):
            self.path = path

        def joinpath(self, name):
            return Fake(name) if name.endswith(".spv") else real("pyvkgrad").joinpath(name)

        def read_bytes(self):
            raise FileNotFoundError(self.path)

    monkeypatch.setattr(kernels.resources, "files", lambda pkg: Fake(pkg))
    with pytest.raises(kernels.KernelError, match="activation_relu_grad.spv is missing"):
        kernels.spirv("activation_relu_grad")
    kernels.clear_caches()
    monkeypatch.setattr(kernels, "resources", type("R", (), {"files": staticmethod(
        lambda pkg: type("F", (), {"joinpath": lambda self, n: type("B", (), {
            "read_bytes": lambda self: b"garbage!", "read_text": lambda self:
            real("pyvkgrad").joinpath(n).read_text()})()})())}))
    with pytest.raises(kernels.KernelError, match="corrupt"):
        kernels.spirv("activation_relu_grad")
    kernels.clear_caches()
    monkeypatch.undo()
    with pytest.raises(kernels.KernelError, match="no kernel named"):
        kernels.spirv("no_such_kernel")


def test_wait_spin_setting(monkeypatch, device):
    """Fence polling is off on a CPU device by default, follows PYVKGRAD_WAIT_SPIN_US, and a
    bad value is refused with the variable named."""
    from pyvkgrad._environment import DEFAULT_WAIT_SPIN_US
    monkeypatch.delenv("PYVKGRAD_WAIT_SPIN_US", raising=False)
    assert device.wait_spin_us == (0 if device.info.device_type == "cpu"
                                   else DEFAULT_WAIT_SPIN_US)
    monkeypatch.setenv("PYVKGRAD_WAIT_SPIN_US", "300")
    assert device.wait_spin_us == 300
    for bad in ("-1", "1.5", "soon"):
        monkeypatch.setenv("PYVKGRAD_WAIT_SPIN_US", bad)
        with pytest.raises(ValueError, match="PYVKGRAD_WAIT_SPIN_US"):
            device.wait_spin_us


@pytest.mark.parametrize("spin_us", ["0", "1", "100000"])
def test_polled_and_blocking_waits_give_the_same_results(monkeypatch, device, rng, spin_us):
    """The patched kp reuses one fence per sequence and may poll it before blocking: replays
    that finish within, and beyond, the polling budget all see completed work."""
    from pyvkgrad.runtime import kp
    assert hasattr(kp.Sequence, "set_wait_spin"), "kp lacks pyvkgrad's patch (tools/kp-0.9.0.patch)"
    monkeypatch.setenv("PYVKGRAD_WAIT_SPIN_US", spin_us)
    n = 300_001
    op = relu_op(device, (n,))
    x = device.upload(rng.standard_normal(n).astype(np.float32))
    g = device.upload(rng.standard_normal(n).astype(np.float32))
    a, b = device.empty(TensorDesc(F32, (n,))), device.empty(TensorDesc(F32, (n,)))
    with device.record() as rec:
        rec.execute(op, input_tensor=x, input_gradient_tensor=g, output_gradient_tensor=a)
        rec.execute(op, input_tensor=x, input_gradient_tensor=a, output_gradient_tensor=b)
    want = reference.activation_relu_grad(x.numpy(), g.numpy())
    for _ in range(3):
        rec.replay()
        np.testing.assert_array_equal(b.numpy(), want)


def test_local_size_override_is_validated(monkeypatch, device):
    monkeypatch.setenv("PYVKGRAD_LOCAL_SIZE", "64")
    assert device.limits.local_size == 64
    for bad in ("0", "48", "wide"):
        monkeypatch.setenv("PYVKGRAD_LOCAL_SIZE", bad)
        with pytest.raises(ValueError, match="PYVKGRAD_LOCAL_SIZE must be a power of two"):
            device.limits


def test_float16_rte_follows_the_device_and_the_variable(monkeypatch, device):
    """Limits.float16_rte (the kernels' rte16 SPIR-V, float16 rounded by the device under
    RoundingModeRTE): only where the device reports it can (rounding_mode_rte_float16), unless
    PYVKGRAD_FLOAT16_RTE=0. The variable re-plans, as the other limits' do."""
    import dataclasses
    # (Limits are cached by the variables' values alone: monkeypatch puts the device's own
    # cached limits back at the end, with its info.)
    monkeypatch.setattr(device._context, "_limits", None)
    for can in (False, True):
        monkeypatch.setattr(device._context, "_limits", None)
        monkeypatch.setattr(device, "info", dataclasses.replace(
            device.info, rounding_mode_rte_float16=can))
        for setting, want in ((None, can), ("0", False), ("1", can), ("", can)):
            if setting is None:
                monkeypatch.delenv("PYVKGRAD_FLOAT16_RTE", raising=False)
            else:
                monkeypatch.setenv("PYVKGRAD_FLOAT16_RTE", setting)
            assert device.limits.float16_rte is want, (can, setting)


def test_compile_with_other_limits(device, rng):
    """`compile(desc, limits)` plans with the limits given (explorations of plan choices) and
    leaves the device's own as they are."""
    import dataclasses
    before = device.limits
    narrow = dataclasses.replace(before, local_size=32, max_workgroups=3)
    desc = TensorDesc(F32, (5000,))
    op = device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc), narrow)
    assert [(d.workgroups, d.constant("WG")) for d in op.plan.dispatches] == [(3, 32)]
    assert device.limits == before
    x, dy = rng.standard_normal((2, 5000)).astype(np.float32)
    out = device.empty(desc)
    op(input_tensor=device.upload(x), input_gradient_tensor=device.upload(dy),
       output_gradient_tensor=out)
    np.testing.assert_array_equal(out.numpy(), reference.activation_relu_grad(x, dy))


def test_one_call_inputs_mapped_or_staged_give_the_same_bits(monkeypatch, device, rng):
    """The one-call functions write their inputs straight into mapped memory when it is device
    memory (lavapipe's is: one memory type for everything), else into staging; outputs always
    come back through staging. Both paths give the same bits, and the cache keeps each."""
    from pyvkgrad import runtime
    mapped = device.runtime().mapped_device_local
    if device.info.device_type == "cpu":
        assert mapped, "lavapipe's memory is device-local and host-visible"
    x = rng.standard_normal((3, 257)).astype(np.float16)
    dy = rng.standard_normal((3, 257)).astype(np.float16)
    want = reference.activation_relu_grad(x, dy)
    results = {}
    for kind in ("mapped", "staged"):
        if kind == "staged":
            monkeypatch.setattr(runtime.Runtime, "mapped_device_local",
                                property(lambda self: False))
        device.close()
        for _ in range(3):  # a miss, then hits that write the inputs again
            results[kind] = pyvkgrad.activation_relu_grad(x, dy, device=device)
            np.testing.assert_array_equal(results[kind], want)
        entry = one_call_cache(device).entries()[-1]
        kinds = {n: t.storage.buffer.kind for n, t in entry.tensors.items()}
        assert kinds["output_gradient_tensor"] == "staged"
        expect = kind if (mapped or kind == "staged") else "staged"
        assert kinds["input_tensor"] == kinds["input_gradient_tensor"] == expect
    device.close()
    assert results["mapped"].tobytes() == results["staged"].tobytes()


def test_one_call_cache_follows_the_limit_variables(monkeypatch, device, rng):
    """A cache hit skips building the descriptor and the limits, so it is keyed on the
    variables that decide the limits: changing one between calls plans again (a miss, with
    the new workgroup size), and changing it back finds the first problem (a hit)."""
    monkeypatch.delenv("PYVKGRAD_LOCAL_SIZE", raising=False)
    device.close()
    x = rng.standard_normal(1000).astype(np.float32)
    want = reference.activation_relu_grad(x, x)
    default = device.limits.local_size
    before = device.cache_info().misses
    for local_size, misses in ((None, 1), ("64", 2), (None, 2), ("64", 2)):
        if local_size is None:
            monkeypatch.delenv("PYVKGRAD_LOCAL_SIZE", raising=False)
        else:
            monkeypatch.setenv("PYVKGRAD_LOCAL_SIZE", local_size)
        np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(x, x, device=device), want)
        assert device.cache_info().misses - before == misses
        entry = one_call_cache(device).entries()[-1]  # the one just used
        assert dict(entry.op.plan.dispatches[0].constants)["WG"] == int(local_size or default)
    # A replaced os.environ (mock.patch("os.environ", ...)) is seen as well.
    import os
    monkeypatch.setattr(os, "environ", {**os.environ, "PYVKGRAD_LOCAL_SIZE": "32"})
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(x, x, device=device), want)
    assert device.cache_info().misses - before == 3
    entry = one_call_cache(device).entries()[-1]
    assert dict(entry.op.plan.dispatches[0].constants)["WG"] == 32
    device.close()


def test_a_0d_array_uploads_and_writes_as_one_element(device):
    """`upload` takes a 0-d array as a {1} tensor; `write` takes one back into it (it refused
    the shape () that upload had accepted)."""
    t = device.upload(np.array(2.5, np.float32))
    assert t.shape == (1,)
    t.write(np.array(-1.0, np.float32))
    np.testing.assert_array_equal(t.numpy(), [-1.0])
    with pytest.raises(ValueError, match="shape must equal"):
        device.upload(np.zeros(2, np.float32)).write(np.array(1.0, np.float32))
