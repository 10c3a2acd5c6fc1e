#!/usr/bin/env python3
"""pyvkgrad benchmark: kernel time from Vulkan timestamps, GB/s, fraction of a copy roofline
measured in the same run, and PyTorch's time for the same operation on the same device.

    python -m pyvkgrad bench [--out DIR] [--ops NAMES] [--quick] [--repeat N]

--ops: operators of the table (pyvkgrad/operators.py) by name, or relu, resample, bn (both
BatchNorm grads); and the groups overhead, chain, roundtrip. Default: all of them.

Bytes are the minimum traffic of the operation (every input read once, every output written
once). The copy roofline is a device-to-device buffer copy (vkCmdCopyBuffer through kp), read
plus written, timed with timestamps the same way. PyTorch runs on CUDA when available (CUDA
events), else on the CPU (wall clock); the ratio is PyTorch time / pyvkgrad time (> 1: faster).
Also measured: host overhead per call (one-call function, compiled operator, recording replay)
and a recorded chain of three dependent operators against the sum of its parts.
Writes results.json and, when matplotlib is importable, results.png into --out.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc, operators  # noqa: E402
from pyvkgrad.ops._elementwise import ElementwiseGradDesc  # noqa: E402

MiB = 2**20


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- timing ------------------------------------------------------------------------------------

def replay_steps_ns(rec, repeat, before=None):
    """Each recorded step's time (ns, from its timestamps) in each of `repeat` replays of a
    recording; `before`, when given, is called before each replay (e.g. to flush L2)."""
    steps = []
    for _ in range(repeat):
        if before:
            before()
        rec.replay()
        steps.append(rec.kernel_times_ns())
    return steps


def step_medians_us(steps):
    """The median over replays of each step (replay_steps_ns), in us."""
    return [statistics.median(s[i] for s in steps) / 1e3 for i in range(len(steps[0]))]


def timed_replays(rec, repeat):
    """Median kernel time (ns) of a recording over `repeat` replays, from its timestamps."""
    return statistics.median(sum(s) for s in replay_steps_ns(rec, repeat))


def vulkan_time(device, op, tensors, repeat):
    """(median ns, recording) of one compiled operator on bound tensors."""
    with device.record(timestamps=True) as rec:
        rec.execute(op, **tensors)
    return timed_replays(rec, repeat), rec


def benchmark_kernel(name):
    """SPIR-V and interface of a benchmark-only kernel: benchmarks/shaders/<name>.comp, built
    by tools/build_shaders.py into benchmarks/spirv/ (not shipped with the package)."""
    from pyvkgrad import kernels
    spirv_dir = Path(__file__).resolve().parent / "spirv"
    entry = json.loads((spirv_dir / "manifest.json").read_text())["kernels"][name]
    data = (spirv_dir / f"{name}.spv").read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["spirv_sha256"]:
        sys.exit(f"benchmarks/spirv/{name}.spv differs from its manifest: run "
                 f"python tools/build_shaders.py")
    return data, kernels.interface_of(name, entry)


def same_bytes_roofline(dev, T, nbytes, repeat):
    """The roofline for a kernel moving `nbytes` (read + written): the best copy that moves
    as many, Vulkan's or PyTorch's (T, a Torch), in bytes per second."""
    half = min(nbytes // 2 // 16 * 16, dev.info.max_storage_buffer_range // 16 * 16)
    return max(copy_roofline(dev, half, repeat),
               (T.copy_roofline(half, repeat) or 0) if T.torch else 0)


def diagnostic_args(argv=None, repeat=20):
    """The options the diagnostic scripts beside this one share: --out DIR, --quick (small
    shapes, for a check on lavapipe), --repeat N."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=repeat)
    return ap.parse_args(argv)


def commands_ns(device, record, repeat, what="timed commands"):
    """Median device time (ns, Vulkan timestamps) of `repeat` submissions of the commands that
    `record(commands)` records, after one warm-up submission."""
    commands = device.runtime().commands(2)
    record(commands)
    times = []
    for _ in range(repeat + 1):
        commands.submit(what)
        ts = commands.timestamps()
        times.append((ts[-1] - ts[0]) * device.info.timestamp_period)
    commands.destroy()
    return statistics.median(times[1:])


