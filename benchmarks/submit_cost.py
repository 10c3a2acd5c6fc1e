#!/usr/bin/env python3
"""Diagnostic (not part of the benchmark): where the host time of one submission goes.

Times seq.eval() of a pre-recorded tiny dispatch, split into submit (eval_async) and wait
(eval_await), for several fence-polling budgets (Sequence.set_wait_spin, from pyvkgrad's kp
patch), with few and with many live allocations, before and after CUDA is initialised in the
same process by PyTorch."""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pyvkgrad  # noqa: E402
from benchmarks.run import tiny_recording  # noqa: E402

SPINS_US = (0, 50, 2000)

dev = pyvkgrad.default_device()
mgr = dev._manager()
rec = tiny_recording(dev)
seq = rec._last
dispatch = rec._ops[0]


def median_us(samples):
    return statistics.median(samples[len(samples) // 4:]) / 1e3


def measure(label, n=400):
    for spin in SPINS_US:
        seq.set_wait_spin(spin * 1000)
        evals, submits, waits = [], [], []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            seq.eval()
            evals.append(time.perf_counter_ns() - t0)
        s2 = mgr.sequence()
        s2.set_wait_spin(spin * 1000)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            s2.eval_async(dispatch)
            t1 = time.perf_counter_ns()
            s2.eval_await()
            t2 = time.perf_counter_ns()
            submits.append(t1 - t0)
            waits.append(t2 - t1)
        s2.destroy()
        print(f"{label:<40} spin {spin:5d} us: eval {median_us(evals):8.1f} us | "
              f"record+submit {median_us(submits):8.1f} us, wait {median_us(waits):8.1f} us",
              flush=True)


measure("few allocations")
extra = [mgr.tensor_t(np.zeros(1024, np.uint32)) for _ in range(1000)]
measure("+1000 live tensors (2000 allocations)")
del extra
try:
    import torch
    torch.zeros(1, device="cuda")
    measure("after CUDA initialised by PyTorch")
except Exception as e:
    print("no CUDA:", e)
