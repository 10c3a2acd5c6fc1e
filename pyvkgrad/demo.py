"""`python -m pyvkgrad demo`: every operator of the table (operators.py) on the default device
against the float64 oracle.

For each operator and each of its data types, a random case of the operator's demo shape: prints its
sizes, its worst error as a fraction of the operator's tolerance (1 or more fails) and the wall
time of the one-call function, first call and repeat.
"""

from __future__ import annotations

import time

import numpy as np

from . import operators
from .device import DeviceLike, get_device
from .runtime import kp


def run(device: DeviceLike = None) -> int:
    dev = get_device(device)
    print(f"pyvkgrad demo on {dev.name} ({dev.info.vendor}, {dev.info.driver_name})")
    print("runtime: kp 0.9.0 with pyvkgrad's patch, level "
          f"{kp.pyvkgrad_patch}; float atomics: "
          + ("native (VK_EXT_shader_atomic_float)" if dev.float_atomic_add
             else "compare-and-swap (no native float atomic add here)"))
    print(f"{'operator':<36}{'case':<62}{'error/tol':>10}{'first call':>12}{'repeat':>10}")
    rng = np.random.default_rng(0)
    failures = 0
    for record in operators.OPERATORS:
        for dtype in record.dtypes:
            case = record.make_case(rng, record.demo_shape, dtype)
            t0 = time.perf_counter()
            got = record.run(case, dev)
            t1 = time.perf_counter()
            got = record.run(case, dev)  # the repeat replays the cached compiled operator
            t2 = time.perf_counter()
            worst, problem = operators.compare(record, got, record.expected(case),
                                               record.magnitudes(case.args, case.kwargs), dtype)
            failures += bool(problem)
            print(f"{record.OPERATOR:<36}{case.label[:61]:<62}"
                  f"{'FAIL' if problem else f'{worst:.2f}':>10}{(t1 - t0) * 1e3:>10.1f}ms"
                  f"{(t2 - t1) * 1e3:>8.1f}ms")
            if problem:
                print(f"    {problem}")
    return 1 if failures else 0