def copy_roofline(device, nbytes, repeat, by_method=None):
    """Bytes read + written per second of the fastest device-to-device copy of `nbytes`:
    vkCmdCopyBuffer or a compute kernel streaming 16-byte vectors (through the runtime seam).
    `by_method`, a dict, receives each method's rate (on lavapipe the two differ tenfold)."""
    from pyvkgrad import kernels
    runtime = device.runtime()
    buffers = {"src": runtime.buffer(nbytes), "dst": runtime.buffer(nbytes)}
    src, dst = buffers["src"], buffers["dst"]
    vectors = nbytes // 16
    wg = device.limits.local_size
    spirv, iface = benchmark_kernel("copy_words")
    bound = [buffers[n] for n in kernels.binding_order(iface, {"src": "src", "dst": "dst"})]
    push = np.array(kernels.push_words(iface, {"count": vectors}), dtype=np.uint32)
    program = runtime.program(bound, spirv, min(-(-vectors // wg), 65535),
                              kernels.specialization(iface, {"WG": wg}), len(push))
    best = 0.0
    for method, record in (("vkCmdCopyBuffer", lambda c: c.copy(src, dst)),
                           ("compute copy", lambda c: c.dispatch(program, push))):
        rate = 2 * nbytes / (commands_ns(device, record, repeat, "copy roofline") * 1e-9)
        best = max(best, rate)
        if by_method is not None:
            by_method[method] = rate
    program.destroy()
    src.destroy()
    dst.destroy()
    return best


class Torch:
    """PyTorch on the same device (CUDA) or the CPU, timed the way it is meant to be."""

    def __init__(self):
        try:
            import torch
        except ImportError:
            self.torch = None
            return
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.device = "cuda" if self.cuda else "cpu"
        self.name = (torch.cuda.get_device_name() if self.cuda else platform.processor() or "cpu")

    def tensor(self, array):
        return self.torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_ns(self, fn, repeat):
        torch = self.torch
        fn()
        if self.cuda:
            torch.cuda.synchronize()
            times = []
            for _ in range(repeat):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1e6)
            return statistics.median(times)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times)

    def copy_roofline(self, nbytes, repeat):
        if not self.cuda:
            return None
        a = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        b = self.torch.empty_like(a)
        return 2 * nbytes / (self.time_ns(lambda: b.copy_(a), repeat) * 1e-9)


# ---- cases -------------------------------------------------------------------------------------

@dataclass
class Result:
    operator: str
    case: str
    dtype: str
    bytes: int
    vk_ns: float
    vk_gbps: float
    roofline_fraction: float
    torch_ns: float = None
    torch_gbps: float = None
    speedup_vs_torch: float = None
    extra: dict = field(default_factory=dict)


def _np(dt):
    return np.float32 if dt == "float32" else np.float16


def _dt(dt):
    return DataType.FLOAT32 if dt == "float32" else DataType.FLOAT16


def elementwise_cases(record):
    """Cases of an element-wise operator (any on the element-wise base): one tensor size per
    line, packed, both data types."""
    def cases(quick):
        sizes = [16 * MiB, 64 * MiB] if quick else [16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]
        for dt in ("float32", "float16"):
            for nbytes in sizes:
                n = nbytes // np.dtype(_np(dt)).itemsize
                yield (record.OPERATOR, f"{nbytes // MiB} MiB per tensor ({n} elements)", dt,
                       lambda dev, rng, dt=dt, n=n: _elementwise(dev, rng, record, dt, n))
    return cases


# PyTorch's equivalent of an element-wise operator, where it has one: (torch, x, dy) -> call.
TORCH_ELEMENTWISE = {
    "activation_relu_grad": lambda torch, tx, tdy: lambda: torch.ops.aten.threshold_backward(
        tdy, tx, 0),
}


