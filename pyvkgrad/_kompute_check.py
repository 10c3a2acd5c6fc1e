"""Import-time check of pyvkgrad's Kompute runtime (`pyvkgrad._kompute`).

A runtime built against a pybind11 older than 2.12 hands out numpy 2 arrays with stride 0 from
`Tensor.data()`: every element reads as the first, and every result is silently wrong. `check`
sends a small uint32 array through the same numpy conversions that `Manager.tensor_t()` and
`Tensor.data()` use (`_kompute._round_trip_u32`, host only: no Vulkan device is needed or
touched) and raises ImportError, saying what is wrong, unless values, dtype, shape and strides
come back exactly.
"""

from __future__ import annotations

import numpy as np

#: The patch level (tools/kp-0.9.0.patch) this pyvkgrad is written for.
PATCH_LEVEL = 8

_REINSTALL = "reinstall pyvkgrad, which rebuilds it: pip install --force-reinstall --no-cache-dir"


def check(kp) -> None:
    """Raise ImportError unless runtime `kp` has our patch level and round-trips arrays exactly."""
    where = getattr(kp, "__file__", repr(kp))
    level = getattr(kp, "pyvkgrad_patch", 0)
    if level < PATCH_LEVEL or not hasattr(kp, "_round_trip_u32"):
        raise ImportError(f"pyvkgrad's Kompute runtime {where} has patch level {level}; this "
                          f"pyvkgrad needs {PATCH_LEVEL}: {_REINSTALL} <pyvkgrad>")
    sent = np.array([0, 1, 2, 3, 0xDEADBEEF, 0xFFFFFFFF, 7, 0x12345678], dtype=np.uint32)
    try:
        back = kp._round_trip_u32(sent)
    except Exception as e:  # any failure here means an unusable runtime
        raise ImportError(f"pyvkgrad's Kompute runtime {where} failed its round-trip check "
                          f"under numpy {np.__version__} ({type(e).__name__}: {e})") from e
    problem = compare(sent, back)
    if problem:
        raise ImportError(
            f"pyvkgrad's Kompute runtime {where} returns wrong arrays under numpy "
            f"{np.__version__}: {problem}. It was built against a pybind11 that does not support "
            f"this numpy (2.12 or later is needed for numpy 2); {_REINSTALL} <pyvkgrad>")


def compare(sent: np.ndarray, back) -> str:
    """What differs between the array sent and the one that came back ('' when nothing)."""
    if not isinstance(back, np.ndarray):
        return f"a {type(back).__name__} came back, not a numpy array"
    if back.dtype != sent.dtype:
        return f"dtype {back.dtype}, expected {sent.dtype}"
    if back.shape != sent.shape:
        return f"shape {back.shape}, expected {sent.shape}"
    if back.strides != sent.strides:
        return f"strides {back.strides}, expected {sent.strides}"
    if not np.array_equal(back, sent):
        return f"values {back.tolist()}, expected {sent.tolist()}"
    return ""
