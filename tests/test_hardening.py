"""Hardening: property tests, descriptor fuzzing, memory, threads and faults (every operator).

Operators are listed once in OPERATORS below; each entry knows how to make a random valid
call and its oracle, so a new operator joins every hardening test by adding one entry.
"""

import gc
import os
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, reference


# ---- one entry per operator: (name, make_call(rng, shape, dtype) -> (device_fn, oracle_fn)) ----

def relu_call(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return (lambda dev: pyvkgrad.activation_relu_grad(x, dy, device=dev),
            lambda: reference.activation_relu_grad(x, dy))


def resample_call(rng, shape, dtype):
    shape = shape[:4]
    dy = rng.standard_normal(shape).astype(dtype)
    sizes = tuple(int(rng.integers(1, s + 3)) for s in shape)
    mode = ("nearest_neighbor", "linear")[int(rng.integers(2))]
    scales = tuple(float(np.float32(o) / np.float32(i)) for o, i in zip(shape, sizes))
    algorithm = ("gather", "atomic")[int(rng.integers(2))]
    return (lambda dev: pyvkgrad.resample_grad(dy, sizes, interpolation_mode=mode,
                                               algorithm=algorithm, device=dev),
            lambda: reference.resample_grad(dy, sizes, mode, scales, (0.5,) * len(shape),
                                            (-0.5,) * len(shape)))


def batch_normalization_call(training):
    def make(rng, shape, dtype):
        x = rng.standard_normal(shape).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        stats_shape = tuple(s if rng.random() < 0.4 else 1 for s in shape)
        mean = rng.standard_normal(stats_shape).astype(dtype)
        variance = rng.uniform(0.5, 2.0, stats_shape).astype(dtype)
        scale = rng.standard_normal(stats_shape).astype(dtype)
        fn = (pyvkgrad.batch_normalization_training_grad if training
              else pyvkgrad.batch_normalization_grad)
        ref = (reference.batch_normalization_training_grad if training
               else reference.batch_normalization_grad)
        return (lambda dev: fn(x, dy, mean, variance, scale, 1e-3, device=dev),
                lambda: ref(x, dy, mean, variance, scale, 1e-3))
    return make


OPERATORS = {"activation_relu_grad": relu_call, "resample_grad": resample_call,
             "batch_normalization_grad": batch_normalization_call(False),
             "batch_normalization_training_grad": batch_normalization_call(True)}


def assert_close(got, want, dtype):
    got = [got] if isinstance(got, np.ndarray) else list(got)
    want = [want] if isinstance(want, np.ndarray) else list(want)
    tol = 2e-2 if dtype == np.float16 else 1e-5
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {i} shape"
        assert g.dtype == dtype, f"output {i} dtype"
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol * scale,
                                   err_msg=f"output {i}")


# ---- property tests ----

