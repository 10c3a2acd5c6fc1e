"""Shared test helpers: sizes and layouts chosen to break kernels, random arrays and views,
and what a device holds in memory."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import SUBPROCESS_CWD

# Element counts around workgroup (256) and subgroup (8/32/64) widths, primes, and 1.
EDGE_COUNTS = [1, 2, 3, 7, 31, 32, 33, 63, 64, 65, 127, 255, 256, 257, 1021, 4099]
# More elements than 65535 workgroups of 256 invocations cover (grid-stride loops).
BEYOND_WORKGROUP_LIMIT = 65535 * 256 + 257

# One shape per rank 1..8 with odd sizes.
SHAPES_BY_RANK = [(7,), (3, 5), (2, 3, 5), (2, 3, 1, 7), (2, 1, 3, 2, 5), (1, 2, 3, 2, 2, 3),
                  (2, 1, 2, 3, 1, 2, 3), (1, 2, 1, 2, 3, 2, 1, 3)]

DTYPES = [np.float32, np.float16]


def random_array(rng, shape, dtype, low=-2.0, high=2.0):
    return rng.uniform(low, high, size=shape).astype(dtype)


def strided_view(rng, shape, dtype):
    """A non-contiguous view of `shape`: every other element along the last axis, with the
    axes of a larger array permuted (an NHWC-style layout)."""
    big = random_array(rng, tuple(shape[:-1]) + (2 * shape[-1],), dtype)[..., ::2]
    order = list(range(len(shape)))[::-1]
    return np.transpose(np.ascontiguousarray(np.transpose(big, order)), order)


def broadcast_view(rng, shape, dtype, axis=0):
    """A zero-stride view along `axis` (np.broadcast_to)."""
    small_shape = list(shape)
    small_shape[axis] = 1
    return np.broadcast_to(random_array(rng, small_shape, dtype), shape)


VIEWS = ("packed", "transposed", "sliced", "broadcast")


def view_of(array, kind, axis=0):
    """`array` through another layout: "packed" (itself), "transposed" (the same values in
    column-major memory), "sliced" (every other element of a larger array) or "broadcast" (its
    first slice along `axis` repeated, zero strides: other values)."""
    if kind == "transposed":
        return np.asfortranarray(array)
    if kind == "sliced":
        big = np.zeros(tuple(2 * s for s in array.shape), array.dtype)
        inner = tuple(slice(None, None, 2) for _ in array.shape)
        big[inner] = array
        return big[inner]
    if kind == "broadcast":
        return np.broadcast_to(np.take(array, [0], axis=axis), array.shape)
    return array


def memory_in_use(device):
    """Bytes the process holds on `device` (VK_EXT_memory_budget), else its resident set."""
    used = device.memory_in_use()
    if used is not None:
        return used
    with open("/proc/self/statm") as f:
        import os
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def released_memory(device):
    """`memory_in_use` once glibc's malloc has handed its free pages back: lavapipe's device
    memory is malloc'd, and after earlier tests raised glibc's mmap threshold, 8 MiB blocks come
    from its heap, which keeps freed pages resident until trimmed (104 MiB after a test file)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    return memory_in_use(device)


# The default widths, another workgroup width, and lavapipe's subgroups of 4 and 16 lanes
# (LP_NATIVE_VECTOR_WIDTH=128/512, read when the device is created: a new process each).
OTHER_WIDTHS = ({}, {"PYVKGRAD_LOCAL_SIZE": "32"}, {"LP_NATIVE_VECTOR_WIDTH": "128"},
                {"LP_NATIVE_VECTOR_WIDTH": "512"})


def assert_same_bits_on_other_widths(device, script, timeout=None):
    """Run `script` in a process per environment of OTHER_WIDTHS; it prints a JSON object of
    the device's "subgroup" and "local" sizes and its results, and every run's results must be
    the first (default) run's. Lavapipe only (skips elsewhere)."""
    if device.info.device_type != "cpu":
        pytest.skip("LP_NATIVE_VECTOR_WIDTH is lavapipe's")
    runs = []
    for env in OTHER_WIDTHS:
        done = subprocess.run([sys.executable, "-c", script], cwd=SUBPROCESS_CWD,
                              capture_output=True, text=True, env={**os.environ, **env},
                              check=True, timeout=timeout)
        runs.append(json.loads(done.stdout))
    assert runs[1]["local"] == 32
    assert {r["subgroup"] for r in runs[2:]} == {4, 16}
    for run in runs[1:]:
        for key, value in runs[0].items():
            if key not in ("subgroup", "local"):
                assert run[key] == value, key
