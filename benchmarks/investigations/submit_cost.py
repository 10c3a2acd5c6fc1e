#!/usr/bin/env python3
"""Diagnostic (not part of the benchmark): the host time of one submission.

Times `Commands.submit()` of a pre-recorded tiny dispatch for several fence-polling budgets
(the kp patch's wait spin), with few and with many live allocations, before and after CUDA is
initialised in the same process by PyTorch. Goes through the runtime seam (pyvkgrad.runtime)."""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root
import pyvkgrad  # noqa: E402
from pyvkgrad import kernels  # noqa: E402

SPINS_US = (0, 50, 2000)

dev = pyvkgrad.default_device()
runtime = dev.runtime()
buffers = [runtime.buffer(16, words=np.ones(4, np.uint32)) for _ in range(3)]
KERNEL = "activation_relu_grad_packed"  # one 16-byte vector: four float32 elements
program = runtime.program(buffers, kernels.spirv(KERNEL), 1,
                          kernels.specialization(KERNEL, {"WG": 64, "IS_F16": False}),
                          len(kernels.push_words(KERNEL, {"count": 1, "elements": 4, "first": 0})))
PUSH = np.array(kernels.push_words(KERNEL, {"count": 1, "elements": 4, "first": 0}), np.uint32)


def measure(label, n=400):
    for spin in SPINS_US:
        commands = runtime.commands(0, spin * 1000)
        commands.dispatch(program, PUSH)
        walls = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            commands.submit()
            walls.append(time.perf_counter_ns() - t0)
        commands.destroy()
        print(f"{label:<40} spin {spin:5d} us: submit {statistics.median(walls[n // 4:]) / 1e3:8.1f} us",
              flush=True)


measure("few allocations")
extra = [runtime.buffer(4096) for _ in range(1000)]
measure("+1000 live buffers (2000 allocations)")
del extra
try:
    import torch
    torch.zeros(1, device="cuda")
    measure("after CUDA initialised by PyTorch")
except Exception as e:
    print("no CUDA:", e)
