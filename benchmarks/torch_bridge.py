"""The PyTorch bridge's cost: per-module overhead against the one-call functions, and a small
model's backward against PyTorch's own, on CPU (lavapipe) or CUDA machines.

    python benchmarks/torch_bridge.py [--quick] [--out DIR] [--executions reuse,one-call]
                                      [--sizes small,large] [--repeat N]
    PYVKGRAD_DEVICE=0 python benchmarks/torch_bridge.py        # which Vulkan device

Measured (median wall time of --repeat runs, after warm-up):

1. per module (ReLU, BatchNorm2d training, bilinear Upsample): the backward through
   pyvkgrad.torch (autograd.grad on the module's output; the forward is not timed) against the
   one-call function on the same numpy arrays (pyvkgrad.activation_relu_grad, ...): the
   difference is the bridge's own overhead (torch <-> numpy, autograd, program lookup). PyTorch's
   own backward of the same module on --torch-device is shown beside it;
2. a small CNN (conv, BatchNorm, ReLU, bilinear upsample blocks), whole backward: PyTorch's own
   on --torch-device, and with pyvkgrad's backward (pyvkgrad.torch.convert) in each execution;
3. determinism: bilinear backward under torch.use_deterministic_algorithms(True): PyTorch's
   (CUDA raises) and the bridge's, run twice and compared bit for bit.

On a CUDA machine --torch-device defaults to cuda: the bridge then also pays for copying each
gradient from the CUDA device to the host and back (PyTorch tensors cannot live on the Vulkan
device), which the figures include. Writes torch_bridge.json into --out.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
import pyvkgrad.torch as vt  # noqa: E402
from pyvkgrad.torch import _runtime  # noqa: E402


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_time(fn, repeat, device=None, setup=None):
    """Median seconds of fn(setup()) over `repeat` runs, after two warm-up runs."""
    return interleaved([(fn, setup, device)], repeat)[0]


def interleaved(cases, repeat):
    """Median seconds of each (fn, setup) pair, the cases run in turn within every repeat, so
    that a shared machine's load drifts over all of them alike."""
    times = [[] for _ in cases]
    for i in range(repeat + 2):
        for k, (fn, setup, device) in enumerate(cases):
            arg = setup() if setup else None
            if device is not None:
                sync(device)
            start = time.perf_counter()
            fn(arg)
            if device is not None:
                sync(device)
            if i >= 2:
                times[k].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


# ---- 1. per module -----------------------------------------------------------------------------

SHAPES = {"small": (2, 16, 16, 16), "medium": (4, 32, 28, 28), "large": (8, 64, 56, 56)}


def module_cases(size):
    n, c, h, _ = SHAPES[size]
    x = torch.randn(n, c, h, h)
    return [
        ("relu", nn.ReLU(), vt.ReLU(), x,
         lambda xn, dyn: pyvkgrad.activation_relu_grad(np.maximum(xn, 0), dyn)),
        ("batch_norm (training)", nn.BatchNorm2d(c), vt.BatchNorm2d(c), x,
         lambda xn, dyn: pyvkgrad.batch_normalization_training_grad(
             xn, dyn, xn.mean(axis=(0, 2, 3), keepdims=True),
             xn.var(axis=(0, 2, 3), keepdims=True), np.ones((1, c, 1, 1), np.float32), 1e-5)),
        ("upsample bilinear x2", nn.Upsample(scale_factor=2, mode="bilinear"),
         vt.Upsample(scale_factor=2, mode="bilinear"), x,
         lambda xn, dyn: pyvkgrad.resample_grad(
             dyn, xn.shape, interpolation_mode="linear", scales=(1, 1, 2, 2))),
    ]


def per_module(args, tdev):
    rows = []
    cases = [case for size in args.sizes for case in module_cases(size)]
    for name, ref, ours, x, one_call in cases:
        with torch.no_grad():
            y = ref(x)
        dy = torch.randn_like(y)
        xn, dyn = x.numpy(), dy.numpy()
        xb = x.clone().requires_grad_()
        xt, dyt = x.detach().to(tdev).requires_grad_(), dy.to(tdev)
        ref = ref.to(tdev)
        t_one_call, t_bridge, t_torch = interleaved([
            (lambda _: one_call(xn, dyn), None, None),
            (lambda y: torch.autograd.grad(y, xb, dy), lambda: ours(xb), None),
            (lambda y: torch.autograd.grad(y, xt, dyt), lambda: ref(xt), tdev)], args.repeat)
        rows.append(dict(module=name, shape=list(x.shape), one_call_ms=1e3 * t_one_call,
                         bridge_ms=1e3 * t_bridge, overhead_ms=1e3 * (t_bridge - t_one_call),
                         torch_ms=1e3 * t_torch, torch_device=str(tdev)))
    return rows


