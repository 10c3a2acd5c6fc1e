"""The first call of plans with many slices of one pass: pipelines made, and seconds for
compile + the first call + a second call (the pipelines a compiled operator creates; since
c7e7c38 dispatches that differ only in push constants share one). Run from the project root
(or a `git archive` of another commit with this checkout's runtime, h200_prelude.sh's
`in_tree`) on any device:

    python3 benchmarks/investigations/pipeline_sharing.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

import pyvkgrad
from pyvkgrad import DataType, TensorDesc
from pyvkgrad.runtime import Runtime


def bn_case(rows: int):
    """BATCH_NORMALIZATION_GRAD over one channel of `rows` elements, float32."""
    d, stat = TensorDesc(DataType.FLOAT32, (rows, 1)), TensorDesc(DataType.FLOAT32, (1, 1))
    desc = pyvkgrad.BatchNormalizationGradDesc(d, d, stat, stat, stat, d, stat, stat, 1e-3)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 1)).astype(np.float32)
    dy = rng.standard_normal((rows, 1)).astype(np.float32)
    arrays = [x, dy, x.mean(0, keepdims=True), x.var(0, keepdims=True),
              np.ones((1, 1), np.float32)]
    return desc, arrays


def time_case(device, desc, arrays, limits) -> dict:
    created = []
    program = Runtime.program
    Runtime.program = lambda self, *a, **k: created.append(1) or program(self, *a, **k)
    try:
        t0 = time.perf_counter()
        op = device.compile(desc, limits)
        names = [n for n, _ in desc.tensor_fields()]
        tensors = {n: device.upload(a) for n, a in zip(names, arrays)}
        for n, (d, _) in list(desc.tensor_fields())[len(arrays):]:
            tensors[n] = device.empty(d)
        op(**tensors)
        first = time.perf_counter() - t0
        t1 = time.perf_counter()
        op(**tensors)
        second = time.perf_counter() - t1
    finally:
        Runtime.program = program
    plan = desc.plan(limits or device.limits)
    return dict(dispatches=len(plan.dispatches), pipelines=len(created),
                first_call_s=round(first, 4), second_call_s=round(second, 5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    args = ap.parse_args()
    device = pyvkgrad.default_device()
    rows = []
    for rows_, workgroups, lanes in ((70000, 1, 1), (70000, 8, 1), (1_000_000, 4, 32)):
        limits = dataclasses.replace(device.limits, max_workgroups=workgroups,
                                     local_size=lanes, max_local_size=lanes,
                                     max_loop_iterations=65535)
        desc, arrays = bn_case(rows_)
        row = dict(case=f"BATCH_NORMALIZATION_GRAD [{rows_},1], {workgroups} workgroups of "
                        f"{lanes} lanes, loop limit 65535", **time_case(device, desc, arrays,
                                                                        limits))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=device.name, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