def _elementwise(dev, rng, record, dt, n):
    desc = TensorDesc(_dt(dt), (n,))
    op = dev.compile(record.descriptor(desc, desc, desc))
    x = rng.standard_normal(n, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal(n, dtype=np.float32).astype(_np(dt))
    tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                   output_gradient_tensor=dev.empty(desc))
    torch_fn = None
    if record.name in TORCH_ELEMENTWISE:
        def torch_fn(T):
            return TORCH_ELEMENTWISE[record.name](T.torch, T.tensor(x), T.tensor(dy))
    return op, tensors, 3 * x.nbytes, torch_fn


def resample_shapes(quick):
    """(n, c, h, w, ratio, nhwc) of dX: NCHW at 2x, 80 -> 48, 1.5x and 3x, and one NHWC
    (channels innermost in memory) case."""
    n, c = (4, 16) if quick else (32, 64)
    return [(n, c, 64, 64, 2.0, False), (n, c, 48, 48, 80 / 48, False),
            (n, c, 64, 64, 1.5, False), (n, c, 32, 32, 3.0, False), (n, c, 64, 64, 2.0, True)]


def resample_cases(quick):
    """The ResampleGrad cases on resample_shapes: both modes, gather and atomic, both types."""
    for n, c, h, w, ratio, nhwc in resample_shapes(quick):
        for mode in ("nearest_neighbor", "linear"):
            for algorithm in ("gather", "atomic"):
                if algorithm == "atomic" and (nhwc or ratio not in (2.0, 80 / 48)):
                    continue  # the atomic path is measured on the NCHW 2x and 80 -> 48 cases
                for dt in ("float32", "float16"):
                    oh, ow = round(h * ratio), round(w * ratio)
                    layout = " NHWC" if nhwc else ""
                    yield ("RESAMPLE_GRAD",
                           f"{mode} {algorithm} [{n},{c},{oh},{ow}] -> [{n},{c},{h},{w}]{layout}",
                           dt, lambda dev, rng, a=(n, c, h, w, oh, ow, mode, algorithm, dt, nhwc):
                           _resample(dev, rng, *a))


def _nhwc(sizes):
    """Element strides of an NCHW-indexed tensor laid out NHWC (channels innermost)."""
    n, c, h, w = sizes
    return (h * w * c, 1, w * c, c)


def _resample(dev, rng, n, c, h, w, oh, ow, mode, algorithm, dt, nhwc=False):
    dy_desc = TensorDesc(_dt(dt), (n, c, oh, ow), _nhwc((n, c, oh, ow)) if nhwc else None)
    dx_desc = TensorDesc(_dt(dt), (n, c, h, w), _nhwc((n, c, h, w)) if nhwc else None)
    scales = (1.0, 1.0, oh / h, ow / w)
    desc = pyvkgrad.ResampleGradDesc(dy_desc, dx_desc, mode, scales, (0.5,) * 4, (-0.5,) * 4,
                                     algorithm=algorithm)
    op = dev.compile(desc)
    dy = rng.standard_normal(dy_desc.sizes, dtype=np.float32).astype(_np(dt))
    if nhwc:  # the same logical values, channels innermost in memory
        dy = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    tensors = dict(input_gradient_tensor=dev.upload(dy), output_gradient_tensor=dev.empty(dx_desc))
    assert tensors["input_gradient_tensor"].desc == dy_desc

    def torch_fn(T):
        tdy = T.tensor(dy)
        if nhwc:
            tdy = tdy.contiguous(memory_format=T.torch.channels_last)
        aten = T.torch.ops.aten
        if mode == "linear":  # half-pixel bilinear == align_corners=False
            return lambda: aten.upsample_bilinear2d_backward(tdy, [oh, ow], [n, c, h, w], False)
        # DirectML's round-half-up nearest with half-pixel offsets is PyTorch's nearest-exact.
        return lambda: aten._upsample_nearest_exact2d_backward(tdy, [oh, ow], [n, c, h, w])
    return op, tensors, dy.nbytes + n * c * h * w * dy.itemsize, torch_fn


