#!/usr/bin/env python3
"""Does sustained GPU work raise the clock that a Vulkan process's host overhead runs at, and
how long does it stay up? (issue 33: the host figures of one fresh machine start were 1.5x
another's, and that start's copy roofline was 1693 GB/s, the GPU's low SM clock.)

One torch-free process. nvidia-smi samples the SM clock every 50 ms in the background
(`clocks.csv`: timestamp, SM and memory clock, performance state, utilization). The process
logs when each phase starts and ends (`phases.json`, time.time()), and measures:
- host overhead (bench_cases.host_overhead: medians of 200 calls) cold, after 2 s idle;
- for each hold H: 3 s idle, then H seconds of back-to-back replays of a recording of ReLU
  grads over 64 MiB tensors ("hold"), then host overhead at once and a ReLU grad kernel time
  on 256 MiB tensors;
- after the longest hold: host overhead again after idle gaps, to see how long the clock stays.
Writes DIR/gpu_clock.json and DIR/clocks.csv. --quick: small tensors, short holds (lavapipe).

    python3 benchmarks/investigations/gpu_clock.py --out DIR [--quick]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root

import numpy as np  # noqa: E402

import pyvkgrad  # noqa: E402
from bench_cases import host_overhead  # noqa: E402
from bench_timing import hold_clock, progress, vulkan_time  # noqa: E402
from pyvkgrad import DataType, TensorDesc  # noqa: E402

MiB = 2**20


def relu_kernel_us(dev, n, repeat):
    """Median kernel time (us) of a float32 ReLU grad over n elements."""
    desc = TensorDesc(DataType.FLOAT32, (n,))
    op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    x = dev.upload(np.ones(n, np.float32))
    ns, rec = vulkan_time(dev, op, dict(input_tensor=x, input_gradient_tensor=x,
                                        output_gradient_tensor=dev.empty(desc)), repeat)
    rec.close()
    return ns / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    smi = None
    if shutil.which("nvidia-smi"):
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,pstate,utilization.gpu",
             "--format=csv,noheader", "-lms", "50", "-f", os.path.join(args.out, "clocks.csv")])
    holds = (0.05, 0.2) if args.quick else (0.1, 0.3, 1.0, 3.0)
    gaps = (0.0, 0.1) if args.quick else (0.0, 0.1, 0.3, 1.0, 3.0)
    idle = 0.1 if args.quick else 3.0
    big = (1 if args.quick else 256) * MiB // 4
    repeat = 20 if args.quick else 200
    phases, rows = [], []

    def phase(label, fn):
        t0 = time.time()
        out = fn()
        phases.append({"phase": label, "start": t0, "end": time.time()})
        return out

    def measure(label):
        row = {"label": label, "host": phase(f"{label}: host overhead",
                                             lambda: host_overhead(dev, repeat))}
        row["relu_256MiB_us" if not args.quick else "relu_1MiB_us"] = phase(
            f"{label}: ReLU kernel", lambda: relu_kernel_us(dev, big, 10))
        rows.append(row)
        progress(json.dumps(row))

    dev = pyvkgrad.default_device()
    progress(f"device: {dev.name}")
    phase("idle", lambda: time.sleep(2 * idle / 3))
    measure("cold")
    for h in holds:
        phase("idle", lambda: time.sleep(idle))
        phase(f"hold {h} s", lambda: hold_clock(dev, h))
        measure(f"after a {h} s hold")
    for gap in gaps:
        phase(f"hold {holds[-1]} s", lambda: hold_clock(dev, holds[-1]))
        phase("idle", lambda: time.sleep(gap))
        measure(f"{gap} s after a {holds[-1]} s hold")
    if smi:
        time.sleep(0.2)
        smi.terminate()
        smi.wait()
    with open(os.path.join(args.out, "gpu_clock.json"), "w") as f:
        json.dump({"device": dev.name, "rows": rows, "phases": phases}, f, indent=1)
    for r in rows:
        h = r["host"]
        print(f"{r['label']:32s} one-call {h['one_call_function_us']:6.1f} us, compiled "
              f"{h['compiled_operator_us']:6.1f} us, replay {h['recording_replay_us']:6.1f} us, "
              f"ReLU kernel {[v for k, v in r.items() if k.startswith('relu')][0]:7.1f} us")


if __name__ == "__main__":
    main()
