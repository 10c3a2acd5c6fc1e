#!/usr/bin/env python3
"""IREE as a peer (benchmarks/run.py --ops iree): the same computations compiled by IREE for
Vulkan and run on the same device, beside pyvkgrad's rows for the same shapes.

The computations are written with PyTorch's own functions and exported with iree-turbine
(`iree.turbine.aot.export`):

- relu_grad: aten.threshold_backward(dY, X, 0), dX = dY where X > 0, else 0.
- nearest_2x_backward: aten.upsample_nearest2d_backward at 2x, dX = dY summed over each 2x2
  window (at exactly 2x PyTorch's nearest and DirectML's half-pixel nearest agree).
- linear_2x_backward: aten.upsample_bilinear2d_backward at 2x, align_corners=False. IREE 3.13
  cannot compile it: its row says "not compiled: <reason>".
- linear_2x_backward_ops: the same dX in element-wise PyTorch operations, so that IREE has a
  linear row to time: along each axis dX[i] = 0.75 (dY[2i] + dY[2i+1]) + 0.25 (dY[2i-1] +
  dY[2i+2]), an edge's missing neighbour replaced by the edge element itself (PyTorch clamps
  the source index at the border); float16 accumulates in float32, as pyvkgrad's kernel does.
- bn_grad, bn_training_grad: aten.native_batch_norm_backward in its inference (train=False:
  Mean and Variance are constants, dX = Scale * invstd * dY) and training (train=True: dX =
  Scale * invstd * (dY - mean(dY) - (X - Mean) * invstd^2 * mean(dY * (X - Mean)))) forms,
  invstd = 1 / sqrt(Variance + 1e-5); dScale = sum(dY * (X - Mean)) * invstd, dBias =
  sum(dY), over N, H and W. IREE cannot legalize the aten operator itself, so the module calls
  PyTorch's decomposition of it (torch._decomp), which is PyTorch's own definition in aten
  operations (float16 computed in float32).

Compiling needs iree-base-compiler, iree-turbine and torch (`pip install .[bench]`); running
needs iree-base-runtime alone. So the modules are compiled on one machine into a cache folder
(default benchmarks/iree-cache/) and run from there on another, offline:

    python3 benchmarks/bench_iree.py --compile [--quick] [--target ampere] [--cache DIR]

A module lives at `<cache>/<target>/<computation>_<shape>_<dtype>.vmfb`; a failed compilation
leaves `.failed.txt` there instead, with the reason; `<target>/compiler.txt` names the IREE
compiler that wrote the folder (a runtime of another version may refuse its modules).

Targets (target_of): `ampere` on NVIDIA (IREE 3.13 has no Hopper Vulkan target; `ampere` is
its newest, the same SPIR-V as `a100`); `llvmpipe` on lavapipe (IREE's own target for it:
`ampere`'s modules, tuned for NVIDIA's 32-lane subgroups, give wrong reductions there at every
lavapipe subgroup width, 4 to 16 lanes; the generic profile stores float16 as float32); else
`vp_android_baseline_2022`.

Each row checks every output of IREE's module against pyvkgrad's (max_abs_diff, one per
output; `agrees`: each within tolerance(dtype) of the largest magnitude of pyvkgrad's output).

Timing, inputs already on the device, all medians:
- iree_per_call_us: one invocation from Python on IREE device arrays (it returns after the
  work completes: the function's results are ready);
- iree_tool_us: iree-benchmark-module's real time per invocation, the median of 5 repetitions
  of at least 0.2 s (the C tool: inputs uploaded once, no Python; submission, dispatches and
  wait);
- iree_kernel_us: the device time of IREE's dispatches per invocation, from IREE's own HAL
  profiling (iree-benchmark-module --device_profiling_mode=dispatch-events, read back with
  iree-profile): each command buffer's span from its first dispatch's start to its last one's
  end (device timestamps), summed over the command buffers of one invocation; pyvkgrad's
  kernel time is the same span of its own command buffer;
- pyvkgrad_kernel_us (Vulkan timestamps) and pyvkgrad_per_call_us (the compiled operator's
  call from Python).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = HERE / "iree-cache"
MiB = 2**20
EPSILON = 1e-5


def cases(quick):
    """(computation, shape, dtype) of every row. ReLU: a flat tensor of that many elements;
    resample: dX [n,c,h,w] (dY is twice h and w); BatchNorm: X [n,c,h,w]. The full cases are
    bench_cases.py's for these operators (ReLU: 16 and 256 MiB per tensor; resample: its 2x
    NCHW case; BatchNorm: its three shapes); the quick ones are small, for lavapipe."""
    out = []
    for dtype in ("float32", "float16"):
        size = np.dtype(dtype).itemsize
        relu = [(65536,)] if quick else [(16 * MiB // size,), (256 * MiB // size,)]
        resample = [(2, 4, 16, 16)] if quick else [(32, 64, 64, 64)]
        bn = [(2, 8, 8, 8)] if quick else [(32, 64, 112, 112), (256, 256, 14, 14),
                                           (256, 512, 7, 7)]
        out += [("relu_grad", s, dtype) for s in relu]
        out += [(name, s, dtype) for name in ("nearest_2x_backward", "linear_2x_backward",
                                              "linear_2x_backward_ops") for s in resample]
        out += [(name, s, dtype) for name in ("bn_grad", "bn_training_grad") for s in bn]
    return out


def tolerance(dtype):
    """Largest |IREE - pyvkgrad| accepted, relative to the largest |pyvkgrad| of that output:
    float32 sums in another order (BatchNorm's reductions over up to 401,408 elements), float16
    a few units in the last place of the largest result."""
    return 1e-4 if dtype == "float32" else 4e-3


def target_of(device_name):
    """The Vulkan target to compile for on a device (see the module's docstring); the
    `llvmpipe` modules agree with pyvkgrad at lavapipe's 4, 8 and 16-lane subgroups
    (LP_NATIVE_VECTOR_WIDTH 128, 256, 512)."""
    name = device_name.upper()
    if "NVIDIA" in name:
        return "ampere"
    return "llvmpipe" if "LLVMPIPE" in name else "vp_android_baseline_2022"


def key(name, shape, dtype):
    return f"{name}_{'x'.join(map(str, shape))}_{dtype}"


def inputs(name, shape, dtype, rng):
    """The computation's inputs as numpy arrays, in its argument order. BatchNorm's Mean and
    Variance are X's own (as the training forward gives them), so its two forms of dX agree
    with DirectML's, which centres X on its own mean."""
    np_dt = np.dtype(dtype)

    def r(*s):
        return rng.standard_normal(s, dtype=np.float32).astype(np_dt)
    if name == "relu_grad":
        return [r(*shape), r(*shape)]  # x, dy
    if "_2x_backward" in name:
        n, c, h, w = shape
        return [r(n, c, 2 * h, 2 * w)]  # dy
    n, c, h, w = shape
    x = r(n, c, h, w)
    mean = x.astype(np.float32).mean(axis=(0, 2, 3), keepdims=True).astype(np_dt)
    var = x.astype(np.float32).var(axis=(0, 2, 3), keepdims=True).astype(np_dt)
    return [x, r(n, c, h, w), mean, var, r(1, c, 1, 1)]  # x, dy, mean, variance, scale


# ---- compiling (iree-turbine, iree-base-compiler, torch) ----------------------------------------

def _linear_2x_backward_1d(torch, dy, dim):
    """dX along one axis of a 2x linear upsample (align_corners=False): the even and odd
    elements of dY are the two outputs each input element feeds with weight 0.75; each also
    feeds its neighbour's nearer output with 0.25 (at the border, itself)."""
    even, odd = dy.unflatten(dim, (-1, 2)).unbind(dim + 1)
    h = even.shape[dim]
    nxt = torch.cat([even.narrow(dim, 1, h - 1), odd.narrow(dim, h - 1, 1)], dim)
    prev = torch.cat([even.narrow(dim, 0, 1), odd.narrow(dim, 0, h - 1)], dim)
    return 0.75 * (even + odd) + 0.25 * (nxt + prev)


def _module(name, shape):
    import torch
    from torch._decomp.decompositions import native_batch_norm_backward

    class M(torch.nn.Module):
        def forward(self, *a):
            if name == "relu_grad":
                x, dy = a
                return torch.ops.aten.threshold_backward(dy, x, 0.0)
            n, c, h, w = shape
            if name == "nearest_2x_backward":
                return torch.ops.aten.upsample_nearest2d_backward(a[0], [2 * h, 2 * w],
                                                                  [n, c, h, w])
            if name == "linear_2x_backward":
                return torch.ops.aten.upsample_bilinear2d_backward(
                    a[0], [2 * h, 2 * w], [n, c, h, w], False)
            if name == "linear_2x_backward_ops":
                dy = a[0].float()
                dx = _linear_2x_backward_1d(torch, _linear_2x_backward_1d(torch, dy, 2), 3)
                return dx.to(a[0].dtype)
            x, dy, mean, var, scale = a
            mean, var, scale = mean.reshape(c), var.reshape(c), scale.reshape(c)
            invstd = torch.rsqrt(var.float() + EPSILON)
            return native_batch_norm_backward(dy, x, scale, mean, var, mean, invstd,
                                              name == "bn_training_grad", EPSILON,
                                              [True, True, True])
    return M()


def compile_all(quick, target, cache):
    """Fill `cache`/`target` with every case of `cases(quick)`; a failure is written next to
    where the module would be."""
    import warnings
    import iree.compiler as ireec
    import iree.turbine.aot as aot
    import torch
    from importlib.metadata import version
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.export's, per export
    folder = Path(cache) / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compiler.txt").write_text(f"iree-base-compiler {version('iree-base-compiler')}, "
                                         f"iree-turbine {version('iree-turbine')}, "
                                         f"torch {torch.__version__}\n")
    rng = np.random.default_rng(0)
    for name, shape, dtype in cases(quick):
        k = key(name, shape, dtype)
        path, failed = folder / f"{k}.vmfb", folder / f"{k}.failed.txt"
        if path.exists() or failed.exists():
            continue
        t0 = time.time()
        try:
            args = tuple(torch.from_numpy(a) for a in inputs(name, shape, dtype, rng))
            mlir = str(aot.export(_module(name, shape), args=args).mlir_module)
            blob = ireec.compile_str(mlir, target_backends=["vulkan-spirv"], input_type="torch",
                                     extra_args=[f"--iree-vulkan-target={target}"])
            path.write_bytes(blob)
            print(f"compiled {target}/{k}.vmfb ({len(blob)} bytes, {time.time() - t0:.1f} s)",
                  flush=True)
        except Exception as e:  # the reason goes with the cache to the machine that runs it
            reason = " ".join(str(e).split())[:400]
            failed.write_text(f"{type(e).__name__}: {reason}\n")
            print(f"not compiled {target}/{k}: {type(e).__name__}: {reason[:200]}", flush=True)


# ---- running (iree-base-runtime) ----------------------------------------------------------------

def _to_host(device, array):
    """An IREE device array's contents through a host-visible staging buffer (to_host imports
    host memory, which lavapipe refuses: 4096-byte alignment)."""
    import iree.runtime as rt
    src = array._buffer_view.get_buffer()
    host = device.allocator.allocate_buffer(
        memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
        allowed_usage=int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED),
        allocation_size=src.byte_length())
    sem = device.create_semaphore(0)
    device.queue_copy(src, host, wait_semaphores=rt.HalFence.create_at(sem, 0),
                      signal_semaphores=rt.HalFence.create_at(sem, 1))
    rt.HalFence.create_at(sem, 1).wait()
    return np.array(host.map().asarray(array.shape, array.dtype))