def bn_cases(training):
    def cases(quick):
        # [256,512,7,7]: rows of 49 elements, so stage 1 loads single elements (VEC 1).
        shapes = [(4, 64, 56, 56), (32, 256, 14, 14)] if quick else [(32, 64, 112, 112),
                                                                     (256, 256, 14, 14),
                                                                     (256, 512, 7, 7)]
        name = "BATCH_NORMALIZATION_TRAINING_GRAD" if training else "BATCH_NORMALIZATION_GRAD"
        for shape in shapes:
            for dt in ("float32", "float16"):
                yield (name, f"{list(shape)} per channel", dt,
                       lambda dev, rng, s=shape, dt=dt: _bn(dev, rng, s, training, dt))
    return cases


def benchmark_cases(record):
    """The benchmark's cases of an operator of the table: shapes from its issue; any
    element-wise operator gets the element-wise cases."""
    special = {"resample_grad": resample_cases,
               "batch_normalization_grad": bn_cases(False),
               "batch_normalization_training_grad": bn_cases(True)}
    if record.name in special:
        return special[record.name]
    if issubclass(record.descriptor, ElementwiseGradDesc):
        return elementwise_cases(record)
    raise SystemExit(f"benchmarks/run.py: no benchmark cases for {record.name}: add them")


# Short names kept from before the table: --ops relu,resample,bn.
ALIASES = {"relu": ["activation_relu_grad"], "resample": ["resample_grad"],
           "bn": ["batch_normalization_grad", "batch_normalization_training_grad"]}
GROUPS = ("overhead", "chain", "roundtrip")


def _bn(dev, rng, shape, training, dt, limits=None):
    n, c, h, w = shape
    x = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    dy = rng.standard_normal(shape, dtype=np.float32).astype(_np(dt))
    mean = x.astype(np.float32).mean(axis=(0, 2, 3), keepdims=True).astype(_np(dt))
    var = x.astype(np.float32).var(axis=(0, 2, 3), keepdims=True).astype(_np(dt))
    scale = rng.standard_normal((1, c, 1, 1)).astype(_np(dt))
    big, small = TensorDesc(_dt(dt), shape), TensorDesc(_dt(dt), (1, c, 1, 1))
    cls = (pyvkgrad.BatchNormalizationTrainingGradDesc if training
           else pyvkgrad.BatchNormalizationGradDesc)
    op = dev.compile(cls(big, big, small, small, small, big, small, small, 1e-5), limits)
    tensors = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(dy),
                   mean_tensor=dev.upload(mean), variance_tensor=dev.upload(var),
                   scale_tensor=dev.upload(scale), output_gradient_tensor=dev.empty(big),
                   output_scale_gradient_tensor=dev.empty(small),
                   output_bias_gradient_tensor=dev.empty(small))
    # Minimum traffic: X and dY read once, dX written once (the statistics are negligible).
    nbytes = 3 * x.nbytes

    def torch_fn(T):
        torch = T.torch
        tx, tdy = T.tensor(x), T.tensor(dy)
        w_ = T.tensor(scale.reshape(c))
        m_, v_ = T.tensor(mean.reshape(c)), T.tensor(var.reshape(c))
        if T.cuda and dt == "float16":  # PyTorch keeps BatchNorm statistics in float32
            m_, v_, w_ = m_.float(), v_.float(), w_.float()
        invstd = torch.rsqrt(v_.float() + 1e-5)
        mask = [True, True, True]
        if training:
            return lambda: torch.ops.aten.native_batch_norm_backward(
                tdy, tx, w_, None, None, m_.float(), invstd, True, 1e-5, mask)
        return lambda: torch.ops.aten.native_batch_norm_backward(
            tdy, tx, w_, m_, v_, None, None, False, 1e-5, mask)
    return op, tensors, nbytes, torch_fn


# ---- numpy round trips -------------------------------------------------------------------------

