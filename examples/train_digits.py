"""Train a small CNN on scikit-learn's bundled digits (8x8 images, no download) twice from the
same initial weights: once with PyTorch's own backward, once with pyvkgrad's (the model passed
through `pyvkgrad.torch.convert`, so BatchNorm, ReLU and Upsample backpropagate on a Vulkan
device). Prints both losses step by step and both final test accuracies, and saves a plot of
the two loss curves.

    python examples/train_digits.py                        # 300 steps, plot in digits_loss.png
    python examples/train_digits.py --steps 20 --no-plot
    PYVKGRAD_DEVICE=1 python examples/train_digits.py      # another Vulkan device

Needs torch and scikit-learn (and matplotlib for the plot), the [torch] and [examples] extras:
pip install 'pyvkgrad[torch,examples]' (a CPU build of torch first: README.md, PyTorch).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

import pyvkgrad.torch as vt


def build_model() -> nn.Module:
    """conv -> BatchNorm -> ReLU -> bilinear upsample -> strided conv -> BatchNorm -> ReLU ->
    nearest downsample -> linear."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),                       # 8 x 8
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Upsample(scale_factor=2, mode="bilinear"),        # 16 x 16
        nn.Conv2d(8, 16, 3, stride=2, padding=1),            # 8 x 8
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Upsample(scale_factor=0.5, mode="nearest"),       # 4 x 4
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def load_data(seed: int = 0):
    """(train images, train labels), (test images, test labels): 1437 / 360 of the 1797
    digits, images scaled to [0, 1] as (N, 1, 8, 8) float32."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    test, train = order[:360], order[360:]
    return (x[train], y[train]), (x[test], y[test])


def train(model: nn.Module, data, steps: int, batch_size: int = 64, lr: float = 0.05,
          seed: int = 0, channels_last: bool = False, log=None, optimizer=None):
    """SGD with momentum (or `optimizer(parameters)`) for `steps` minibatches (the same
    minibatches for a given seed). Returns (per-step losses, test accuracy, seconds spent in
    backward)."""
    (x_train, y_train), (x_test, y_test) = data
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x_train = x_train.contiguous(memory_format=torch.channels_last)
        x_test = x_test.contiguous(memory_format=torch.channels_last)
    batches = torch.Generator().manual_seed(seed)
    opt = (optimizer(model.parameters()) if optimizer is not None
           else torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9))
    losses, backward_s = [], 0.0
    model.train()
    for step in range(steps):
        index = torch.randint(len(x_train), (batch_size,), generator=batches)
        loss = F.cross_entropy(model(x_train[index]), y_train[index])
        opt.zero_grad()
        start = time.perf_counter()
        loss.backward()
        backward_s += time.perf_counter() - start
        opt.step()
        losses.append(loss.item())
        if log is not None:
            log(step, losses[-1])
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    return losses, accuracy, backward_s


def run(steps: int, batch_size: int = 64, lr: float = 0.05, seed: int = 0,
        channels_last: bool = False, verbose: bool = False):
    """Both trainings from the same initial weights: {"pytorch": ..., "pyvkgrad": ...}, each
    (losses, accuracy, backward seconds)."""
    data = load_data(seed)
    torch.manual_seed(seed)
    initial = build_model()
    results = {}
    for name in ("pytorch", "pyvkgrad"):
        model = copy.deepcopy(initial)
        if name == "pyvkgrad":
            model = vt.convert(model)
        log = (lambda s, v, n=name: print(f"  {n:8s} step {s:4d} loss {v:.6f}")) \
            if verbose else None
        results[name] = train(model, data, steps, batch_size, lr, seed, channels_last, log)
    return results


def plot(results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in (("pytorch", "-"), ("pyvkgrad", "--")):
        losses, accuracy, _ = results[name]
        ax.plot(losses, style, label=f"{name} backward (test accuracy {accuracy:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_yscale("log")
    ax.set_title(f"digits CNN: PyTorch's backward vs pyvkgrad's on {vt.get_device().name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true", help="train in channels_last")
    ap.add_argument("--plot", default="digits_loss.png", help="where to save the loss plot")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        ap.error("--steps and --batch-size must be at least 1")

    print(f"pyvkgrad backward on {vt.get_device().name}; torch {torch.__version__}")
    results = run(args.steps, args.batch_size, args.lr, args.seed, args.channels_last)
    (ref, ref_acc, ref_s), (ours, our_acc, our_s) = results["pytorch"], results["pyvkgrad"]
    print(f"{'step':>5} {'pytorch':>10} {'pyvkgrad':>10} {'difference':>11}")
    for step, (a, b) in enumerate(zip(ref, ours)):
        print(f"{step:5d} {a:10.6f} {b:10.6f} {b - a:11.2e}")
    worst = max(abs(a - b) for a, b in zip(ref, ours))
    print(f"largest loss difference over {args.steps} steps: {worst:.2e}")
    print(f"final test accuracy: pytorch {ref_acc:.4f}, pyvkgrad {our_acc:.4f}")
    print(f"time in backward: pytorch {ref_s:.2f} s, pyvkgrad {our_s:.2f} s")
    if not args.no_plot:
        plot(results, args.plot)
        print(f"loss curves saved to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