def strided_array(data, shape, dtype):
    """A random array of `shape` as a plain, transposed, sliced or broadcast view."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    kind = data.draw(st.sampled_from(["packed", "transposed", "sliced", "broadcast"]))
    if kind == "transposed":
        return rng.standard_normal(shape[::-1]).astype(dtype).T
    if kind == "sliced":
        return rng.standard_normal(tuple(s * 2 for s in shape)).astype(dtype)[
            tuple(slice(None, None, 2) for _ in shape)]
    if kind == "broadcast":
        axis = data.draw(st.integers(0, len(shape) - 1))
        small = list(shape)
        small[axis] = 1
        return np.broadcast_to(rng.standard_normal(small).astype(dtype), shape)
    return rng.standard_normal(shape).astype(dtype)


@given(data=st.data())
def test_property_activation_relu_grad(device, data):
    rank = data.draw(st.integers(1, 8))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    x = strided_array(data, shape, dtype)
    dy = strided_array(data, shape, dtype)
    got = pyvkgrad.activation_relu_grad(x, dy, device=device)
    np.testing.assert_array_equal(got, reference.activation_relu_grad(x, dy).astype(dtype))


# ---- descriptor fuzzing ----

@given(data=st.data())
def test_fuzzed_descriptors_never_reach_the_device_unless_valid(device, data):
    """Random descriptors either raise TypeError/ValueError at construction, or run and give
    the oracle's answer for the elements their strides address."""
    # Mostly plausible values, so that both outcomes are common.
    rank = data.draw(st.sampled_from([0, 9] + list(range(1, 9)) * 3))
    sizes = data.draw(st.lists(st.sampled_from([-1, 0] + [1, 2, 3, 4] * 6), min_size=rank,
                               max_size=rank))
    dtype = data.draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16, 0, 3]))

    def strides():
        length = data.draw(st.sampled_from([rank] * 6 + [rank + 1]))
        return data.draw(st.one_of(st.none(), st.lists(st.sampled_from([-1] + list(range(41)) * 3),
                                                        min_size=length, max_size=length)))
    try:
        descs = [TensorDesc(dtype, tuple(sizes), strides()) for _ in range(3)]
        op_desc = pyvkgrad.ActivationReluGradDesc(*descs)
    except (TypeError, ValueError):
        return
    op = device.compile(op_desc)
    rng = np.random.default_rng(0)
    np_dtype = descs[0].data_type.numpy_dtype
    bufs = [rng.standard_normal(d.element_span).astype(np_dtype) for d in descs[:2]]
    item = np_dtype.itemsize
    # Each input's elements as its descriptor addresses them (zero or overlapping strides
    # repeat a buffer element), so the values agree wherever elements share memory.
    x, dy = (np.lib.stride_tricks.as_strided(b, d.sizes, [s * item for s in d.element_strides])
             for d, b in zip(descs[:2], bufs))
    tensors = []
    for d, values in zip(descs[:2], (x, dy)):
        t = device.empty(d)
        t.write(values)
        tensors.append(t)
    out = device.empty(descs[2])
    op(input_tensor=tensors[0], input_gradient_tensor=tensors[1], output_gradient_tensor=out)
    np.testing.assert_array_equal(out.numpy(), reference.activation_relu_grad(x, dy).astype(np_dtype))


# ---- memory ----

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def growth_bytes(device, step, warm_up, calls):
    """(host, device) memory gained over `calls` calls of `step`, after `warm_up` calls (caches
    and allocator pools fill there). Device memory comes from VK_EXT_memory_budget; a CPU device
    without it (lavapipe) allocates its device memory in our process, so the resident size
    counts it, and its device figure is 0."""
    def sample():
        gc.collect()
        used = device.memory_in_use()
        if used is None:
            assert device.info.device_type == "cpu", \
                f"{device.name} reports no VK_EXT_memory_budget: device memory cannot be measured"
            used = 0
        return rss_bytes(), used

    for _ in range(warm_up):
        step()
    host0, dev0 = sample()
    for _ in range(calls):
        step()
    host1, dev1 = sample()
    return host1 - host0, dev1 - dev0


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_ten_thousand_calls_keep_memory_flat(device, name):
    """Host memory (and device memory: lavapipe's lives in host memory too) stays flat over
    10,000 one-call invocations with the same shapes."""
    rng = np.random.default_rng(0)
    call, _ = OPERATORS[name](rng, (4, 5), np.float32)
    host, dev = growth_bytes(device, lambda: call(device), 200, 10_000)
    assert host < 8 * 2**20, f"{name}: resident memory grew by {host / 2**20:.1f} MiB"
    assert dev < 8 * 2**20, f"{name}: device memory grew by {dev / 2**20:.1f} MiB"