def roundtrip(dev, T, quick, repeat):
    """What a numpy user waits for: pyvkgrad's one-call function against PyTorch doing the same
    from numpy (from_numpy -> device -> op -> .cpu().numpy(), synchronised), median wall times
    in the same run, interleaved so both see the same machine state."""
    rng = np.random.default_rng(3)
    cases = []
    for n in ((1024, 1 << 20) if quick else (1024, 1 << 20, 16 << 20)):
        x = rng.standard_normal(n).astype(np.float32)
        dy = rng.standard_normal(n).astype(np.float32)
        cases.append((f"ReLU grad {n} float32",
                      lambda x=x, dy=dy: pyvkgrad.activation_relu_grad(x, dy, device=dev),
                      lambda x=x, dy=dy: T.torch.ops.aten.threshold_backward(
                          T.tensor(dy), T.tensor(x), 0).cpu().numpy()))
    shape = (4, 64, 28, 28) if quick else (32, 64, 56, 56)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    mean, var = x.mean(axis=(0, 2, 3), keepdims=True), x.var(axis=(0, 2, 3), keepdims=True)
    scale = np.ones_like(mean)

    def torch_bn():
        torch = T.torch
        out = torch.ops.aten.native_batch_norm_backward(
            T.tensor(dy), T.tensor(x), T.tensor(scale.ravel()), None, None,
            T.tensor(mean.ravel()), torch.rsqrt(T.tensor(var.ravel()) + 1e-5), True, 1e-5,
            [True, True, True])
        return [o.cpu().numpy() for o in out]
    cases.append((f"BN training grad {list(shape)} float32",
                  lambda: pyvkgrad.batch_normalization_training_grad(x, dy, mean, var, scale, 1e-5,
                                                                     device=dev),
                  torch_bn))
    rows = []
    for name, ours, theirs in cases:
        ours()
        if T.torch:
            theirs()
            T.sync()
        a, b = [], []
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            ours()
            a.append(time.perf_counter_ns() - t0)
            if T.torch:
                t0 = time.perf_counter_ns()
                theirs()
                T.sync()
                b.append(time.perf_counter_ns() - t0)
        row = {"case": name, "pyvkgrad_us": statistics.median(a) / 1e3}
        if b:
            row["torch_from_numpy_us"] = statistics.median(b) / 1e3
            row["torch_over_pyvkgrad"] = row["torch_from_numpy_us"] / row["pyvkgrad_us"]
        rows.append(row)
        progress(f"    {row}")
    return rows


# ---- host overhead and chain -------------------------------------------------------------------