def _tools():
    """iree-benchmark-module and iree-profile, shipped in iree-base-runtime's wheel."""
    from iree.runtime.benchmark import benchmark_exe
    bench = Path(benchmark_exe()).resolve()
    return bench, bench.parent / "iree-profile"


def _iree_tool_us(path, arrays, repeat):
    """(iree-benchmark-module's median real time per invocation, IREE's kernel time per
    invocation from its HAL profiling), both us; None where one is unavailable."""
    bench, profile = _tools()
    with tempfile.TemporaryDirectory() as d:
        argv = [str(bench), "--device=vulkan", f"--module={path}", "--function=main"]
        for i, a in enumerate(arrays):
            np.save(f"{d}/{i}.npy", a)
            argv.append(f"--input=@{d}/{i}.npy")
        subprocess.run([*argv, "--benchmark_repetitions=5", "--benchmark_min_time=0.2s",
                        f"--benchmark_out={d}/t.json", "--benchmark_out_format=json"],
                       capture_output=True, timeout=300, check=True)
        runs = json.loads(Path(f"{d}/t.json").read_text())["benchmarks"]
        scale = {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}
        walls = [r["real_time"] * scale[r["time_unit"]] for r in runs
                 if r.get("run_type") == "iteration"]
        tool_us = statistics.median(walls) if walls else None
        kernel_us = None
        res = subprocess.run([*argv, "--benchmark_repetitions=1",
                              f"--benchmark_min_time={max(repeat, 3)}x",
                              "--device_profiling_mode=dispatch-events",
                              f"--device_profiling_output={d}/p.ireeprof"],
                             capture_output=True, timeout=300)
        if res.returncode == 0 and Path(f"{d}/p.ireeprof").exists():
            out = subprocess.run([str(profile), "command", "--format=jsonl", f"{d}/p.ireeprof"],
                                 capture_output=True, text=True, timeout=300).stdout
            kernel_us = _kernel_us(json.loads(line) for line in out.splitlines() if line.strip())
    return tool_us, kernel_us


