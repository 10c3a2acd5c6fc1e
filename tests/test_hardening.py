"""Hardening: property tests, descriptor fuzzing, memory, threads, processes and faults, for
every operator of the table (pyvkgrad/operators.py): a new operator joins each of them through its
record (case generator, oracle, tolerance, descriptor and its parameters' examples).
"""

import dataclasses
import gc
import os
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, operators
from pyvkgrad.operators import BY_NAME, OPERATORS
from cases import VIEWS, view_of

NAMES = [record.name for record in OPERATORS]


# ---- property tests ----

@given(data=st.data())
def test_property_every_operator_against_the_oracle(device, data):
    """Any operator, rank, sizes and data type, each array argument through any layout
    (packed, transposed, sliced, broadcast): the oracle's result within the operator's
    tolerance."""
    record = BY_NAME[data.draw(st.sampled_from(NAMES), label="operator")]
    rank = data.draw(st.integers(1, record.max_rank), label="rank")
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank),
                            label="shape"))
    dtype = data.draw(st.sampled_from(record.dtypes), label="dtype")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    case = record.make_case(rng, shape, dtype)
    args = [view_of(a, data.draw(st.sampled_from(VIEWS)), data.draw(st.integers(0, a.ndim - 1)))
            if isinstance(a, np.ndarray) else a for a in case.args]
    got = record.run(operators.Case(tuple(args), case.kwargs, case.options), device)
    operators.assert_close(record, got, args, case.kwargs, dtype)


# ---- descriptor fuzzing ----

def tensor_fields(descriptor):
    return [f.name for f in dataclasses.fields(descriptor) if f.name.endswith("_tensor")]


def fuzzed_tensor(data, desc: TensorDesc, tensors: int):
    """`desc` as it is, or with other strides, sizes, rank or data type: about one change per
    descriptor of `tensors` tensors, so that valid and invalid descriptors are both common.
    An optional tensor left out (None, as ROI_ALIGN_GRAD's OutputROIGradientTensor) stays out."""
    if desc is None:
        return None
    change = data.draw(st.sampled_from(["none"] * (2 * tensors) + ["strides"] * 3
                                       + ["sizes", "type"]))
    rank = desc.rank
    if change == "strides":  # plausible: any strides, or one too many
        length = data.draw(st.sampled_from([rank] * 6 + [rank + 1]))
        return TensorDesc(desc.data_type, desc.sizes, data.draw(st.lists(
            st.sampled_from([-1] + list(range(41)) * 3), min_size=length, max_size=length)))
    if change == "sizes":
        rank = data.draw(st.sampled_from([0, 9] + [rank] * 8 + list(range(1, 9))))
        return TensorDesc(desc.data_type, tuple(data.draw(st.lists(
            st.sampled_from([-1, 0] + [1, 2, 3, 4] * 6), min_size=rank, max_size=rank))))
    if change == "type":
        return TensorDesc(data.draw(st.sampled_from([DataType.FLOAT32, DataType.FLOAT16, 0, 3])),
                          desc.sizes, desc.strides)
    return desc


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_fuzzed_descriptors_never_reach_the_device_unless_valid(device, name, data):
    """A valid descriptor with random changes (tensors' strides, sizes, rank and data type;
    scalar fields from the record's valid and invalid examples) either raises TypeError or
    ValueError at construction, or runs and gives the oracle's answer for the elements its
    strides address, within the operator's tolerance."""
    record = BY_NAME[name]
    rank = data.draw(st.integers(1, record.max_rank), label="rank")
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    dtype = data.draw(st.sampled_from(record.dtypes))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    valid = record.describe(record.make_case(rng, shape, dtype))
    changes = {}
    try:
        fields = tensor_fields(record.descriptor)
        for field in fields:
            changes[field] = fuzzed_tensor(data, getattr(valid, field), len(fields))
        for field, (good, bad) in record.parameter_examples(rank).items():
            if data.draw(st.integers(0, 4), label=f"change {field}") == 0:
                changes[field] = data.draw(st.sampled_from(good + bad), label=field)
        desc = dataclasses.replace(valid, **changes)
    except (TypeError, ValueError):
        return
    op = device.compile(desc)
    fields = dict(desc.tensor_fields())
    values, tensors = {}, {}
    for name, (d, access) in fields.items():
        tensors[name] = device.empty(d)
        if access == "read":
            # The elements as the descriptor addresses them (zero or overlapping strides
            # repeat a buffer element), so the values agree wherever elements share memory.
            np_dtype = d.data_type.numpy_dtype
            if d.data_type.is_float:
                buffer = rng.uniform(0.25, 2.0, d.element_span) * rng.choice([-1, 1],
                                                                             d.element_span)
            else:
                info = np.iinfo(np_dtype)  # any integers of the type
                buffer = rng.integers(info.min, info.max, d.element_span, endpoint=True)
            values[name] = np.lib.stride_tricks.as_strided(
                buffer.astype(np_dtype), d.sizes, [s * np_dtype.itemsize for s in d.element_strides])
            tensors[name].write(values[name])
    op(**tensors)
    got = tuple(tensors[name].numpy() for name, (_, access) in fields.items() if access != "read")
    args, kwargs = record.call(desc, values)
    # The operator's data type: its first tensor's (every operator's tensors share one).
    operators.assert_close(record, got, args, kwargs,
                           desc.tensor_fields()[0][1][0].data_type.numpy_dtype)


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