def host_overhead(dev, repeat):
    """Microseconds per call on a 1024-element ReLU grad: the one-call function, the compiled
    operator, a recording's replay, and a replay of a recording of ten."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1024).astype(np.float32)
    pyvkgrad.activation_relu_grad(x, x, device=dev)
    out = {}
    t0 = time.perf_counter()
    for _ in range(repeat):
        pyvkgrad.activation_relu_grad(x, x, device=dev)
    out["one_call_function_us"] = (time.perf_counter() - t0) / repeat * 1e6
    desc = TensorDesc(DataType.FLOAT32, (1024,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    ts = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(x),
              output_gradient_tensor=dev.empty(desc))
    op(**ts)
    t0 = time.perf_counter()
    for _ in range(repeat):
        op(**ts)
    out["compiled_operator_us"] = (time.perf_counter() - t0) / repeat * 1e6
    with dev.record() as rec:
        rec.execute(op, **ts)
    t0 = time.perf_counter()
    for _ in range(repeat):
        rec.replay()
    out["recording_replay_us"] = (time.perf_counter() - t0) / repeat * 1e6
    with dev.record() as rec10:
        for _ in range(10):
            rec10.execute(op, **ts)
    t0 = time.perf_counter()
    for _ in range(repeat):
        rec10.replay()
    out["recording_of_10_replay_us"] = (time.perf_counter() - t0) / repeat * 1e6
    return out


def replay_walls_ns(rec, repeat):
    """Host wall time of each of `repeat` replays of a finished recording."""
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        rec.replay()
        walls.append(time.perf_counter_ns() - t0)
    return walls


def tiny_recording(dev):
    """A recorded ReLU grad over 4 elements: a submission with next to no GPU work."""
    desc = TensorDesc(DataType.FLOAT32, (4,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    ones = dev.upload(np.ones(4, np.float32))
    with dev.record() as rec:
        rec.execute(op, input_tensor=ones, input_gradient_tensor=ones,
                    output_gradient_tensor=dev.empty(desc))
    return rec


def chain(dev, quick, repeat):
    """ResampleGrad -> BatchNorm training grad -> ReLU grad, each reading the previous output,
    as one recording; compared with the sum of the three kernel times plus one submission."""
    rng = np.random.default_rng(2)
    n, c, h, w = (4, 32, 32, 32) if quick else (32, 64, 64, 64)
    f32 = DataType.FLOAT32
    big, up, small = (TensorDesc(f32, (n, c, h, w)), TensorDesc(f32, (n, c, 2 * h, 2 * w)),
                      TensorDesc(f32, (1, c, 1, 1)))
    rs = dev.compile(pyvkgrad.ResampleGradDesc(up, big, "linear", (1, 1, 2, 2), (0.5,) * 4,
                                               (-0.5,) * 4))
    bn = dev.compile(pyvkgrad.BatchNormalizationTrainingGradDesc(
        big, big, small, small, small, big, small, small, 1e-5))
    relu = dev.compile(pyvkgrad.ActivationReluGradDesc(big, big, big))
    x = rng.standard_normal(big.sizes).astype(np.float32)
    t = {k: dev.upload(v) for k, v in dict(
        dy=rng.standard_normal(up.sizes).astype(np.float32), x=x,
        mean=x.mean(axis=(0, 2, 3), keepdims=True), var=x.var(axis=(0, 2, 3), keepdims=True),
        scale=np.ones((1, c, 1, 1), np.float32), relu_x=x).items()}
    g1, g2, g3 = dev.empty(big), dev.empty(big), dev.empty(big)
    ds, db = dev.empty(small), dev.empty(small)
    steps = [
        (rs, dict(input_gradient_tensor=t["dy"], output_gradient_tensor=g1)),
        (bn, dict(input_tensor=t["x"], input_gradient_tensor=g1, mean_tensor=t["mean"],
                  variance_tensor=t["var"], scale_tensor=t["scale"], output_gradient_tensor=g2,
                  output_scale_gradient_tensor=ds, output_bias_gradient_tensor=db)),
        (relu, dict(input_tensor=t["relu_x"], input_gradient_tensor=g2, output_gradient_tensor=g3)),
    ]
    parts = [vulkan_time(dev, op, ts, repeat)[0] for op, ts in steps]
    with dev.record(timestamps=True) as rec:
        for op, ts in steps:
            rec.execute(op, **ts)
    chain_kernel = timed_replays(rec, repeat)
    # Wall time from a recording without timestamp queries, like the tiny one below.
    with dev.record() as plain:
        for op, ts in steps:
            plain.execute(op, **ts)
    walls = replay_walls_ns(plain, repeat)
    # One submission of a trivial dispatch: the fixed cost a submission adds.
    subs = replay_walls_ns(tiny_recording(dev), repeat)
    budget = sum(parts) + statistics.median(subs)
    parts = [float(p) for p in parts]
    return {"shape": [n, c, h, w], "parts_kernel_ns": parts, "chain_kernel_ns": float(chain_kernel),
            "chain_wall_ns": statistics.median(walls), "submission_ns": statistics.median(subs),
            "sum_parts_plus_submission_ns": float(budget),
            "chain_wall_over_budget": float(statistics.median(walls) / budget),
            "barriers": plain.labels.count("barrier"), "wait_spin_us": dev.wait_spin_us}


# ---- one case ---------------------------------------------------------------------------------

def run_case(dev, T, entry, repeat, seed):
    """Time one catalogue entry on the device and in PyTorch; None when it cannot run."""
    name, case, dt, build = entry
    try:
        op, tensors, nbytes, torch_fn = build(dev, np.random.default_rng(seed))
    except (ValueError, NotImplementedError) as e:
        progress(f"    skipped: {e}")
        return None
    ns, _ = vulkan_time(dev, op, tensors, repeat)
    size_roof = same_bytes_roofline(dev, T, nbytes, repeat)
    r = Result(name, case, dt, nbytes, ns, nbytes / ns, nbytes / ns / (size_roof / 1e9))
    r.extra["copy_roofline_gbps_same_bytes"] = size_roof / 1e9
    if T.torch and torch_fn is not None:
        try:
            tns = T.time_ns(torch_fn(T), repeat)
            r.torch_ns, r.torch_gbps, r.speedup_vs_torch = tns, nbytes / tns, tns / ns
        except Exception as e:  # an op PyTorch lacks for this dtype on this device
            r.extra["torch_error"] = str(e).splitlines()[0][:120]
    for t in tensors.values():
        t.close()
    op.close()
    return r


def run_isolated(index, argv):
    """Run case `index` in a fresh process. Several large cases in one process were measured
    up to 2x slower after the first few on the H100 (both pyvkgrad and PyTorch), so each case
    gets a clean driver and allocator state."""
    import subprocess
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--isolate"]
    res = subprocess.run([sys.executable, __file__, *args, "--case", str(index)],
                         capture_output=True, text=True)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            data = json.loads(line[len("RESULT "):])
            return Result(**data) if data else None
    progress(f"    failed: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    return None


# ---- main --------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--ops", default=",".join([r.name for r in operators.OPERATORS] + list(GROUPS)),
                    help="operators of pyvkgrad/operators.py by name, or relu, resample, bn; "
                         "and the groups " + ", ".join(GROUPS))
    ap.add_argument("--quick", action="store_true", help="small shapes (default on a CPU device)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--isolate", action="store_true",
                    help="run every case in its own process (recommended on a GPU)")
    ap.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    dev = pyvkgrad.get_device(args.device)
    quick = args.quick or dev.info.device_type == "cpu"
    repeat = args.repeat if not quick else min(args.repeat, 5)
    T = Torch() if not args.no_torch else Torch.__new__(Torch)
    if args.no_torch:
        T.torch = None
    ops = [name for op in args.ops.split(",") for name in ALIASES.get(op, [op])]
    unknown = set(ops) - set(operators.BY_NAME) - set(GROUPS)
    if unknown:
        ap.error(f"--ops: unknown {sorted(unknown)}; known: "
                 f"{', '.join(list(operators.BY_NAME) + list(ALIASES) + list(GROUPS))}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.case is None:
        progress(f"device: {dev.name} ({dev.info.driver_name} {dev.info.driver_info}); "
                 f"PyTorch: {T.torch.__version__ + ' on ' + T.device if T.torch else 'not available'}")

    roof_bytes = min(64 * MiB if quick else 1024 * MiB, dev.info.max_storage_buffer_range // 2)
    roof = torch_roof = None
    roof_by_method = {}
    if args.case is None:
        roof = copy_roofline(dev, roof_bytes, repeat, roof_by_method)
        torch_roof = T.copy_roofline(roof_bytes, repeat) if T.torch else None
    if roof:
        progress(f"copy roofline ({roof_bytes // MiB} MiB): Vulkan {roof / 1e9:.0f} GB/s ("
                 + ", ".join(f"{m} {r / 1e9:.1f}" for m, r in roof_by_method.items()) + ")"
                 + (f", PyTorch {torch_roof / 1e9:.0f} GB/s" if torch_roof else ""))

    catalogue = []
    for record in operators.OPERATORS:  # the table's order
        if record.name in ops:
            catalogue += list(benchmark_cases(record)(quick))
    if args.case is not None:  # a child of --isolate: one case, one JSON line
        r = run_case(dev, T, catalogue[args.case], repeat, args.case)
        print("RESULT " + json.dumps(asdict(r) if r else None), flush=True)
        return 0
    results = []
    for i, entry in enumerate(catalogue):
        name, case, dt, _ = entry
        progress(f"[{i + 1}/{len(catalogue)}] {name} {case} {dt}")
        if args.isolate:
            r = run_isolated(i, argv)
        else:
            r = run_case(dev, T, entry, repeat, i)
        if r is None:
            continue
        results.append(r)
        progress(f"    {r.vk_ns / 1e3:9.1f} us  {r.vk_gbps:7.1f} GB/s  "
                 f"{100 * r.roofline_fraction:5.1f}% of copy"
                 + (f"   torch {r.torch_ns / 1e3:9.1f} us  x{r.speedup_vs_torch:.2f}"
                    if r.torch_ns else ""))
    extra = {}
    if "overhead" in ops:
        progress("host overhead")
        extra["host_overhead"] = host_overhead(dev, 200 if not quick else 50)
        progress(f"    {extra['host_overhead']}")
    if "roundtrip" in ops:
        progress("numpy round trips")
        extra["roundtrip"] = roundtrip(dev, T, quick, 50 if not quick else 10)
    if "chain" in ops:
        progress("recorded chain")
        try:
            extra["chain"] = chain(dev, quick, repeat)
            progress(f"    {extra['chain']}")
        except (NotImplementedError, ValueError) as e:
            progress(f"    skipped: {e}")

    print_table(dev, roof, torch_roof, results)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": dev.name,
              "driver": f"{dev.info.driver_name} {dev.info.driver_info}",
              "torch": (f"{T.torch.__version__} ({T.device}: {T.name})" if T.torch else None),
              "command": " ".join(["python -m pyvkgrad bench", *(argv or sys.argv[1:])]),
              "copy_roofline_gbps": roof / 1e9,
              "torch_copy_roofline_gbps": torch_roof / 1e9 if torch_roof else None,
              "copy_roofline_by_method_gbps": {m: r / 1e9 for m, r in roof_by_method.items()},
              "results": [asdict(r) for r in results], **extra}
    (out / "results.json").write_text(json.dumps(report, indent=2))
    plot(results, max(roof, torch_roof or 0), out / "results.png")
    progress(f"wrote {out / 'results.json'}")
    return 0


def print_table(dev, roof, torch_roof, results):
    print(f"\n{dev.name}: copy roofline {roof / 1e9:.0f} GB/s (Vulkan)"
          + (f", {torch_roof / 1e9:.0f} GB/s (PyTorch)" if torch_roof else "")
          + "; %copy compares with the best copy of the same bytes, measured in this run")
    head = (f"{'operator':<34}{'case':<50}{'dtype':<8}{'pyvkgrad us':>12}{'GB/s':>8}"
            f"{'%copy':>7}{'torch us':>11}{'x torch':>9}")
    print(head)
    print("-" * len(head))
    for r in results:
        t = (f"{r.torch_ns / 1e3:>11.1f}{r.speedup_vs_torch:>9.2f}" if r.torch_ns
             else f"{'-':>11}{'-':>9}")
        print(f"{r.operator:<34}{r.case[:49]:<50}{r.dtype:<8}{r.vk_ns / 1e3:>12.1f}"
              f"{r.vk_gbps:>8.0f}{100 * r.roofline_fraction:>7.1f}{t}")


def plot(results, roof, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress("matplotlib not importable: no plot")
        return
    labels = [f"{r.operator.replace('BATCH_NORMALIZATION', 'BN')}\n{r.case[:40]} {r.dtype}"
              for r in results]
    y = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(results) + 1.5))
    ax.barh(y - 0.2, [r.vk_gbps for r in results], 0.4, label="pyvkgrad (Vulkan)")
    ax.barh(y + 0.2, [r.torch_gbps or 0 for r in results], 0.4, label="PyTorch")
    ax.axvline(roof / 1e9, color="k", ls="--", label="copy roofline (best of Vulkan, PyTorch)")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (minimum bytes read + written / kernel time)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    progress(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