def _kernel_us(records):
    """From iree-profile's command records: the median span (us) of each command buffer that
    ran dispatches, summed over those command buffers (one invocation's)."""
    spans = {}
    for r in records:
        if r.get("type") == "command_execution" and r.get("dispatches") and "span_ns" in r:
            spans.setdefault(r["command_buffer_id"], []).append(r["span_ns"])
    return sum(statistics.median(s) for s in spans.values()) / 1e3 if spans else None


# pyvkgrad's output fields, in the order of IREE's results.
_OUTPUTS = ("output_gradient_tensor", "output_scale_gradient_tensor",
            "output_bias_gradient_tensor")


def _pyvkgrad_case(dev, name, shape, dtype, arrays):
    """pyvkgrad's compiled operator for the computation, bound to device copies of `arrays`."""
    import pyvkgrad
    from pyvkgrad import DataType, TensorDesc
    dt = DataType.FLOAT32 if dtype == "float32" else DataType.FLOAT16
    if name == "relu_grad":
        d = TensorDesc(dt, shape)
        op = dev.compile(pyvkgrad.ActivationReluGradDesc(d, d, d))
        return op, dict(input_tensor=dev.upload(arrays[0]), input_gradient_tensor=dev.upload(
            arrays[1]), output_gradient_tensor=dev.empty(d))
    if "_2x_backward" in name:
        n, c, h, w = shape
        dy_d, dx_d = TensorDesc(dt, (n, c, 2 * h, 2 * w)), TensorDesc(dt, shape)
        mode = "nearest_neighbor" if name.startswith("nearest") else "linear"
        op = dev.compile(pyvkgrad.ResampleGradDesc(dy_d, dx_d, mode, (1, 1, 2, 2), (0.5,) * 4,
                                                   (-0.5,) * 4))
        return op, dict(input_gradient_tensor=dev.upload(arrays[0]),
                        output_gradient_tensor=dev.empty(dx_d))
    big, small = TensorDesc(dt, shape), TensorDesc(dt, (1, shape[1], 1, 1))
    cls = (pyvkgrad.BatchNormalizationTrainingGradDesc if name == "bn_training_grad"
           else pyvkgrad.BatchNormalizationGradDesc)
    op = dev.compile(cls(big, big, small, small, small, big, small, small, EPSILON))
    x, dy, mean, var, scale = (dev.upload(a) for a in arrays)
    return op, dict(input_tensor=x, input_gradient_tensor=dy, mean_tensor=mean,
                    variance_tensor=var, scale_tensor=scale, output_gradient_tensor=dev.empty(big),
                    output_scale_gradient_tensor=dev.empty(small),
                    output_bias_gradient_tensor=dev.empty(small))