@pytest.mark.parametrize("name", NAMES)
def test_ten_thousand_calls_keep_memory_flat(device, name):
    """Host memory (and device memory: lavapipe's lives in host memory too) stays flat over
    10,000 one-call invocations with the same shapes."""
    record = BY_NAME[name]
    case = record.make_case(np.random.default_rng(0), (4, 5), record.dtypes[0])
    host, dev = growth_bytes(device, lambda: record.run(case, device), 200, 10_000)
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
                record = OPERATORS[(seed + i) % len(OPERATORS)]
                shape = tuple(int(n) for n in rng.integers(1, 9, size=rng.integers(1, 5)))
                dtype = record.dtypes[i % len(record.dtypes)]
                case = record.make_case(rng, shape, dtype)
                operators.assert_close(record, record.run(case, device), case.args,
                                       case.kwargs, dtype)
        except Exception as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


# ---- processes ----

# Run in a fresh interpreter (the suite's own process has threads a fork would not copy): uses
# the device in the parent (or not: "before"), forks, and reports how the child fares.
FORK_SCRIPT = r"""
import multiprocessing, os, sys, threading
import numpy as np
import pyvkgrad
from pyvkgrad import DataType, TensorDesc, reference
from pyvkgrad.device import context_of

x = np.arange(-8, 8, dtype=np.float32)
want = reference.activation_relu_grad(x, x)
device = pyvkgrad.default_device()
def relu():
    return pyvkgrad.activation_relu_grad(x, x, device=device)
if sys.argv[1] == "after":
    relu()
    d = TensorDesc(DataType.FLOAT32, x.shape)
    op = device.compile(pyvkgrad.ActivationReluGradDesc(d, d, d))
    t, out = device.upload(x), device.empty(d)
    op(input_tensor=t, input_gradient_tensor=t, output_gradient_tensor=out)
    # Another thread holds the device's lock at the fork (it never releases it in the child).
    held, done = threading.Event(), threading.Event()
    def hold():
        with context_of(device).lock:
            held.set()
            done.wait()
    threading.Thread(target=hold).start()
    held.wait()
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "after":
        calls = {"one-call": relu,
                 "operator": lambda: op(input_tensor=t, input_gradient_tensor=t,
                                        output_gradient_tensor=out),
                 "numpy": out.numpy, "upload": lambda: device.upload(x),
                 "compile": lambda: device.compile(pyvkgrad.ActivationReluGradDesc(d, d, d)),
                 "record": device.record}
        for name, call in calls.items():
            try:
                call()
                print("child", name, "ran")
            except RuntimeError as e:
                assert "forked child cannot use it" in str(e), e
                print("child", name, "refused")
    else:
        assert np.array_equal(relu(), want)
        print("child one-call ran")
    sys.stdout.flush()
    sys.exit(0)  # the interpreter's exit: no destructor may call the driver
_, status = os.waitpid(pid, 0)
print("child exit status", os.waitstatus_to_exitcode(status))
if sys.argv[1] == "after":
    done.set()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        try:
            pool.apply_async(relu).get(timeout=60)
        except RuntimeError:
            print("pool worker refused")
assert np.array_equal(relu(), want)
print("parent ran")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
@pytest.mark.parametrize("when", ["after", "before"])
def test_forked_child(device, when):
    """A child forked after the parent used the device cannot use it (the driver's threads are
    not copied: a submission would wait forever): every use raises a RuntimeError that names
    the remedy, at once, and the child's exit calls no driver either. A child forked before
    the parent opened the device opens its own and works. The parent works on, either way."""
    import subprocess
    import sys
    from test_environment import SUBPROCESS_CWD
    out = subprocess.run([sys.executable, "-c", FORK_SCRIPT, when], capture_output=True,
                         text=True, timeout=120, cwd=SUBPROCESS_CWD)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    if when == "after":
        assert lines == [f"child {name} refused" for name in ("one-call", "operator", "numpy",
                                                               "upload", "compile",
                                                               "record")] + [
            "child exit status 0", "pool worker refused", "parent ran"], out.stderr
    else:
        assert lines == ["child one-call ran", "child exit status 0", "parent ran"], out.stderr


# ---- faults ----

def test_non_finite_inputs_follow_ieee(device):
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    dy = np.array([1.0, np.nan, 2.0, np.inf], np.float32)
    np.testing.assert_array_equal(pyvkgrad.activation_relu_grad(x, dy, device=device),
                                  [0.0, np.nan, 0.0, np.inf])


def _same_nan_and_values(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-5, atol=1e-6)


def test_zero_scalars_keep_non_finite_inputs(device):
    """A float scalar of 0 (a spatial scale, Beta1 = 0, 1 - Beta1 = 0 for Beta1 = 1, Alpha)
    times an Inf or NaN input is NaN, as IEEE arithmetic and the oracle have it: the kernels
    multiply by the scalar at run time (common.glsl's run_time), where a specialization
    constant 0 let llvmpipe fold the product to 0 and drop the Inf or NaN."""
    from pyvkgrad import reference
    # (the oracle's own 0 * Inf warnings are expected)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        _zero_scalar_cases(device, reference)


def _zero_scalar_cases(device, reference):
    inf, nan = np.inf, np.nan
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 4, 2)
    dy = np.array([1, 2, 3], np.float32).reshape(1, 1, 3, 1)
    batch = np.zeros(1, np.uint32)
    for corner in (-inf, nan):
        roi = np.array([[corner, 0.5, 1.5, 3.0]], np.float32)
        args = (x, dy, roi, batch, (1, 1, 4, 2))
        kwargs = dict(spatial_scale_x=0.0, roi_gradient=True)
        got = pyvkgrad.roi_align_grad(*args, **kwargs, device=device)
        want = reference.roi_align_grad(*args, **kwargs)
        for g, w in zip(got, want):
            _same_nan_and_values(g, w)
    ones = np.ones(2, np.float32)
    special = np.array([inf, nan], np.float32)
    for m, g, beta1 in ((ones, special, 1.0), (special, ones, 0.0)):
        args = (ones, m, ones, g, 3, 0.1, beta1, 0.999, 1e-8)
        for got, want in zip(pyvkgrad.adam_optimizer(*args, device=device),
                             reference.adam_optimizer(*args)):
            _same_nan_and_values(got, want)
    x = np.array([1.0, inf, 2.0, nan], np.float32).reshape(1, 4, 1, 1)
    dy = np.ones((1, 4, 1, 1), np.float32)
    for alpha in (0.0, -0.0):
        args = (x, dy, True, 3, alpha, 0.75, 1.0)
        _same_nan_and_values(
            pyvkgrad.local_response_normalization_grad(*args, device=device),
            reference.local_response_normalization_grad(*args))


def test_numbers_beyond_float64_and_uint32_are_refused_by_name(device, monkeypatch):
    """A FLOAT field given an int beyond float64 (2^1024) or a finite long double beyond it
    raised a bare OverflowError (or became Inf); a pooling spacing of 2^32 or more, with a
    window of one cell, reached the kernel's constants. Each is now a ValueError naming the
    operator and the field, before any device work."""
    from pyvkgrad.one_call_cache import OneCallCache
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    x = np.ones(4, np.float32)
    x4 = np.ones((1, 1, 2, 2), np.float32)
    huge = 2**1024
    calls = {
        "ELEMENT_WISE_CLIP_GRAD: Min": lambda: pyvkgrad.element_wise_clip_grad(x, x, huge, 1.0),
        "ELEMENT_WISE_CLIP_GRAD: Max": lambda: pyvkgrad.element_wise_clip_grad(
            x, x, 0.0, np.longdouble("1e4000")),
        "ELEMENT_WISE_CLIP_GRAD1: Max": lambda: pyvkgrad.element_wise_clip_grad1(
            x, x, 0.0, -huge),
        "ADAM_OPTIMIZER: LearningRate": lambda: pyvkgrad.adam_optimizer(
            x, x, x, x, 1, huge, 0.9, 0.999, 1e-8),
        "BATCH_NORMALIZATION_TRAINING: Epsilon": lambda: pyvkgrad.batch_normalization_training(
            x4, x4[:, :, :1, :1], x4[:, :, :1, :1], huge),
        "LOCAL_RESPONSE_NORMALIZATION_GRAD: Bias": lambda:
            pyvkgrad.local_response_normalization_grad(x4, x4, True, 3, 1.0, 0.75, huge),
        "ROI_ALIGN_GRAD: SpatialScaleX": lambda: pyvkgrad.roi_align_grad(
            None, x4, np.zeros((1, 4), np.float32), np.zeros(1, np.uint32), (1, 1, 2, 2),
            spatial_scale_x=huge),
        r"RESAMPLE_GRAD1: Scales\[0\]": lambda: pyvkgrad.resample_grad1(
            x, (4,), rounding_direction="decreasing", scales=[huge]),
        r"MAX_POOLING_GRAD: Dilations\[0\]": lambda: pyvkgrad.max_pooling_grad(
            x4, x4, (1, 1), (1, 1), (0, 0), (0, 0), (2**32, 1)),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"^{name} must "):
            call()


def test_one_call_edges_nan_keys_overflowing_constants_and_iterators(device):
    """Repeated one calls with a NaN clip bound hit the cache (NaN never equals itself: each
    call was a miss that added an equal entry); an LRN_GRAD whose host constant overflows
    float32 makes no warning and obeys no caller's numpy error state; an iterator as
    ROI_ALIGN_GRAD's sizes is read once (it failed on a cache miss)."""
    import warnings
    x = np.ones(4, np.float32)
    device.cache_clear()
    for _ in range(4):
        np.testing.assert_array_equal(
            pyvkgrad.element_wise_clip_grad(x, x, float("nan"), 2.0, device=device), x)
    info = device.cache_info()
    assert (info.misses, info.entries) == (1, 1), info
    x4 = np.ones((1, 3, 2, 2), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            pyvkgrad.local_response_normalization_grad(x4, x4, True, 3, 3e38, 3e38, 1.0,
                                                       device=device)
    device.cache_clear()
    dy = np.ones((1, 1, 1, 1), np.float32)
    dx, _ = pyvkgrad.roi_align_grad(None, dy, np.array([[0, 0, 1, 1]], np.float32),
                                    np.zeros(1, np.uint32), iter((1, 1, 2, 2)), device=device)
    assert dx.shape == (1, 1, 2, 2) and dx.sum() == 1


def test_too_large_outputs_and_inputs_name_the_operator(device, monkeypatch):
    """A one-call output of 2^32 elements or more (or of size 0), or a broadcast input that
    large, is refused naming the operator and the field (TensorDesc's own check named
    neither), before any device work."""
    from pyvkgrad.one_call_cache import OneCallCache
    monkeypatch.setattr(OneCallCache, "run", lambda *a, **k: pytest.fail("reached the device"))
    dy = np.ones((1, 1, 2, 2), np.float32)
    calls = {
        "SLICE_GRAD: OutputGradientTensor.Sizes hold too many": lambda: pyvkgrad.slice_grad(
            np.ones((1, 4), np.float32), (2**30, 4), (0, 0), (1, 4), (1, 1)),
        "SLICE_GRAD: OutputGradientTensor.Sizes must all be at least 1": lambda:
            pyvkgrad.slice_grad(np.ones((1, 4), np.float32), (0, 4), (0, 0), (1, 4), (1, 1)),
        "AVERAGE_POOLING_GRAD: OutputGradientTensor.Sizes hold too many": lambda:
            pyvkgrad.average_pooling_grad(dy, (1, 1, 2**16, 2**16), (2**15, 2**15), (1, 1),
                                          (0, 0), (0, 0), False),
        "ROI_ALIGN_GRAD: OutputGradientTensor.Sizes hold too many": lambda:
            pyvkgrad.roi_align_grad(None, dy, np.zeros((1, 4), np.float32),
                                    np.zeros(1, np.uint32), (5, 1, 2**16, 2**16)),
        "ACTIVATION_RELU_GRAD: InputTensor.Sizes hold too many": lambda:
            pyvkgrad.activation_relu_grad(np.broadcast_to(np.float32(1), (2**16, 2**16)),
                                          np.broadcast_to(np.float32(1), (2**16, 2**16))),
    }
    for message, call in calls.items():
        with pytest.raises(ValueError, match=f"^{message}"):
            call()


def test_signed_zero_scalars(device):
    """-0.0 and +0.0 are different scalars: the one-call cache keys floats by their bytes (a
    call with the other sign reused the first's operator), and Epsilon = +0 added to a
    Variance of -0 gives +0, so 1 / sqrt is +Inf, as the oracle has it (the add of a constant
    0 was folded away; common.glsl's run_time)."""
    from pyvkgrad import reference
    x = np.array([-0.0, -0.0], np.float32)
    m = np.array([-1.0, 1.0], np.float32)
    v = np.ones(2, np.float32)
    for order in ((0.0, -0.0), (-0.0, 0.0)):
        for lr in order:
            got = pyvkgrad.adam_optimizer(x, m, v, m, 1, lr, 0.9, 0.999, 1e-8, device=device)
            want = reference.adam_optimizer(x, m, v, m, 1, lr, 0.9, 0.999, 1e-8)
            np.testing.assert_array_equal(got[0].view(np.uint32),
                                          np.float32(want[0]).view(np.uint32))
        device.cache_clear()
    xx = np.linspace(1, 2, 4, dtype=np.float32).reshape(2, 2, 1, 1)
    dy = np.ones_like(xx)
    mean = np.zeros((1, 2, 1, 1), np.float32)
    var = np.full((1, 2, 1, 1), -0.0, np.float32)
    scale = np.ones_like(mean)
    with np.errstate(all="ignore"):
        for epsilon in (-0.0, 0.0):
            for grad in (pyvkgrad.batch_normalization_grad,
                         pyvkgrad.batch_normalization_training_grad):
                got = grad(xx, dy, mean, var, scale, epsilon, device=device)
                want = getattr(reference, grad.__name__)(xx, dy, mean, var, scale, epsilon)
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w.astype(np.float32))