# ---- 2. a small model --------------------------------------------------------------------------

def small_cnn(c=32):
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="bilinear"),
        nn.Conv2d(c, c, 3, stride=2, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Upsample(scale_factor=0.5, mode="nearest"),
        nn.Flatten(), nn.LazyLinear(10))


def whole_model(args, tdev):
    n, h = (8, 16) if args.quick else (32, 32)
    torch.manual_seed(0)
    x = torch.randn(n, 3, h, h)
    base = small_cnn()
    base(x)  # materialise the lazy layer
    target = torch.randint(10, (n,))
    rows = []

    def timed(model, xin, tgt, device):
        params = list(model.parameters())

        def setup():
            return F.cross_entropy(model(xin), tgt)
        return median_time(lambda loss: torch.autograd.grad(loss, params), args.repeat,
                           device, setup)

    ref = copy.deepcopy(base).to(tdev)
    rows.append(dict(backward="pytorch", device=str(tdev),
                     ms=1e3 * timed(ref, x.to(tdev), target.to(tdev), tdev)))
    for execution in args.executions:
        vt.set_options(execution=execution)
        _runtime.clear_programs()
        model = vt.convert(copy.deepcopy(base)).to(tdev)
        rows.append(dict(backward=f"pyvkgrad ({execution})", device=vt.get_device().name,
                         torch_device=str(tdev),
                         ms=1e3 * timed(model, x.to(tdev), target.to(tdev), tdev)))
    vt.set_options(execution=_runtime.DEFAULT_EXECUTION)
    # PyTorch once more at the end: on a shared machine the load may have changed meanwhile.
    rows.append(dict(backward="pytorch (again)", device=str(tdev),
                     ms=1e3 * timed(ref, x.to(tdev), target.to(tdev), tdev)))
    return rows


# ---- 3. determinism ----------------------------------------------------------------------------

def determinism(tdev):
    x = torch.randn(4, 16, 33, 47, device=tdev, requires_grad=True)
    dy = torch.randn(4, 16, 66, 94, device=tdev)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    out = {}
    try:
        try:
            torch.autograd.grad(F.interpolate(x, scale_factor=2, mode="bilinear"), x, dy)
            out["pytorch"] = "runs"
        except RuntimeError as e:
            out["pytorch"] = f"raises: {str(e).splitlines()[0][:120]}"
        runs = [torch.autograd.grad(vt.interpolate(x, scale_factor=2, mode="bilinear"), x,
                                    dy)[0] for _ in range(2)]
        out["pyvkgrad"] = ("runs, bitwise reproducible" if torch.equal(runs[0], runs[1])
                           else "runs, NOT reproducible")
    finally:
        torch.use_deterministic_algorithms(before)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--torch-device", default=None,
                    help="where PyTorch runs: cuda when available, else cpu")
    ap.add_argument("--executions", default="reuse,one-call,fresh",
                    help="bridge executions to time (reuse, one-call, fresh)")
    ap.add_argument("--sizes", default=None,
                    help=f"module input sizes, of {list(SHAPES)} (default small,large; "
                         f"--quick: small,medium)")
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args(argv)
    args.sizes = (args.sizes or ("small,medium" if args.quick else "small,large")).split(",")
    args.repeat = args.repeat or (5 if args.quick else 20)
    args.executions = [e for e in args.executions.split(",") if e]
    tdev = torch.device(args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    vk = vt.get_device()
    info = dict(vulkan_device=vk.name, torch=torch.__version__, torch_device=str(tdev),
                torch_threads=torch.get_num_threads(), python=platform.python_version(),
                machine=platform.machine(),
                cuda=torch.cuda.get_device_name(tdev) if tdev.type == "cuda" else None)
    print(json.dumps(info))
    result = dict(info=info, per_module=per_module(args, tdev),
                  model=whole_model(args, tdev), determinism=determinism(tdev))
    print("\n1. backward of one module (ms; overhead = bridge - one-call function)")
    print(f"{'module':24s} {'input':>16s} {'one-call':>9s} {'bridge':>9s} {'overhead':>9s} "
          f"{'pytorch ' + tdev.type:>13s}")
    for r in result["per_module"]:
        print(f"{r['module']:24s} {'x'.join(map(str, r['shape'])):>16s} {r['one_call_ms']:9.2f} "
              f"{r['bridge_ms']:9.2f} {r['overhead_ms']:9.2f} {r['torch_ms']:13.2f}")
    print("\n2. small CNN, whole backward (ms)")
    for r in result["model"]:
        print(f"{r['backward']:24s} {r['ms']:9.2f}   on {r['device']}")
    print("\n3. bilinear backward under torch.use_deterministic_algorithms(True)")
    for k, v in result["determinism"].items():
        print(f"{k:10s} {v}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_bridge.json").write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out / 'torch_bridge.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
