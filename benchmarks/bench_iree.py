#!/usr/bin/env python3
"""IREE as a peer (benchmarks/run.py --ops iree): the same computations compiled by IREE for
Vulkan and run on the same device, beside pyvkgrad's rows for the same shapes.

Computations, written in PyTorch and exported with iree-turbine (`iree.turbine.aot.export`):
ReLU grad (aten.threshold_backward: where(x > 0, dy, 0)); nearest 2x upsample backward
(dY summed over each 2x2 window: at exactly 2x nearest and nearest-exact agree); linear 2x
upsample backward (aten.upsample_bilinear2d_backward, align_corners=False; where IREE cannot
compile it the row says "not compiled: <reason>"); BatchNorm grad in inference
(dX = scale * invstd * dY, dScale = sum(dY * (X - mean)) * invstd, dBias = sum(dY)); and the
BatchNorm training grad (dX = scale * invstd * (dY - dBias / M - xhat * dScale / M),
xhat = (X - mean) * invstd). float32 and float16.

Compiling needs iree-base-compiler, iree-turbine and torch (`pip install .[bench]`); running
needs iree-base-runtime alone. So modules are compiled on one machine into a cache folder
(default benchmarks/iree-cache/) keyed by computation, shape, dtype and Vulkan target
(`<target>/<name>_<shape>_<dtype>.vmfb`; a failed compilation leaves `.failed.txt` with the
reason) and run on another, offline, from that folder:

    python3 benchmarks/bench_iree.py --compile [--quick] [--target ampere] [--cache DIR]

Targets (target_of): `ampere` on NVIDIA (IREE 3.13 has no Hopper Vulkan target; `ampere` is
its newest, the same SPIR-V as `a100`) and on lavapipe; else `vp_android_baseline_2022`
(IREE's generic Vulkan profile). Each row checks IREE's first output against pyvkgrad's
(max_abs_diff_dx).

Timing, inputs already on the device (IREE device arrays): per call, the median host wall
time of one invocation from Python (IREE's invocation returns after the work completes); and
iree-benchmark-module's median real time per invocation (the C tool: inputs uploaded once, no
Python; submission, dispatches and wait), IREE's nearest to a kernel time. pyvkgrad's columns:
kernel time from Vulkan timestamps and the compiled operator's per-call wall time, both medians.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = HERE / "iree-cache"
NAMES = ("relu_grad", "nearest_2x_backward", "linear_2x_backward", "bn_grad",
         "bn_training_grad")
DTYPES = ("float32", "float16")


def shapes(quick):
    """{computation: shape}: ReLU on a flat tensor (elements); resample on dX [n,c,h,w] (dY is
    twice h and w); BatchNorm on X [n,c,h,w]. The full shapes are rows of run.py's table."""
    if quick:
        return {"relu_grad": (65536,), "nearest_2x_backward": (2, 4, 16, 16),
                "linear_2x_backward": (2, 4, 16, 16), "bn_grad": (2, 8, 8, 8),
                "bn_training_grad": (2, 8, 8, 8)}
    return {"relu_grad": (16 * 2**20 // 4,), "nearest_2x_backward": (32, 64, 64, 64),
            "linear_2x_backward": (32, 64, 64, 64), "bn_grad": (32, 64, 112, 112),
            "bn_training_grad": (32, 64, 112, 112)}


def target_of(device_name):
    """The Vulkan target to compile for on a device. lavapipe gets `ampere` too: with the
    generic profile its float16 results were wrong there (ReLU grad off by up to 3.9: that
    profile stores float16 as 32-bit floats), and ampere's SPIR-V runs there and agrees."""
    name = device_name.upper()
    return "ampere" if "NVIDIA" in name or "LLVMPIPE" in name else "vp_android_baseline_2022"


def key(name, shape, dtype):
    return f"{name}_{'x'.join(map(str, shape))}_{dtype}"


def inputs(name, shape, dtype, rng):
    """The computation's inputs as numpy arrays, in its argument order."""
    np_dt = np.dtype(dtype)

    def r(*s):
        return rng.standard_normal(s, dtype=np.float32).astype(np_dt)
    if name == "relu_grad":
        return [r(*shape), r(*shape)]  # x, dy
    if name.endswith("2x_backward"):
        n, c, h, w = shape
        return [r(n, c, 2 * h, 2 * w)]  # dy
    n, c, h, w = shape
    x = r(n, c, h, w)
    mean = x.astype(np.float32).mean(axis=(0, 2, 3), keepdims=True).astype(np_dt)
    var = x.astype(np.float32).var(axis=(0, 2, 3), keepdims=True).astype(np_dt)
    return [x, r(n, c, h, w), mean, var, r(1, c, 1, 1)]  # x, dy, mean, variance, scale


# ---- compiling (iree-turbine, iree-base-compiler, torch) ----------------------------------------

def _module(name, shape):
    import torch

    class M(torch.nn.Module):
        def forward(self, *a):
            if name == "relu_grad":
                x, dy = a
                return torch.ops.aten.threshold_backward(dy, x, 0.0)
            if name == "nearest_2x_backward":
                (dy,) = a
                n, c, h, w = shape
                return dy.reshape(n, c, h, 2, w, 2).sum(dim=(3, 5))
            if name == "linear_2x_backward":
                (dy,) = a
                n, c, h, w = shape
                return torch.ops.aten.upsample_bilinear2d_backward(
                    dy, [2 * h, 2 * w], [n, c, h, w], False)
            x, dy, mean, var, scale = a
            invstd = torch.rsqrt(var + 1e-5)
            dbias = dy.sum(dim=(0, 2, 3), keepdim=True)
            xhat = (x - mean) * invstd
            dscale = (dy * xhat).sum(dim=(0, 2, 3), keepdim=True)
            if name == "bn_grad":
                return scale * invstd * dy, dscale, dbias
            m = x.shape[0] * x.shape[2] * x.shape[3]
            dx = scale * invstd * (dy - dbias / m - xhat * dscale / m)
            return dx, dscale, dbias
    return M()


def compile_all(quick, target, cache):
    """Fill `cache`/`target` with every computation at `shapes(quick)`, both dtypes; a failure
    is written next to where the module would be."""
    import torch
    import iree.compiler as ireec
    import iree.turbine.aot as aot
    folder = Path(cache) / target
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, shape in shapes(quick).items():
        for dtype in DTYPES:
            k = key(name, shape, dtype)
            path = folder / f"{k}.vmfb"
            if path.exists():
                continue
            t0 = time.time()
            try:
                args = tuple(torch.from_numpy(a) for a in inputs(name, shape, dtype, rng))
                mlir = str(aot.export(_module(name, shape), args=args).mlir_module)
                blob = ireec.compile_str(mlir, target_backends=["vulkan-spirv"], input_type="torch",
                                         extra_args=[f"--iree-vulkan-target={target}"])
                path.write_bytes(blob)
                (folder / f"{k}.failed.txt").unlink(missing_ok=True)
                print(f"compiled {target}/{k}.vmfb ({len(blob)} bytes, {time.time() - t0:.1f} s)",
                      flush=True)
            except Exception as e:  # the reason goes with the cache to the machine that runs it
                reason = " ".join(str(e).split())[:400]
                (folder / f"{k}.failed.txt").write_text(f"{type(e).__name__}: {reason}\n")
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


def _iree_tool_us(path, arrays, repeat):
    """iree-benchmark-module's median real time per invocation (us), inputs from .npy files."""
    import iree.runtime as rt
    with tempfile.TemporaryDirectory() as d:
        files = []
        for i, a in enumerate(arrays):
            np.save(f"{d}/{i}.npy", a)
            files.append(f"@{d}/{i}.npy")
        results = rt.benchmark_module(str(path), entry_function="main", inputs=files,
                                      device="vulkan", benchmark_repetitions=max(3, repeat // 4),
                                      timeout=300)
    times = [r for r in results if not r.benchmark_name.endswith(("_mean", "_median", "_stddev",
                                                                   "_cv"))]
    scale = {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}
    vals = [float(r.time.split()[0]) * scale[r.time.split()[1]] for r in times]
    return statistics.median(vals) if vals else None


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
    if name.endswith("2x_backward"):
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
    op = dev.compile(cls(big, big, small, small, small, big, small, small, 1e-5))
    x, dy, mean, var, scale = (dev.upload(a) for a in arrays)
    return op, dict(input_tensor=x, input_gradient_tensor=dy, mean_tensor=mean,
                    variance_tensor=var, scale_tensor=scale, output_gradient_tensor=dev.empty(big),
                    output_scale_gradient_tensor=dev.empty(small),
                    output_bias_gradient_tensor=dev.empty(small))


def run_group(dev, quick, repeat, cache=None):
    """The IREE rows: {"iree", "target", "rows"}, or {"skipped": why}. Missing modules are
    compiled first where the compiler is importable (in a child process: it imports torch)."""
    from bench_timing import median_wall_ns, progress, vulkan_time
    if importlib.util.find_spec("iree") is None or importlib.util.find_spec("iree.runtime") is None:
        progress("    skipped: iree.runtime is not importable (pip install .[bench], or the "
                 "iree-base-runtime wheel)")
        return {"skipped": "iree.runtime is not importable"}
    import iree.runtime as rt
    cache = Path(cache or DEFAULT_CACHE)
    target = target_of(dev.name)
    folder = cache / target
    todo = [key(n, s, d) for n, s in shapes(quick).items() for d in DTYPES]
    missing = [k for k in todo if not (folder / f"{k}.vmfb").exists()
               and not (folder / f"{k}.failed.txt").exists()]
    if missing and importlib.util.find_spec("iree.compiler") is not None:
        progress(f"    compiling {len(missing)} modules for {target} into {folder}")
        subprocess.run([sys.executable, __file__, "--compile", "--target", target,
                        "--cache", str(cache), *(["--quick"] if quick else [])], check=False)
    config = rt.Config("vulkan")
    device = config.device
    out = {"iree": _version(), "target": target, "cache": str(folder),
           "per_call": "median wall of one invocation from Python, inputs on the device",
           "tool": "iree-benchmark-module: median real time per invocation, inputs uploaded "
                   "once, no Python", "rows": []}
    rng = np.random.default_rng(0)
    for name, shape in shapes(quick).items():
        for dtype in DTYPES:
            k = key(name, shape, dtype)
            row = {"computation": name, "shape": list(shape), "dtype": dtype}
            arrays = inputs(name, shape, dtype, rng)
            op, tensors = _pyvkgrad_case(dev, name, shape, dtype, arrays)
            row["pyvkgrad_kernel_us"] = vulkan_time(dev, op, tensors, repeat)[0] / 1e3
            row["pyvkgrad_per_call_us"] = median_wall_ns(lambda: op(**tensors), repeat) / 1e3
            ours = tensors["output_gradient_tensor"].numpy()
            path, failed = folder / f"{k}.vmfb", folder / f"{k}.failed.txt"
            if path.exists():
                try:
                    vm = rt.VmModule.copy_buffer(config.vm_instance, path.read_bytes())
                    fn = rt.SystemContext(vm_modules=[vm], config=config).modules.module["main"]
                    dev_in = [rt.asdevicearray(device, a) for a in arrays]
                    result = fn(*dev_in)
                    first = result[0] if isinstance(result, (tuple, list)) else result
                    theirs = _to_host(device, first).astype(np.float32)
                    row["max_abs_diff_dx"] = float(np.max(np.abs(theirs - ours.astype(np.float32))))
                    row["iree_per_call_us"] = median_wall_ns(lambda: fn(*dev_in), repeat) / 1e3
                    row["iree_tool_us"] = _iree_tool_us(path, arrays, repeat)
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
    print(f"\nIREE {group['iree']} (target {group['target']}) beside pyvkgrad, medians; IREE per "
          f"call: {group['per_call']}; IREE tool: {group['tool']}")
    head = (f"{'computation':<22}{'shape':<20}{'dtype':<9}{'pyvkgrad kernel':>16}"
            f"{'pyvkgrad call':>14}{'IREE call':>11}{'IREE tool':>11}")
    print(head)
    print("-" * len(head))
    for r in group["rows"]:
        shape = "x".join(map(str, r["shape"]))
        iree = (f"{r['iree_per_call_us']:>11.1f}{r['iree_tool_us'] or 0:>11.1f}"
                if "iree_per_call_us" in r else f"  {r.get('iree_error', '')[:90]}")
        print(f"{r['computation']:<22}{shape:<20}{r['dtype']:<9}{r['pyvkgrad_kernel_us']:>16.1f}"
              f"{r['pyvkgrad_per_call_us']:>14.1f}{iree}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="compile the IREE peer's modules into the cache")
    ap.add_argument("--compile", action="store_true", required=True)
    ap.add_argument("--quick", action="store_true", help="the small shapes (lavapipe)")
    ap.add_argument("--target", default="ampere")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = ap.parse_args(argv)
    compile_all(args.quick, args.target, args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
