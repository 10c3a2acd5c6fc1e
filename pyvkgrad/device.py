"""Devices: DirectML's execution model on a Vulkan physical device.

Compile a descriptor once for a device (`Device.compile`), bind device tensors by field name,
run it (`op(**tensors)`) or record any number of compiled operators into one submission
(`Device.record`) and replay it. The one-call functions (`pyvkgrad.activation_relu_grad`, ...)
keep their problems in the device's one-call cache (`Device.cache_info`; `Device.cache_clear`
closes them all and gives their memory back, leaving the device and the caller's own objects
open).

The device layer, floor by floor (docs/architecture.md): `_environment` and `_context` (what
a device's objects share), `device_tensor`, `recording`, `compiled_operator`,
`one_call_cache`, and this module, which holds the public `Device` and device discovery.

What stays true over any sequence of calls (tests/test_device_state.py checks it against a
numpy model):
- contents: each tensor's `TensorState` (_state.py) says whether staging or the device copy is
  current; every submission uploads exactly the bound tensors whose staging is newer, and
  marks what its kernels wrote, so `write` is seen by the next call or replay and `numpy`
  reads the device back only when a kernel wrote it since;
- lifetimes: closing a tensor, an operator, a recording or the device closes the use of
  everything that depends on it (ClosedError names what was closed); nothing touches freed
  Vulkan memory;
- aliasing: one tensor may be bound to several fields only where the operator allows it
  (`IN_PLACE`: an element-wise output over an input with the identical descriptor; inputs
  may share freely);
- memory: caches hold tensors by the bytes they cost, and a cache never keeps a tensor alive
  that its caller dropped (its entries go at the next call on the device);
- interrupts: a submission and the bookkeeping after it run with Ctrl-C deferred, so a cache
  entry is usable or absent, never half made.
- processes: in a child forked after the device opened, every use raises (runtime.FORKED)
  instead of waiting forever on driver threads fork does not copy.
"""

from __future__ import annotations

import os
import threading
from typing import List, Optional, Tuple, Union

import numpy as np

from . import _vulkan_info
from ._context import DeviceContext
from ._environment import DEVICE_VARIABLE
from ._state import ClosedError
from .compiled_operator import CompiledOperator, compile_operator
from .device_tensor import DeviceTensor, make_tensor
from .one_call_cache import CacheInfo, OneCallCache
from .plan import Limits, OperatorDesc
from .recording import Recording
from .runtime import DeviceError, Runtime
from .tensor import DataType, TensorDesc, array_desc

__all__ = ["Device", "DeviceTensor", "CompiledOperator", "Recording", "DeviceError",
           "ClosedError", "devices", "default_device", "get_device"]


class Device:
    """One Vulkan physical device. It opens (creates its Vulkan device) on first use, and
    again after `close()`."""

    def __init__(self, info: _vulkan_info.PhysicalDeviceInfo) -> None:
        self.info: _vulkan_info.PhysicalDeviceInfo = info  # the device's Vulkan properties
        self.index: int = info.index  # in the Vulkan loader's order
        self.name: str = info.name
        self._context = DeviceContext(self, info)
        self._one_call = OneCallCache(self._context)

    @property
    def limits(self) -> Limits:
        """What plans may assume about this device (recomputed when a PYVKGRAD_ variable that
        changes it does)."""
        return self._context.limits

    @property
    def max_buffer_bytes(self) -> int:
        """The largest buffer a kernel may bind: the device's maxStorageBufferRange, or less
        with PYVKGRAD_MAX_BUFFER_BYTES (tests use it to exercise splitting on small arrays)."""
        return self._context.max_buffer_bytes

    @property
    def float_atomic_add(self) -> bool:
        """Whether kernels may use native float32 atomicAdd on storage buffers: the device
        supports it, and pyvkgrad's kp patch enables it when the device opens.
        PYVKGRAD_FLOAT_ATOMICS=0 turns it off (kernels then add through compare-and-swap)."""
        return self._context.float_atomic_add

    @property
    def wait_spin_us(self) -> int:
        """Microseconds a wait for a submission polls before it blocks (see runtime.py)."""
        return self._context.wait_spin_us

    @property
    def max_loop_iterations(self) -> int:
        """Loop iterations an invocation may run in total before the driver ends its loops
        (lavapipe's llvmpipe: 65535), or 0 where there is no such limit."""
        return self._context.max_loop_iterations

    def upload(self, array: np.ndarray) -> DeviceTensor:
        """A device tensor holding a copy of `array` (float32 or float16, or an integer type of
        DataType for the operators that take them; any strides; a broadcast view keeps its
        zero strides and uploads only its distinct elements). The copy to the device runs with
        the next submission that uses the tensor."""
        desc, _ = array_desc(array, "Device.upload", "array", data_types=tuple(DataType))
        tensor = make_tensor(self._context, desc)
        # Through the view: what lies between a strided view's elements in its base array is
        # not the tensor's (the buffer holds zeros there).
        tensor.write(np.reshape(array, desc.sizes))
        return tensor

    def empty(self, desc: TensorDesc) -> DeviceTensor:
        """A device tensor laid out by `desc`, holding zeros (on the device too: kernels and
        `numpy` see the same contents)."""
        if not isinstance(desc, TensorDesc):
            raise TypeError(f"Device.empty: desc must be a TensorDesc, got {type(desc).__name__}")
        return make_tensor(self._context, desc)

    def compile(self, desc: OperatorDesc, limits: Optional[Limits] = None) -> CompiledOperator:
        """Compile an operator descriptor: validate, plan and load its kernels once.

        `limits`: plan with these instead of `Device.limits` (explorations of plan choices,
        e.g. benchmarks/investigations/relu_variants.py; they must stay within what the device
        supports)."""
        self._context.check_usable()  # a forked child: raise at once
        return compile_operator(self._context, desc, limits)

    def record(self, timestamps: bool = False) -> Recording:
        """`with device.record() as rec: rec.execute(op, **tensors)` submits once at the end."""
        with self._context.lock:
            self._context.check_usable()  # a forked child: raise at once
            return Recording(self._context, timestamps)

    def cache_info(self) -> CacheInfo:
        """The one-call cache: hits and misses so far, descriptors and bytes it holds, and its
        limits (like functools' cache_info)."""
        return self._one_call.info()

    def cache_clear(self) -> None:
        """Empty the one-call cache: close its entries (their tensors, operators and
        recordings), so their memory goes back now, and restart its hits and misses at 0 (like
        functools' cache_clear). The device, and the tensors, operators and recordings made by
        callers, stay open."""
        self._one_call.clear()

    def memory_in_use(self) -> Optional[int]:
        """Bytes this process holds in the device's device-local heaps (VK_EXT_memory_budget),
        or None where the driver lacks the extension."""
        return _vulkan_info.device_memory_in_use(self.index)

    def runtime(self) -> Runtime:
        """The Vulkan runtime (runtime.py): the low-level seam for benchmarks and diagnostics.
        What is made directly on it is the caller's to destroy (`Device.close` closes only
        pyvkgrad's own tensors, operators and recordings)."""
        return self._context.session().runtime

    def close(self) -> None:
        """Release every Vulkan object made on this device: its tensors, operators and
        recordings are closed (using them raises ClosedError); new ones work as before."""
        with self._context.lock:
            self._one_call.clear(counts=False)
            self._context.close_session()

    def __repr__(self) -> str:
        return f"Device({self.index}, {self.name!r})"


