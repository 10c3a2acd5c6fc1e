#!/usr/bin/env python3
"""Exploration (not part of the benchmark): ReLU-grad kernel time across workgroup widths and
workgroup-count caps, to pick the plans' defaults. Prints one line per variant and size.
Each variant compiles with its own Limits (`Device.compile(desc, limits)`); the device's stay
as they are."""

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root
import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc  # noqa: E402

MiB = 2**20


def main():
    dev = pyvkgrad.default_device()
    base = dev.limits
    sizes = [16, 64, 256, 1024] if dev.info.device_type != "cpu" else [4]
    for mib in sizes:
        n = mib * MiB // 4
        desc = TensorDesc(DataType.FLOAT32, (n,))
        x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        ts = dict(input_tensor=dev.upload(x), input_gradient_tensor=dev.upload(x),
                  output_gradient_tensor=dev.empty(desc))
        for local in (128, 256, 512, 1024):
            for cap in (65535, 132 * 8, 132 * 16, 132 * 32, 132 * 64):
                op = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc),
                                 replace(base, local_size=local, max_workgroups=cap))
                with dev.record(timestamps=True) as rec:
                    rec.execute(op, **ts)
                times = []
                for _ in range(15):
                    rec.replay()
                    times.append(sum(rec.kernel_times_ns()))
                ns = statistics.median(times)
                print(f"{mib:5d} MiB local {local:5d} cap {cap:6d}: {ns / 1e3:9.1f} us "
                      f"{3 * mib * MiB / ns:7.0f} GB/s", flush=True)
                op.close()
        for t in ts.values():
            t.close()


if __name__ == "__main__":
    main()
