#!/usr/bin/env python3
"""What a schedule costs `pyvkgrad.torch.optim.Adam` a step: four parameters (a small MLP's)
stepped 30 times under OneCycleLR, which changes the learning rate and Beta1 every step.
Prints the median and the slowest step and the pipelines the runtime made (the first step
makes the kernel's; a scalar that specialised the kernel would make more every step).

    python3 benchmarks/investigations/adam_schedule_cost.py [LABEL]

Run it in another tree (PYTHONPATH) for the same figures of another commit.
"""

import sys
import time

import torch

import pyvkgrad
import pyvkgrad.torch as vt
from pyvkgrad.torch.optim import Adam


def main() -> None:
    device = pyvkgrad.default_device()
    vt.set_device(device)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((64, 32), (64,), (10, 64), (10,))]
    opt = Adam(params, lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.01, total_steps=40)
    times = []
    for _ in range(30):
        for p in params:
            p.grad = torch.randn_like(p)
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
        sched.step()
    times.sort()
    label = sys.argv[1] if len(sys.argv) > 1 else device.name
    print(f"{label}: median step {1e3 * times[len(times) // 2]:.1f} ms, slowest "
          f"{1e3 * times[-1]:.1f} ms, pipelines made {device.runtime().pipelines_made}")


if __name__ == "__main__":
    main()
