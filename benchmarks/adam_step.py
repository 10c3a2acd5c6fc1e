"""`pyvkgrad.torch.optim.Adam`'s whole step against PyTorch's Adam on the same parameters.

    python benchmarks/adam_step.py [--quick] [--sets digits,resnet18,small] [--out DIR]

Issue 30 asks for the bridge's step to beat PyTorch's CPU Adam on the same parameters. The
bridge's step includes everything a training loop pays: the parameters and gradients copied to
the device, ADAM_OPTIMIZER, the parameters copied back into the torch tensors. Parameter sets:
- digits: examples/train_digits.py's model (10 tensors, 3,866 elements);
- resnet18: ResNet-18's 62 tensors (11.7 M elements), as torchvision builds them;
- small: 200 tensors of 256 elements (the biases and norms of a deep model).
Each float32, with standard-normal gradients (two sets, in turn). Cases, each run in blocks of
steps in turn (`in_blocks`; median and least ms of --repeat steps):
- pyvkgrad: the bridge's Adam, constant lr; pyvkgrad+onecycle: under OneCycleLR (the schedule's
  own step is not timed), which changes the learning rate and beta1 every step;
- torch cpu (PyTorch's default for CPU tensors: a loop over them), torch cpu foreach, torch
  cpu fused;
- torch cuda fused (where CUDA is present): the parameters on the GPU, for scale only.
Writes adam_step.json into --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
import pyvkgrad.torch as vt  # noqa: E402
from pyvkgrad.torch.optim import Adam  # noqa: E402


def resnet18_shapes():
    """ResNet-18's parameter shapes (conv weights, BatchNorm weights and biases, the fc)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            shapes += [(cout, cin, 3, 3), (cout,), (cout,), (cout, cout, 3, 3), (cout,), (cout,)]
            if block == 0 and (s != 1 or cin != cout):
                shapes += [(cout, cin, 1, 1), (cout,), (cout,)]
            cin = cout
    return shapes + [(1000, 512), (1000,)]


SETS = {
    "digits": lambda: [(8, 1, 3, 3), (8,), (8,), (8,), (16, 8, 3, 3), (16,), (16,), (16,),
                       (10, 256), (10,)],
    "resnet18": resnet18_shapes,
    "small": lambda: [(256,)] * 200,
}


def make_case(shapes, make_opt, device="cpu", schedule=False):
    """(step function, per-step setup) for an optimizer over fresh parameters of `shapes`."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(device) for s in shapes] for _ in range(2)]
    opt = make_opt(params)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.01, total_steps=10 ** 6) if schedule \
        else None
    count = [0]

    def setup():
        for p, g in zip(params, grads[count[0] % 2]):
            p.grad = g
        if sched is not None and count[0]:
            sched.step()  # (after the first step, as PyTorch expects)
        count[0] += 1

    def run():
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return run, setup


def in_blocks(cases, repeat, rounds=5):
    """Median and least ms of each case over `repeat` steps, in `rounds` rounds that run each
    case in turn for a block of steps (the first step of a block untimed): a case's steps run
    back to back, as in training, while a shared machine's drift reaches every case alike
    (stepping the cases in turn one step at a time let one library's worker threads, still
    spinning, slow the next one's step)."""
    times = {name: [] for name in cases}
    block = -(-repeat // rounds)
    for _ in range(rounds):
        for name, (run, setup) in cases.items():
            for i in range(block + 1):
                setup()
                t = time.perf_counter()
                run()
                if i:
                    times[name].append(time.perf_counter() - t)
    return ({name: 1e3 * statistics.median(ts) for name, ts in times.items()},
            {name: 1e3 * min(ts) for name, ts in times.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args(argv)
    repeat = args.repeat or (5 if args.quick else 40)
    dev = pyvkgrad.default_device()
    vt.set_device(dev)
    # A warm-up step compiles the kernel before any case is timed (the pipeline is shared).
    make_case([(4,)], lambda p: Adam(p))[1]()
    cuda = torch.cuda.is_available()
    rows = []
    for name in args.sets.split(","):
        shapes = SETS[name]()
        elements = sum(int(np.prod(s)) for s in shapes)
        cases = {
            "pyvkgrad": make_case(shapes, lambda p: Adam(p, lr=1e-3)),
            "pyvkgrad+onecycle": make_case(shapes, lambda p: Adam(p, lr=1e-3), schedule=True),
            "torch cpu": make_case(shapes, lambda p: torch.optim.Adam(p, lr=1e-3)),
            "torch cpu foreach": make_case(
                shapes, lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True)),
            "torch cpu fused": make_case(
                shapes, lambda p: torch.optim.Adam(p, lr=1e-3, fused=True)),
        }
        if cuda:
            cases["torch cuda fused"] = make_case(
                shapes, lambda p: torch.optim.Adam(p, lr=1e-3, fused=True), device="cuda")
        ms, least = in_blocks(cases, repeat)
        row = dict(set=name, tensors=len(shapes), elements=elements, ms=ms, least_ms=least,
                   x_torch_cpu=ms["torch cpu"] / ms["pyvkgrad"],
                   x_best_torch_cpu=min(v for k, v in ms.items() if k.startswith("torch cpu"))
                   / ms["pyvkgrad"])
        rows.append(row)
        print(f"{name} ({len(shapes)} tensors, {elements} elements), median (least) ms: "
              + ", ".join(f"{k} {v:.3f} ({least[k]:.3f})" for k, v in ms.items())
              + f"; x torch cpu {row['x_torch_cpu']:.2f}, x the best CPU Adam "
              f"{row['x_best_torch_cpu']:.2f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "adam_step.json").write_text(json.dumps(dict(
        device=dev.name, torch=torch.__version__, threads=torch.get_num_threads(),
        host=platform.processor() or platform.machine(), repeat=repeat, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
