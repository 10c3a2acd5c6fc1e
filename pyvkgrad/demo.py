"""`python -m pyvkgrad demo`: every operator on the default device against the float64 oracle.

Prints the device, each case's sizes, the largest error against the oracle (relative to the
largest magnitude of the expected result) and the wall time of the one-call function.
"""

from __future__ import annotations

import time

import numpy as np

from . import reference
from .device import get_device
from .runtime import kp


def _cases(rng):
    """(operator, sizes text, device call, oracle call) for each demo case."""
    import pyvkgrad as p

    def arr(shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    x, dy = arr((8, 64, 56, 56)), arr((8, 64, 56, 56))
    yield ("ACTIVATION_RELU_GRAD", "float32 [8, 64, 56, 56]",
           lambda d: p.activation_relu_grad(x, dy, device=d),
           lambda: reference.activation_relu_grad(x, dy))
    xh, dyh = x.astype(np.float16), dy.astype(np.float16)
    yield ("ACTIVATION_RELU_GRAD", "float16 [8, 64, 56, 56]",
           lambda d: p.activation_relu_grad(xh, dyh, device=d),
           lambda: reference.activation_relu_grad(xh, dyh))
    for mode, algorithm in (("nearest_neighbor", "gather"), ("linear", "gather"),
                            ("linear", "atomic")):
        g = arr((4, 16, 64, 64))
        yield ("RESAMPLE_GRAD", f"{mode} {algorithm} float32 [4, 16, 64, 64] -> [4, 16, 32, 32]",
               lambda d, g=g, m=mode, a=algorithm: p.resample_grad(
                   g, (4, 16, 32, 32), interpolation_mode=m, algorithm=a, device=d),
               lambda g=g, m=mode: reference.resample_grad(g, (4, 16, 32, 32), m,
                                                           (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4))
    xb, dyb = arr((8, 32, 28, 28)), arr((8, 32, 28, 28))
    mean = xb.mean(axis=(0, 2, 3), keepdims=True)
    var = xb.var(axis=(0, 2, 3), keepdims=True)
    scale = arr((1, 32, 1, 1))
    for name, fn, ref in (("BATCH_NORMALIZATION_GRAD", p.batch_normalization_grad,
                           reference.batch_normalization_grad),
                          ("BATCH_NORMALIZATION_TRAINING_GRAD",
                           p.batch_normalization_training_grad,
                           reference.batch_normalization_training_grad)):
        yield (name, "float32 [8, 32, 28, 28], per channel",
               lambda d, fn=fn: fn(xb, dyb, mean, var, scale, 1e-5, device=d),
               lambda ref=ref: ref(xb, dyb, mean, var, scale, 1e-5))


def _error(got, want) -> float:
    got = [got] if isinstance(got, np.ndarray) else list(got)
    want = [want] if isinstance(want, np.ndarray) else list(want)
    worst = 0.0
    for g, w in zip(got, want):
        scale = max(float(np.max(np.abs(w))), 1e-30)
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))) / scale)
    return worst


def run(device=None) -> int:
    dev = get_device(device)
    print(f"pyvkgrad demo on {dev.name} ({dev.info.vendor}, {dev.info.driver_name})")
    print("runtime: kp 0.9.0 with pyvkgrad's patch, level "
          f"{kp.pyvkgrad_patch}; float atomics: "
          + ("native (VK_EXT_shader_atomic_float)" if dev.float_atomic_add
             else "compare-and-swap (no native float atomic add here)"))
    print(f"{'operator':<36}{'case':<68}{'max rel error':>14}{'first call':>12}{'repeat':>10}")
    rng = np.random.default_rng(0)
    failures = 0
    for name, text, call, oracle in _cases(rng):
        t0 = time.perf_counter()
        got = call(dev)
        t1 = time.perf_counter()
        got = call(dev)  # the repeat replays the cached compiled operator
        t2 = time.perf_counter()
        err = _error(got, oracle())
        bad = err > 1e-3
        failures += bad
        print(f"{name:<36}{text:<68}{err:>14.2e}{(t1 - t0) * 1e3:>10.1f}ms"
              f"{(t2 - t1) * 1e3:>8.1f}ms{'  FAIL' if bad else ''}")
    return 1 if failures else 0