def test_tensors_and_operators_release_deterministically(device):
    """Creating and closing device tensors and compiled operators in a loop keeps memory flat;
    garbage collection releases unclosed ones as well."""
    x = np.ones((256, 256), np.float32)  # 256 KiB per tensor, plus its staging twin
    desc = TensorDesc(DataType.FLOAT32, x.shape)

    def cycle(close):
        t = device.upload(x)
        out = device.empty(desc)
        op = device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
        op(input_tensor=t, input_gradient_tensor=t, output_gradient_tensor=out)
        out.numpy()
        if close:
            with t, out, op:
                pass

    for close in (True, False):
        host, dev = growth_bytes(device, lambda: cycle(close), 20, 300)
        assert host < 16 * 2**20, f"close={close}: grew by {host / 2**20:.1f} MiB"
        assert dev < 16 * 2**20, f"close={close}: device memory grew by {dev / 2**20:.1f} MiB"


# ---- threads ----

def test_eight_threads_on_one_device(device):
    """Calls on one device are serialised by its lock; every thread gets its own right answer."""
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for i in range(15):
                name = sorted(OPERATORS)[(seed + i) % len(OPERATORS)]
                shape = tuple(rng.integers(1, 9, size=rng.integers(1, 5)))
                dtype = [np.float32, np.float16][i % 2]
                call, oracle = OPERATORS[name](rng, shape, dtype)
                assert_close(call(device), oracle(), dtype)
        except Exception as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ---- faults ----

def test_non_finite_inputs_follow_ieee(device):
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    dy = np.array([1.0, np.nan, 2.0, np.inf], np.float32)
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(x, dy, device=device),
                                  [0.0, np.nan, 0.0, np.inf])


@given(data=st.data())
def test_property_resample_grad(device, data):
    rank = data.draw(st.integers(1, 4))
    dy_shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    sizes = tuple(data.draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    floats = st.floats(-1.0, 1.0, allow_nan=False, width=32)
    scales = tuple(data.draw(st.lists(st.floats(0.25, 4.0, width=32), min_size=rank,
                                      max_size=rank)))
    in_off = tuple(data.draw(st.lists(floats, min_size=rank, max_size=rank)))
    out_off = tuple(data.draw(st.lists(floats, min_size=rank, max_size=rank)))
    mode = data.draw(st.sampled_from(["nearest_neighbor", "linear"]))
    rounding = data.draw(st.sampled_from([None, "decreasing", "increasing"]))
    algorithm = data.draw(st.sampled_from(["gather", "atomic"]))
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    dy = strided_array(data, dy_shape, dtype)
    got = pyvkgrad.resample_grad(dy, sizes, interpolation_mode=mode, scales=scales,
                                 input_pixel_offsets=in_off, output_pixel_offsets=out_off,
                                 rounding_direction=rounding, algorithm=algorithm, device=device)
    args = (sizes, mode, scales, in_off, out_off, rounding)
    want = reference.resample_grad(dy, *args)
    magnitude = reference.resample_grad(np.abs(dy.astype(np.float64)), *args)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 2.0**-10 if dtype == np.float16 else 1e-5
    assert np.all(np.abs(got - want) <= tol * magnitude + 2.0**-24)


@given(data=st.data())
def test_property_batch_normalization_grads(device, data):
    rank = data.draw(st.integers(1, 8))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    kept = data.draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    stats_shape = tuple(s if k else 1 for s, k in zip(shape, kept))
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    training = data.draw(st.booleans())
    x, dy = strided_array(data, shape, dtype), strided_array(data, shape, dtype)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    mean = rng.standard_normal(stats_shape).astype(dtype)
    variance = rng.uniform(0.5, 2.0, stats_shape).astype(dtype)
    scale = rng.standard_normal(stats_shape).astype(dtype)
    epsilon = data.draw(st.sampled_from([0.0, 1e-5, 0.5]))
    fn = pyvkgrad.batch_normalization_training_grad if training else pyvkgrad.batch_normalization_grad
    ref = (reference.batch_normalization_training_grad if training
           else reference.batch_normalization_grad)
    got = fn(x, dy, mean, variance, scale, epsilon, device=device)
    assert_close(got, ref(x, dy, mean, variance, scale, epsilon), dtype)