def _compare(row, device, results, tensors, dtype):
    """Every IREE result against pyvkgrad's output in the same place (flattened: IREE's dScale
    and dBias are [C], pyvkgrad's [1,C,1,1])."""
    results = results if isinstance(results, (tuple, list)) else [results]
    diffs, agrees = [], True
    for field, result in zip(_OUTPUTS, results):
        theirs = _to_host(device, result).astype(np.float64).ravel()
        ours = tensors[field].numpy().astype(np.float64).ravel()
        diff = float(np.max(np.abs(theirs - ours)))
        diffs.append(diff)
        agrees &= theirs.shape == ours.shape and diff <= tolerance(dtype) * max(
            float(np.max(np.abs(ours))), 1e-30)
    row["max_abs_diff"] = diffs
    row["agrees"] = bool(agrees) and len(results) == sum(f in tensors for f in _OUTPUTS)


def run_group(dev, quick, repeat, cache=None):
    """The IREE rows: {"iree", "target", "rows"}, or {"skipped": why}. Missing modules are
    compiled first where the compiler is importable (in a child process: it imports torch)."""
    from bench_timing import hold_clock, median_wall_ns, progress, vulkan_time
    if importlib.util.find_spec("iree") is None or importlib.util.find_spec("iree.runtime") is None:
        progress("    skipped: iree.runtime is not importable (pip install .[bench], or the "
                 "iree-base-runtime wheel)")
        return {"skipped": "iree.runtime is not importable"}
    import iree.runtime as rt
    cache = Path(cache or DEFAULT_CACHE)
    target = target_of(dev.name)
    folder = cache / target
    missing = [key(*c) for c in cases(quick) if not (folder / f"{key(*c)}.vmfb").exists()
               and not (folder / f"{key(*c)}.failed.txt").exists()]
    if missing and importlib.util.find_spec("iree.compiler") is not None:
        progress(f"    compiling {len(missing)} modules for {target} into {folder}")
        subprocess.run([sys.executable, __file__, "--compile", "--target", target,
                        "--cache", str(cache), *(["--quick"] if quick else [])], check=False)
    config = rt.Config("vulkan")
    device = config.device
    compiler = folder / "compiler.txt"
    out = {"iree": _version(), "target": target, "cache": str(folder),
           "compiled_by": compiler.read_text().strip() if compiler.exists() else None,
           "per_call": "median wall of one invocation from Python, inputs on the device",
           "tool": "iree-benchmark-module: median real time per invocation, inputs uploaded "
                   "once, no Python",
           "kernel": "IREE's HAL profiling (dispatch events): median span of the invocation's "
                     "dispatches on the device",
           "rows": []}
    rng = np.random.default_rng(0)
    for name, shape, dtype in cases(quick):
        k = key(name, shape, dtype)
        row = {"computation": name, "shape": list(shape), "dtype": dtype}
        arrays = inputs(name, shape, dtype, rng)
        op, tensors = _pyvkgrad_case(dev, name, shape, dtype, arrays)
        row["pyvkgrad_kernel_us"] = float(vulkan_time(dev, op, tensors, repeat)[0]) / 1e3
        row["pyvkgrad_per_call_us"] = median_wall_ns(lambda: op(**tensors), repeat, dev) / 1e3
        path, failed = folder / f"{k}.vmfb", folder / f"{k}.failed.txt"
        if path.exists():
            try:
                vm = rt.VmModule.copy_buffer(config.vm_instance, path.read_bytes())
                fn = rt.SystemContext(vm_modules=[vm], config=config).modules.module["main"]
                dev_in = [rt.asdevicearray(device, a) for a in arrays]
                _compare(row, device, fn(*dev_in), tensors, dtype)
                row["iree_per_call_us"] = median_wall_ns(lambda: fn(*dev_in), repeat, dev) / 1e3
                del dev_in
                hold_clock(dev)  # the tool runs on the same GPU: at the working clock too
                row["iree_tool_us"], row["iree_kernel_us"] = _iree_tool_us(path, arrays, repeat)
            except Exception as e:
                row["iree_error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        elif failed.exists():
            row["iree_error"] = "not compiled: " + failed.read_text().strip()[:300]
        else:
            row["iree_error"] = (f"not compiled: no {target}/{k}.vmfb in {cache} and no "
                                 "IREE compiler here (bench_iree.py --compile elsewhere)")
        for t in tensors.values():
            t.close()
        op.close()
        out["rows"].append(row)
        progress(f"    {row}")
    return out


def _version():
    try:
        from importlib.metadata import version
        return version("iree-base-runtime")
    except Exception:
        return None


def print_rows(group):
    if "rows" not in group:
        print(f"IREE: skipped ({group.get('skipped')})")
        return
    print(f"\nIREE {group['iree']} (target {group['target']}; modules: {group['compiled_by']}) "
          f"beside pyvkgrad, medians, us. IREE call: {group['per_call']}; IREE tool: "
          f"{group['tool']}; IREE kernel: {group['kernel']}")
    head = (f"{'computation':<24}{'shape':<16}{'dtype':<9}{'pyvkgrad kernel':>16}"
            f"{'pyvkgrad call':>14}{'IREE kernel':>12}{'IREE call':>11}{'IREE tool':>11}"
            f"  same result")
    print(head)
    print("-" * len(head))

    def us(v):
        return f"{v:.1f}" if v is not None else "-"
    for r in group["rows"]:
        shape = "x".join(map(str, r["shape"]))
        iree = (f"{us(r.get('iree_kernel_us')):>12}{us(r['iree_per_call_us']):>11}"
                f"{us(r.get('iree_tool_us')):>11}  {'yes' if r['agrees'] else 'NO'}"
                if "iree_per_call_us" in r else f"  {r.get('iree_error', '')[:90]}")
        print(f"{r['computation']:<24}{shape:<16}{r['dtype']:<9}{r['pyvkgrad_kernel_us']:>16.1f}"
              f"{r['pyvkgrad_per_call_us']:>14.1f}{iree}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="compile the IREE peer's modules into the cache")
    ap.add_argument("--compile", action="store_true", required=True)
    ap.add_argument("--quick", action="store_true", help="the small shapes (lavapipe)")
    ap.add_argument("--target", default="ampere",
                    help="IREE's Vulkan target: ampere (NVIDIA), llvmpipe (lavapipe), ...")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = ap.parse_args(argv)
    compile_all(args.quick, args.target, args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
