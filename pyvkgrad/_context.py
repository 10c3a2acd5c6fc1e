"""What a Device's tensors, operators, recordings and one-call cache share: `DeviceContext`.

A `Device` (device.py) is the public face of one Vulkan physical device and keeps only what a
user calls; everything made on it holds its DeviceContext instead, which is
- the lock that serialises calls on the device (kp is not thread-safe);
- the Vulkan runtime (runtime.py), opened on first use and kept for the process;
- the current `Session`: one opening of the device, whose `Lifetime` every object made in it
  shares, so that `Device.close()` closes them all;
- the tensors dropped by their callers whose cached pipelines and calls are yet to go
  (`forget`, then `collect` at the next call: a finalizer may run in the middle of a call);
- the limits plans may assume, from the device's properties and the PYVKGRAD_ variables.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Deque, Optional, Tuple

from ._environment import (DEFAULT_WAIT_SPIN_US, LIMIT_VARIABLES, LLVMPIPE_MAX_LOOP_ITERATIONS,
                           env_int, env_on)
from ._state import Lifetime
from .plan import Limits
from ._vulkan_info import RTE16_EXTENSIONS
from .runtime import FLOAT_ATOMICS_EXTENSION, Runtime

if TYPE_CHECKING:
    from ._vulkan_info import PhysicalDeviceInfo
    from .compiled_operator import CompiledOperator
    from .device import Device
    from .device_tensor import TensorStorage


class Session:
    """One opening of a device: the lifetime every object made on it shares (closing the
    device closes them all and releases their Vulkan objects). The Vulkan device itself (the
    runtime) outlives sessions: the NVIDIA driver aborted the process after a few dozen
    create/destroy cycles of a device, and reopening costs nothing this way."""

    def __init__(self, name: str, runtime: Runtime) -> None:
        self.runtime = runtime
        self.lifetime: Lifetime = Lifetime(f"device {name!r}")
        self._owned: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Compiled operators, which cache pipelines and calls per bound tensor (`forget`).
        self.operators: "weakref.WeakSet[CompiledOperator]" = weakref.WeakSet()

    def own(self, obj: Any) -> None:
        """Close `obj` (anything with close()) when the session closes."""
        self._owned.add(obj)

    def close(self) -> None:
        self.lifetime.close()
        for obj in list(self._owned):
            obj.close()
        if not self.runtime.closed:  # and the pipelines the runtime kept for later programs
            self.runtime.release_pipelines()


class DeviceContext:
    """The shared state of one Device (see the module's docstring); `device` is the Device
    itself, for messages and the `device` attribute of what is made on it."""

    def __init__(self, device: "Device", info: "PhysicalDeviceInfo") -> None:
        # `info` only names the context: its properties are read through `device.info`.
        self.device: Device = device
        self.name: str = info.name
        self.lock = threading.RLock()
        self._open: Optional[Session] = None
        self._runtime: Optional[Runtime] = None  # the Vulkan device, opened on first use
        self._forgotten: "Deque[TensorStorage]" = collections.deque()
        self._limits: Optional[Tuple[tuple, Limits]] = None  # (environment, Limits)

    def after_fork(self) -> None:
        """In a child after fork(): a lock that another thread of the parent held stays held
        here, where that thread does not exist. (A device opened in the parent refuses to work
        here, runtime.FORKED; one that was not opens in the child.)"""
        self.lock: "threading.RLock" = threading.RLock()

    @property
    def info(self) -> "PhysicalDeviceInfo":
        """The device's properties (`Device.info`, which tests may replace)."""
        return self.device.info

    # -- sessions --
    def session(self) -> Session:
        """The open session, opening the device first if need be."""
        with self.lock:
            if self._open is None:
                if self._runtime is None:
                    extensions = ([FLOAT_ATOMICS_EXTENSION]
                                  if self.info.shader_buffer_float32_atomic_add else [])
                    if self.info.rounding_mode_rte_float16:  # the kernels' rte16 SPIR-V
                        extensions += RTE16_EXTENSIONS
                    self._runtime = Runtime(self.info.index, extensions, what=self.name)
                self._open = Session(self.name, self._runtime)
            return self._open

    def close_session(self) -> None:
        """Close every object made on the device; the next call opens a new session."""
        with self.lock:
            self._forgotten.clear()
            if self._open is not None:
                session, self._open = self._open, None
                session.close()

    def check_usable(self) -> None:
        """Raise where the device was opened and cannot be used now: in a child forked after
        the parent opened it (runtime.FORKED). Opens nothing."""
        if self._runtime is not None:
            self._runtime.check_usable()

    def forget(self, storage: "TensorStorage") -> None:
        """A DeviceTensor's finalizer, possibly from a garbage collection in the middle of
        another call: only note it; `collect` lets the caches go later."""
        self._forgotten.append(storage)

    def collect(self) -> None:
        """Let cached pipelines and calls of dropped tensors go (under the lock): those dropped
        before this call. Tensors dropped while it works wait for the next call, so that a
        call made from a garbage collection's callback in the middle of it (the lock is
        reentrant), dropping more, cannot keep it going forever."""
        for _ in range(len(self._forgotten)):
            if not self._forgotten:  # a nested call took the rest
                break
            storage = self._forgotten.popleft()
            if self._open is not None:
                for op in list(self._open.operators):
                    op.forget(storage)

    # -- what plans may assume --
    @property
    def float_atomic_add(self) -> bool:
        """Native float32 atomicAdd on storage buffers: the device supports it (pyvkgrad's kp
        patch enables it), unless PYVKGRAD_FLOAT_ATOMICS=0."""
        return (self.info.shader_buffer_float32_atomic_add
                and env_on("PYVKGRAD_FLOAT_ATOMICS"))

    @property
    def float16_rte(self) -> bool:
        """The kernels that convert to float16 run their rte16 SPIR-V (kernels.spirv): the
        device can fix those conversions to round to nearest even (pyvkgrad enables the
        extensions for it, _vulkan_info.RTE16_EXTENSIONS), unless PYVKGRAD_FLOAT16_RTE=0
        (then they round by integers). The same bits either way."""
        return (self.info.rounding_mode_rte_float16
                and env_on("PYVKGRAD_FLOAT16_RTE"))

    @property
    def max_buffer_bytes(self) -> int:
        """maxStorageBufferRange, or less with PYVKGRAD_MAX_BUFFER_BYTES."""
        limit = self.info.max_storage_buffer_range
        forced = env_int("PYVKGRAD_MAX_BUFFER_BYTES", "bytes", minimum=1024)
        return limit if forced is None else min(limit, forced)

    @property
    def wait_spin_us(self) -> int:
        """Microseconds a wait for a submission polls before it blocks (runtime.py)."""
        spin = env_int("PYVKGRAD_WAIT_SPIN_US", "microseconds", minimum=0)
        if spin is None:
            spin = 0 if self.info.device_type == "cpu" else DEFAULT_WAIT_SPIN_US
        return spin

    @property
    def max_loop_iterations(self) -> int:
        """Lavapipe's loop limit (llvmpipe: 65535), or 0 where there is none."""
        llvmpipe = "llvmpipe" in self.name.lower() or "llvmpipe" in self.info.driver_name.lower()
        return LLVMPIPE_MAX_LOOP_ITERATIONS if llvmpipe else 0

    @property
    def limits(self) -> Limits:
        """Recomputed when a PYVKGRAD_ variable that changes it does."""
        env = LIMIT_VARIABLES.values()
        if self._limits is None or self._limits[0] != env:
            self._limits = (env, self._make_limits())
        return self._limits[1]

    def _make_limits(self) -> Limits:
        i = self.info
        widest = min(i.max_compute_work_group_size[0], i.max_compute_work_group_invocations,
                     i.max_compute_shared_memory_size // 32)
        widest = 1 << (max(1, widest).bit_length() - 1)
        # PYVKGRAD_LOCAL_SIZE forces a narrower workgroup (tests use it to show reductions do
        # not depend on the workgroup or subgroup width); no plan then goes wider.
        forced = env_int("PYVKGRAD_LOCAL_SIZE", "invocations", minimum=1, power_of_two=True)
        local = min(forced or 256, widest)
        return Limits(subgroup_size=i.subgroup_size,
                      max_workgroups=min(i.max_compute_work_group_count[0], 65535),
                      max_storage_buffer_range=self.max_buffer_bytes,
                      local_size=local, max_local_size=local if forced else widest,
                      float_atomic_add=self.float_atomic_add,
                      max_loop_iterations=self.max_loop_iterations,
                      narrow_reductions=i.device_type == "cpu" and not forced,
                      unroll_loops=i.device_type == "cpu",
                      float16_rte=self.float16_rte)
