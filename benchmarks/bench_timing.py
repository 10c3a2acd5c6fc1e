"""The benchmark's timing helpers (benchmarks/run.py and the scripts in investigations/):
kernel times from Vulkan timestamps (median of replays, per step or summed), host wall times
of replays, the copy roofline a kernel is measured against (and the write-only roofline of
kernels that only write), and PyTorch timed on the same device."""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import pyvkgrad
from pyvkgrad.plan import READ, Plan

MiB = 2**20


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- timing ------------------------------------------------------------------------------------

def replay_steps_ns(rec, repeat, before=None):
    """Each recorded step's time (ns, from its timestamps) in each of `repeat` replays of a
    recording; `before`, when given, is called before each replay (e.g. to flush L2)."""
    steps = []
    hold_clock(rec.device)
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


def variant_script_start():
    """The plan-variant scripts' common start: their options (--quick, --repeat N, and
    --cuda-first: CUDA started first, issue 33) and the default device, its name printed.
    Returns (options, device)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cuda-first", action="store_true",
                    help="start CUDA first (issue 33: float16 kernels ran slower without)")
    args = ap.parse_args()
    if args.cuda_first:
        import torch
        torch.zeros(1, device="cuda")
    dev = pyvkgrad.default_device()
    print(dev.name)
    return args, dev


def part_times(device, base, plan, args, parts, tensors, repeat, limits=None):
    """Median kernel times (us) of an operator, key "all", and of each part alone (`parts`:
    name -> kernel-name suffixes; a part with no dispatch in the plan takes 0), for the plan
    choices in force; with the whole operator's plan and its outputs' bytes (to compare
    variants' bits), read right after its own replays. `base` is the descriptor class, `plan`
    its plan function (desc, limits), `args` its arguments."""
    times, whole, bits = {}, None, None
    for name, suffixes in [("all", None)] + list(parts.items()):
        class Part(base):  # a class per part: the compile cache never returns another's
            def plan(self, limits, suffixes=suffixes):
                p = plan(self, limits)
                if suffixes is None:
                    return p
                return Plan(tuple(d for d in p.dispatches if d.kernel.endswith(suffixes)),
                            p.scratch, tensors=p.tensors)
        op = device.compile(Part(*args), *([limits] if limits is not None else []))
        if not op.plan.dispatches:
            times[name] = 0.0
        else:
            ns, rec = vulkan_time(device, op, tensors, repeat)
            rec.close()
            times[name] = ns / 1e3
            if suffixes is None:
                whole = op.plan
                bits = [tensors[f].numpy().tobytes() for f, (_, access) in op.fields.items()
                        if access != READ]
        op.close()
    return times, whole, bits


# Seconds of hold_clock before each timed measurement (run.py --hold); None: 1 s on a GPU,
# 0 on a CPU device (so the investigations' timings hold the clock too).
HOLD_S = None
_holders = {}  # device -> hold_clock's recording, built once


def hold_seconds(device):
    """hold_clock's default on `device`: HOLD_S, or where it is None 1 s on a GPU and 0 on a CPU
    device."""
    if HOLD_S is not None:
        return HOLD_S
    return 0.0 if device.info.device_type == "cpu" else 1.0


def hold_clock(device, seconds=None, nbytes=64 * MiB):
    """Keep `device` busy for `seconds` (default HOLD_S): back-to-back replays of a recording
    of eight float32 ReLU grads over `nbytes` tensors (1 MiB on a CPU device). NVIDIA's driver
    lowers an H200's SM clock from 1980 to 345-570 MHz after 2-3 s with little GPU work and
    raises it again after about 0.8 s of steady work (investigations/gpu_clock.py); a CUDA
    context holds it up. The timing helpers call this right before they time, so that kernel
    and host figures are those of the working clock."""
    seconds = hold_seconds(device) if seconds is None else seconds
    if seconds <= 0:
        return
    if device not in _holders:
        if device.info.device_type == "cpu":
            nbytes = min(nbytes, MiB)
        desc = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (nbytes // 4,))
        op = device.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
        x, y = device.upload(np.ones(nbytes // 4, np.float32)), device.empty(desc)
        with device.record() as rec:
            for _ in range(8):
                rec.execute(op, input_tensor=x, input_gradient_tensor=x, output_gradient_tensor=y)
        _holders[device] = rec
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _holders[device].replay()


def gpu_clocks():
    """The GPU's SM and memory clocks and performance state now, from nvidia-smi ("" without
    it): the benchmark prints them beside host figures, which follow the SM clock."""
    if not shutil.which("nvidia-smi"):
        return ""
    res = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,pstate",
                          "--format=csv,noheader"], capture_output=True, text=True)
    return (res.stdout or res.stderr).strip()


def replay_walls_ns(rec, repeat):
    """Host wall time of each of `repeat` replays of a finished recording."""
    walls = []
    hold_clock(rec.device)
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        rec.replay()
        walls.append(time.perf_counter_ns() - t0)
    return walls


def median_wall_ns(fn, repeat, device=None):
    """Median host wall time (ns) of `fn()` over `repeat` calls, each timed on its own, after
    one untimed call (and hold_clock on `device`, where given)."""
    fn()
    if device is not None:
        hold_clock(device)
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        walls.append(time.perf_counter_ns() - t0)
    return statistics.median(walls)


def child_row(argv, fallback, env=None):
    """Run `argv` (an investigation script's --child) and return the dict it printed on its
    "ROW " line, or `fallback` with the child's error."""
    res = subprocess.run(argv, env=env, capture_output=True, text=True)
    rows = [json.loads(ln[4:]) for ln in res.stdout.splitlines() if ln.startswith("ROW ")]
    return rows[0] if rows else dict(fallback, error=(res.stderr or res.stdout)[-500:])


def wait_strategy(device):
    """How a submission on `device` waits for its fence (printed and stored by the benchmark):
    the polling budget (Device.wait_spin_us, from PYVKGRAD_WAIT_SPIN_US or the device type's
    default) and when the wait blocks."""
    spin = device.wait_spin_us
    return {"wait_spin_us": spin,
            "PYVKGRAD_WAIT_SPIN_US": os.environ.get("PYVKGRAD_WAIT_SPIN_US"),
            "blocks": (f"after polling the fence for up to {spin} us" if spin else "at once")}


def benchmark_kernel(name, rte16=False):
    """SPIR-V and interface of a benchmark-only kernel: benchmarks/shaders/<name>.comp, built
    by tools/build_shaders.py into benchmarks/spirv/ (not shipped with the package); rte16:
    its second SPIR-V, float16 conversions rounded to nearest even by the device (as
    pyvkgrad.kernels.spirv's)."""
    from pyvkgrad import kernels
    spirv_dir = Path(__file__).resolve().parent / "spirv"
    entry = json.loads((spirv_dir / "manifest.json").read_text())["kernels"][name]
    file, key = kernels.spirv_file(name, entry, rte16)
    data = (spirv_dir / f"{file}.spv").read_bytes()
    if hashlib.sha256(data).hexdigest() != entry[key]:
        sys.exit(f"benchmarks/spirv/{file}.spv differs from its manifest: run "
                 f"python tools/build_shaders.py")
    return data, kernels.interface_of(name, entry)


def benchmark_program(device, name, buffers, constants, count, rte16=False, push=None):
    """(program, push words) of the benchmark-only kernel `name` (benchmark_kernel, rte16)
    bound to `buffers` (binding name -> runtime Buffer), specialised with `constants` and the
    device's workgroup width, over `count` items (its push constant `count`, a grid-stride
    loop over at most 65535 workgroups); `push`: its other push constants by name."""
    from pyvkgrad import kernels
    spirv, iface = benchmark_kernel(name, rte16)
    wg = device.limits.local_size
    bound = [buffers[n] for n in kernels.binding_order(iface, {n: n for n in buffers})]
    push = np.array(kernels.push_words(iface, dict(push or {}, count=count)), dtype=np.uint32)
    program = device.runtime().program(bound, spirv, min(-(-count // wg), 65535),
                                       kernels.specialization(iface, dict(constants, WG=wg)),
                                       len(push))
    return program, push


@contextlib.contextmanager
def serving(name, data, rte16_data=None):
    """Kernel `name`'s SPIR-V replaced by `data` for the pipelines made inside (an operator's
    are made at its first execute or recording, so time inside too); with `rte16_data`, its
    second SPIR-V by that where the device takes it."""
    from pyvkgrad import kernels
    real = kernels.spirv

    def spirv(kernel, *rte16):
        if kernel != name:
            return real(kernel, *rte16)
        return rte16_data if rte16_data is not None and rte16 and rte16[0] else data

    kernels.spirv = spirv
    try:
        yield
    finally:
        kernels.spirv = real


def variant_spirv_args(description):
    """The options of the scripts that time text-patched copies of kernels (`build_variants`):
    --build DIR (here: build them), --spirv DIR (on the GPU: time them), --quick, --repeat N
    and --out FILE."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--build", metavar="DIR")
    ap.add_argument("--spirv", metavar="DIR")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    return ap.parse_args()


# A variant's text patch of shaders/include/load_store.glsl for the rte16 SPIR-V: beside
# RoundingModeRTE, the DenormPreserve and SignedZeroInfNanPreserve execution modes for 16-bit
# results (capabilities 4464 and 4466; modes 4459 and 4461), so that the device keeps float16
# subnormals and signed zeros in its conversions (where it offers them, as an H200 does).
_MODE = ('spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = '
         '[{}], {}, 16);\n')
PRESERVE16_MODES = [("include/load_store.glsl", _MODE.format(4467, 4462),
                     _MODE.format(4467, 4462) + _MODE.format(4464, 4459)
                     + _MODE.format(4466, 4461))]


# A variant's text patch of shaders/include/load_store.glsl: float16 stores through the
# device's packHalf2x16 wherever the result is a normal half, zero or Inf (subnormal halves and
# NaN still by integers); where the device rounds to nearest even, the same bits as
# half_from_float. (What the first, unlanded rte16 design would cost; no execution mode.)
_HALF_HEAD = ("uint half_from_float(float v) {\n    const uint u = floatBitsToUint(v);\n"
              "    const uint sign = (u >> 16) & 0x8000u, magnitude = u & 0x7FFFFFFFu;\n")
CHECKED_HALF = [
    ("include/load_store.glsl", _HALF_HEAD,
     "bool device_rounds(uint m) { return m - 0x38800000u <= 0x7F800000u - 0x38800000u"
     " || m == 0u; }\n" + _HALF_HEAD
     + "    if (device_rounds(magnitude)) return packHalf2x16(vec2(v, 0.0)) & 0xFFFFu;\n"),
    ("include/load_store.glsl",
     "    if (rounds_by_add(magnitude.x) && rounds_by_add(magnitude.y)) {\n",
     "    if (device_rounds(magnitude.x) && device_rounds(magnitude.y)) return packHalf2x16(v);\n"
     "    if (rounds_by_add(magnitude.x) && rounds_by_add(magnitude.y)) {\n")]


@functools.lru_cache(maxsize=None)
def _build_shaders():
    """tools/build_shaders.py as a module (loaded once): the compiler, its flags, the rte16
    build's macro and suffix, and mark_aliased, as the package's SPIR-V is built."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "build_shaders", Path(__file__).resolve().parents[1] / "tools" / "build_shaders.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def build_variants(folder, kernel, variants, shaders_of=None, rte16=False):
    """Write FOLDER/NAME.spv for each variant of shaders/KERNEL (`variants`: name -> [(file
    under shaders/, old text, new text)], applied in order to a copy of shaders/), built with
    glslangValidator as tools/build_shaders.py builds (the lent GPU has no compiler: build here,
    carry the folder, and time them through `serving`). `shaders_of`: name -> another shaders/
    folder to copy for that variant (e.g. an earlier commit's). rte16: also FOLDER/NAME.rte16.spv,
    the second SPIR-V (tools/build_shaders.py's RTE16_DEFINE), where the variant compiles so
    (a variant that patches the first SPIR-V's roads may not: it then has none)."""
    import tempfile
    root = Path(__file__).resolve().parents[1]
    tool = _build_shaders()
    flags = [f for f in tool.FLAGS if not f.startswith("-I")]  # the copy's include folder
    builds = [("", [])] + ([(tool.RTE16_SUFFIX, [f"-D{tool.RTE16_DEFINE}"])] if rte16 else [])
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, patches in variants.items():
        with tempfile.TemporaryDirectory() as tmp:
            shaders = Path(tmp) / "shaders"
            shutil.copytree((shaders_of or {}).get(name, root / "shaders"), shaders)
            for rel, old, new in patches:
                path = shaders / rel
                text = path.read_text()
                assert old in text, (name, rel, old)
                path.write_text(text.replace(old, new))
            built = []
            for suffix, defines in builds:
                done = subprocess.run([tool.COMPILER, *flags, f"-I{shaders / 'include'}",
                                       *defines, "-o", str(out / f"{name}{suffix}.spv"),
                                       str(shaders / kernel)],
                                      check=not suffix, capture_output=True)
                if done.returncode == 0:
                    spv = out / f"{name}{suffix}.spv"  # as the package's: buffers Aliased
                    spv.write_bytes(tool.mark_aliased(spv.read_bytes(), str(spv)))
                    built.append(spv.name)
        print(f"built {out}/" + " and ".join(built))


def same_bytes_roofline(dev, T, nbytes, repeat):
    """The roofline for a kernel moving `nbytes` (read + written): the best copy that moves
    as many, Vulkan's or PyTorch's (T, a Torch), in bytes per second."""
    half = min(nbytes // 2 // 16 * 16, dev.info.max_storage_buffer_range // 16 * 16)
    return max(copy_roofline(dev, half, repeat),
               (T.copy_roofline(half, repeat) or 0) if T.torch else 0)


def write_roofline(device, nbytes, repeat):
    """Bytes written per second of a compute kernel filling `nbytes` in 16-byte vectors
    (benchmarks/shaders/fill_words.comp, through the runtime seam): the roofline of a kernel
    that writes its bytes and reads (almost) none."""
    from pyvkgrad import kernels
    runtime = device.runtime()
    dst = runtime.buffer(nbytes)
    vectors = nbytes // 16
    wg = device.limits.local_size
    spirv, iface = benchmark_kernel("fill_words")
    push = np.array(kernels.push_words(iface, {"count": vectors}), dtype=np.uint32)
    program = runtime.program([dst], spirv, min(-(-vectors // wg), 65535),
                              kernels.specialization(iface, {"WG": wg}), len(push))
    rate = nbytes / (commands_ns(device, lambda c: c.dispatch(program, push), repeat,
                                 "write roofline") * 1e-9)
    program.destroy()
    dst.destroy()
    return rate


def diagnostic_args(argv=None, repeat=20):
    """The options the diagnostic scripts in investigations/ share: --out DIR, --quick (small
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
    hold_clock(device)
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
        if not self.cuda:
            return median_wall_ns(fn, repeat)
        fn()
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

    def copy_roofline(self, nbytes, repeat):
        if not self.cuda:
            return None
        a = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        b = self.torch.empty_like(a)
        return 2 * nbytes / (self.time_ns(lambda: b.copy_(a), repeat) * 1e-9)

    def fill_roofline(self, nbytes, repeat):
        if not self.cuda:
            return None
        a = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cuda")
        return nbytes / (self.time_ns(lambda: a.fill_(1), repeat) * 1e-9)
