"""The process environment the device layer reads: PYVKGRAD_ variables, and Ctrl-C.

Every one-call function checks the variables that change the plans, so reading them is on the
hot path: `Variables.values()` reads os.environ's own bytes dict where it has one (about 1 us a
variable through os.environ.get otherwise).
"""

from __future__ import annotations

import _signal
import os
import threading
from typing import Optional

# How long a wait polls the fence before it blocks, on a hardware device (a blocking wait
# returns tens of microseconds late). Not on a CPU device: there the polling thread would take
# a core from the driver's own worker threads.
DEFAULT_WAIT_SPIN_US = 2000
# Lavapipe (llvmpipe) ends every shader loop once an invocation has run this many loop
# iterations in total, over all its loops: plans keep each invocation's loops below it.
LLVMPIPE_MAX_LOOP_ITERATIONS = 65535

LAVAPIPE_HINT = ("install Mesa's software Vulkan driver lavapipe with "
                 "`apt-get install mesa-vulkan-drivers` (and the loader, libvulkan1)")


class Variables:
    """Environment variables that every one-call function checks: `values()` is what they
    hold now, raw (equal tuples mean equal values).

    os.environ.get costs about 1 us a variable (a Python-level mapping that encodes the name,
    and raises and catches KeyError when it is unset). On POSIX, os.environ keeps its values in
    a dict of bytes that its writes go through: where it has one, `values` reads that, for
    comparison with earlier calls only. os.environ is looked up on every call, so a replaced
    os.environ (mock.patch) is seen too."""

    def __init__(self, *names: str):
        self.names = names
        self._keys = tuple(os.fsencode(name) for name in names)

    def values(self) -> tuple:
        environ = os.environ
        data = getattr(environ, "_data", None) if os.name == "posix" else None
        if type(data) is dict:
            get = data.get
            return tuple([get(key) for key in self._keys])
        get = environ.get
        return tuple([get(name) for name in self.names])


# The variables that change `Device.limits` (and so the plans), and the one that picks the
# default device.
LIMIT_VARIABLES = Variables("PYVKGRAD_MAX_BUFFER_BYTES", "PYVKGRAD_LOCAL_SIZE",
                            "PYVKGRAD_FLOAT_ATOMICS", "PYVKGRAD_FLOAT16_RTE")
DEVICE_VARIABLE = Variables("PYVKGRAD_DEVICE")


def env_on(name: str) -> bool:
    """A switch that is on unless environment variable `name` is 0 (PYVKGRAD_FLOAT_ATOMICS,
    PYVKGRAD_FLOAT16_RTE)."""
    return os.environ.get(name, "1").strip() != "0"


def env_int(name: str, unit: str, minimum: int, power_of_two: bool = False) -> Optional[int]:
    """The whole number in environment variable `name`, None when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum or (power_of_two and number & (number - 1)):
        kind = "a power of two" if power_of_two else "a whole number"
        raise ValueError(f"{name} must be {kind} of {unit} >= {minimum}, got {value!r}")
    return number


class InterruptsDeferred:
    """Hold back Ctrl-C (SIGINT) until the block ends, so that a submission and the state it
    leaves are updated together. Only the main thread receives signals; elsewhere this does
    nothing. (`_signal` directly: the `signal` module's enum conversions cost microseconds on
    every call.)"""

    __slots__ = ("handler", "received")

    def __enter__(self):
        self.handler = None
        if threading.current_thread() is threading.main_thread():
            handler = _signal.getsignal(_signal.SIGINT)
            if callable(handler):  # not SIG_IGN or SIG_DFL
                self.handler, self.received = handler, []
                _signal.signal(_signal.SIGINT, lambda signum, frame: self.received.append(frame))
        return self

    def __exit__(self, *exc):
        if self.handler is not None:
            _signal.signal(_signal.SIGINT, self.handler)
            if self.received:
                self.handler(_signal.SIGINT, self.received[0])
        return False


def interrupts_deferred() -> InterruptsDeferred:
    return InterruptsDeferred()