def one_call_cache(device: Device) -> OneCallCache:
    """The device's one-call cache (for the one-call driver, ops/_one_call.py)."""
    return device._one_call


def context_of(device: Device) -> DeviceContext:
    """What the device's objects share (its lock, session, limits): for tests and diagnostics."""
    return device._context


# ---- discovery -----------------------------------------------------------------------------------

_devices: Optional[List[Device]] = None
_devices_lock = threading.Lock()


def _unlock_after_fork() -> None:
    global _devices_lock
    _devices_lock = threading.Lock()
    for device in _devices or ():
        device._context.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_after_fork)


def devices() -> List[Device]:
    """Every Vulkan physical device, in the loader's order."""
    global _devices
    with _devices_lock:
        if _devices is None:
            try:
                infos = _vulkan_info.physical_devices()
            except _vulkan_info.VulkanUnavailable as e:  # its message names what to install
                raise DeviceError(str(e)) from e
            _devices = [Device(info) for info in infos]
        return list(_devices)


_default: Optional[Tuple[tuple, Device]] = None  # (PYVKGRAD_DEVICE raw, the device it chose)


def default_device() -> Device:
    """`PYVKGRAD_DEVICE` (an index or part of a name), else the first GPU, else lavapipe."""
    global _default
    raw = DEVICE_VARIABLE.values()
    if _default is not None and _default[0] == raw:
        return _default[1]  # every one-call function asks: answer from the last lookup
    found = devices()
    if not found:
        raise DeviceError(f"no Vulkan device found: {_vulkan_info.NO_DRIVER_HINT}")
    choice = os.environ.get("PYVKGRAD_DEVICE", "").strip()
    if choice:
        try:
            device = get_device(choice)
        except ValueError as e:  # named at its source, for every caller
            raise ValueError(f"PYVKGRAD_DEVICE: {e}") from None
    else:
        gpus = [d for d in found if d.info.device_type != "cpu"]
        device = (gpus or found)[0]
    _default = (raw, device)
    return device


# What the `device=` argument of the one-call functions takes: None (the default device), a
# Device, an index or part of a device name.
DeviceLike = Union[None, int, str, Device]


def get_device(which: DeviceLike = None) -> Device:
    """A Device from None (default), a Device, an index or part of a device name. A string of
    digits is an index, as in PYVKGRAD_DEVICE and the command line's --device ("1" is device
    1, not the first whose name contains a 1, as "llvmpipe (LLVM 15.0.6)" does)."""
    if which is None:
        return default_device()
    if isinstance(which, Device):
        return which
    if isinstance(which, str) and which.strip().isdecimal():
        which = int(which)
    elif isinstance(which, str) and not which.strip():
        raise ValueError("a device name must not be empty")
    found = devices()
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        if not 0 <= which < len(found):
            raise ValueError(f"device index {which} is out of range: "
                             f"{len(found)} Vulkan device(s): {[d.name for d in found]}")
        return found[which]
    if isinstance(which, str):
        for d in found:
            if which.lower() in d.name.lower():
                return d
        raise ValueError(f"no Vulkan device name contains {which!r}: {[d.name for d in found]}")
    raise TypeError(f"device must be None, a Device, an index or a name, got {type(which).__name__}")
