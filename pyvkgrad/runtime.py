"""The Vulkan runtime: the only module that calls Kompute (kp), and where every kp quirk lives.

A small contract, in the spirit of tinygrad's runtime modules: a `Runtime` opens one Vulkan
device and makes `Buffer`s, `Program`s (a kernel bound to buffers: a descriptor set over a
pipeline that the runtime's programs of the same kernel and specialization share) and
`Commands` (a command buffer: uploads, dispatches, barriers, downloads) that it submits and
waits for. The device layer (recording.py, compiled_operator.py) decides what to record;
benchmarks and the validation canary use this seam too.

Quirks handled here:
- buffers come in three kinds (`BUFFER_KINDS`): staged (kp's device tensors: device memory
  and a host-visible staging copy), device (scratch without staging), mapped (kp's host
  tensors, which the patch puts in device memory where the host can map all of it);
- buffers are always created with an explicit dtype (`tensor_t` on uint32 words); float16
  travels packed two to a word;
- push and specialization constants are always numpy uint32 arrays (a Python list would be
  sent as float32 and a kernel reading `uint` would see the float's bit pattern);
- workgroup counts are always explicit (kp defaults them to the tensor size);
- kp records no compute->compute barrier; `Commands.barrier` records `OpMemoryBarrier`
  (bound by pyvkgrad's kp patch) and `Commands.upload` adds the transfer -> shader
  read/write barrier kp's own copy lacks (a dispatch may overwrite what was just uploaded);
- kp is not thread-safe: the device layer holds its device's lock around every call here;
- stock kp creates and destroys a fence on every submission (about 500 us on an NVIDIA
  H100); the patch keeps one per command buffer, so command buffers are kept and replayed;
- a blocking fence wait returns tens of microseconds after the work finished, so on hardware
  devices a wait polls the fence first (the patch's `set_wait_spin`);
- every object here checks that it, and its runtime, are still open before it calls kp: a kp
  object used after its Manager was destroyed reads freed memory or crashes the interpreter;
- a child made by fork() inherits the runtimes but not the driver's threads: a submission there
  waits forever on a fence nothing signals, and destroying an inherited object waits too (or,
  where the device file is shared, frees the parent's). In the child every runtime open at the
  fork is abandoned: using it raises `FORKED` before any kp call, and its kp objects are kept
  alive to the end, so that no destructor ever calls the driver with them.
"""

from __future__ import annotations

import ctypes
import os
import time
import weakref
from typing import Any, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import _vulkan_info
from ._state import ClosedError


def _import_kp() -> Any:
    # The runtime is pyvkgrad's own build of kp 0.9.0 with tools/kp-0.9.0.patch
    # (pyvkgrad._kompute, compiled by the wheel build), never a stock `kp`.
    try:
        from . import _kompute as kp
    except ImportError as e:
        raise ImportError(
            f"pyvkgrad's Kompute runtime (pyvkgrad._kompute) is missing or cannot load ({e}). "
            "It is built with pyvkgrad's wheel: install pyvkgrad with pip (pip install "
            "<pyvkgrad checkout>), or in a checkout run ./tools/test or ./tools/demo, which "
            "build it") from e
    from ._kompute_check import check
    check(kp)
    return kp


kp: Any = _import_kp()

# Vulkan enum values passed to OpMemoryBarrier.
_ACCESS_SHADER_READ = 0x20
_ACCESS_SHADER_WRITE = 0x40
_ACCESS_TRANSFER_WRITE = 0x1000
_STAGE_COMPUTE_SHADER = 0x800
_STAGE_TRANSFER = 0x1000

FLOAT_ATOMICS_EXTENSION = "VK_EXT_shader_atomic_float"

# What `Runtime.buffer` makes, by kind: "staged", device memory with a host-visible staging copy
# that `Commands.upload` / `download` move; "device", device memory alone (scratch); "mapped",
# one host-visible allocation that kernels bind directly and the host writes in place (device
# memory where the driver maps it all, see `Runtime.mapped_device_local`).
BUFFER_KINDS: "dict[str, Any]" = {"staged": kp.TensorTypes.device, "device": kp.TensorTypes.storage,
                "mapped": kp.TensorTypes.host}


class DeviceError(RuntimeError):
    """A Vulkan failure, re-raised with what pyvkgrad was doing."""


FORKED = ("pyvkgrad: the Vulkan device was opened in the parent process; a forked child cannot "
          "use it: use multiprocessing's 'spawn' or 'forkserver' start method")

_runtimes: "weakref.WeakSet[Runtime]" = weakref.WeakSet()  # open ones, for the fork hook


def _abandon_after_fork() -> None:
    abandoned = [runtime for runtime in list(_runtimes) if not runtime.closed]
    for runtime in abandoned:
        runtime._abandon()
    if abandoned:
        _exit_past_the_driver()


def _exit_past_the_driver() -> None:
    """Make this forked child's exit() end in _exit(status) before the C exit handlers and
    library destructors that ran before the fork registered: the NVIDIA driver's crash in a
    child (its threads were not copied; exit status -11 on an H100) and may tear down state
    its device file shares with the parent. Python has finished its own finalization (atexit,
    flushing) by then, and the status is exit()'s own: glibc's on_exit passes it on, and
    _exit ignores the extra argument. Elsewhere (no on_exit) nothing changes."""
    try:
        libc = ctypes.CDLL(None)
        on_exit, _exit = libc.on_exit, libc._exit
    except (OSError, AttributeError):
        return
    on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    on_exit(ctypes.cast(_exit, ctypes.c_void_p), None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_after_fork)


class Runtime:
    """One Vulkan device opened through kp (`index`: the loader's device order). `extensions`
    are device extensions to enable (each once); with VK_EXT_shader_atomic_float the patch also
    enables its float32 buffer atomics, with VK_KHR_shader_float16_int8 shaderFloat16."""

    def __init__(self, index: int, extensions: Sequence[str] = (), what: str = "") -> None:
        self.what: str = what or f"Vulkan device {index}"
        # As requested, each once (kp enables those the device has; pyvkgrad requests only
        # those it has). A repeat would chain the patch's feature struct to itself.
        self.extensions: Tuple[str, ...] = tuple(dict.fromkeys(extensions))
        self._mapped_device_local: Optional[bool] = None
        self._forked = False
        self._objects: "weakref.WeakSet[_Owned]" = weakref.WeakSet()  # made here, for _abandon
        try:
            # kp opens the same loader when the Manager is made (patch part 14); without one,
            # say what to install rather than kp's bare message.
            _vulkan_info.loader()
        except _vulkan_info.NoLoader as e:
            raise DeviceError(str(e)) from e
        try:
            self._mgr: Any = kp.Manager(index, [], list(self.extensions))
        except Exception as e:
            raise DeviceError(f"creating a Vulkan device on {self.what} failed: {e}") from e
        _runtimes.add(self)

    @property
    def closed(self) -> bool:
        return self._mgr is None

    def check_usable(self) -> None:
        """Raise where the runtime cannot be used: closed, or opened before a fork() (FORKED)."""
        self._check()

    def _check(self) -> None:
        if self._mgr is None:
            if self._forked:
                raise RuntimeError(FORKED)
            raise ClosedError(f"{self.what}: its runtime is closed")

    def _abandon(self) -> None:
        """In a child after fork(): close without calling the driver. The kp objects are
        referenced for good (a reference count Python never sees dropped), so neither their
        destructors nor the interpreter's exit destroy them."""
        if self._mgr is None:
            return
        kept = [self._mgr] + [obj._kp for obj in list(self._objects) if obj._kp is not None]
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
        self._mgr, self._forked = None, True

    def buffer(self, nbytes: int, kind: str = "staged", words: Optional[np.ndarray] = None
               ) -> "Buffer":
        """A device buffer of `nbytes` (a multiple of 16) of one of `BUFFER_KINDS`. Staged and
        mapped buffers have host-visible words (`Buffer.words`); initial contents are `words`
        (uint32), else zeros."""
        self._check()
        if words is None:
            words = np.zeros(nbytes // 4, dtype=np.uint32)
        try:
            return Buffer(self, self._mgr.tensor_t(words, BUFFER_KINDS[kind]), nbytes, kind)
        except Exception as e:
            raise DeviceError(f"allocating {nbytes} bytes on {self.what} failed: {e}") from e

    @property
    def mapped_device_local(self) -> bool:
        """Whether mapped buffers are device memory (resizable BAR, or a device whose memory is
        host memory): then kernels read them as fast as any buffer (patch part 13)."""
        if self._mapped_device_local is None:
            probe = self.buffer(16, "mapped")
            self._mapped_device_local = bool(probe._kp.is_device_local())
            probe.destroy()
        return self._mapped_device_local

    @property
    def input_kind(self) -> str:
        """The kind of buffer for a tensor the host writes and kernels only read: "mapped"
        where mapped buffers are device memory (the host's copy is then the only copy, with no
        staging copy and no upload command), else "staged". Never for a tensor a kernel
        writes: the host may read those writes only after a barrier that a download records,
        and reads mapped device memory slowly."""
        return "mapped" if self.mapped_device_local else "staged"

    def program(self, buffers: Sequence["Buffer"], spirv: bytes, workgroups: int,
                specialization: np.ndarray, push_words: int) -> "Program":
        """A kernel bound to `buffers` (set 0, bindings 0..n-1 in order), specialised with
        `specialization` (uint32 in SpecId order) and taking `push_words` push-constant words."""
        self._check()
        for b in buffers:
            b._check()
        try:
            algo = self._mgr.algorithm([b._kp for b in buffers], spirv, [workgroups, 1, 1],
                                       np.asarray(specialization, dtype=np.uint32),
                                       np.zeros(max(1, push_words), dtype=np.uint32))
        except Exception as e:
            raise DeviceError(f"creating a pipeline on {self.what} failed: {e}") from e
        return Program(self, algo, buffers)

    @property
    def pipelines_made(self) -> int:
        """How many pipelines this runtime's programs have compiled. Programs of one kernel with
        the same specialization and push-constant size share one (patch part 15), over any
        buffers, and the 64 most recently used outlive their programs."""
        self._check()
        return int(self._mgr.pipelines_made())

    def release_pipelines(self) -> None:
        """Let go of the pipelines kept for later programs (those no program holds are
        destroyed)."""
        self._check()
        self._mgr.release_pipelines()

    def commands(self, timestamps: int = 0, wait_spin_ns: int = 0) -> "Commands":
        """An empty command buffer; `timestamps` > 0 reserves that many timestamp queries."""
        self._check()
        seq = self._mgr.sequence(0, timestamps)
        seq.set_wait_spin(wait_spin_ns)
        return Commands(self, seq)

    def close(self) -> None:
        """Destroy the device and everything made on it; later use raises ClosedError."""
        if self._mgr is not None:
            self._mgr.destroy()
            self._mgr = None


class _Owned:
    """A kp object owned by a runtime: usable while both are open."""

    __slots__ = ("runtime", "_kp", "__weakref__")

    def __init__(self, runtime: Runtime, kp_object: Any) -> None:
        self.runtime: Runtime = runtime
        self._kp: Any = kp_object
        runtime._objects.add(self)

    def _check(self) -> None:
        if self._kp is None:
            raise ClosedError(f"{type(self).__name__} on {self.runtime.what} was destroyed")
        self.runtime._check()

    @property
    def alive(self) -> bool:
        return self._kp is not None and not self.runtime.closed

    def destroy(self) -> None:
        if self._kp is not None:
            if not self.runtime.closed:
                self._kp.destroy()
            self._kp = None


class Buffer(_Owned):
    """A device buffer of one of `BUFFER_KINDS` (`Runtime.buffer`)."""

    __slots__ = ("nbytes", "kind", "_words")

    def __init__(self, runtime: Runtime, kp_tensor: Any, nbytes: int, kind: str) -> None:
        super().__init__(runtime, kp_tensor)
        self.nbytes: int = nbytes
        self.kind: str = kind
        self._words: Optional[np.ndarray] = None

    def words(self) -> np.ndarray:
        """The host-visible memory (staging, or a mapped buffer itself) as uint32 words: a
        view, valid until the buffer is destroyed (never keep it past that: the memory is
        unmapped)."""
        self._check()
        if self._words is None:
            self._words = self._kp.data()
        return self._words

    def destroy(self) -> None:
        self._words = None
        super().destroy()


class Program(_Owned):
    """A kernel bound to buffers (`Runtime.program`): its own descriptor set, over a pipeline
    shared with the runtime's other programs of the kernel and specialization."""

    __slots__ = ("buffers",)

    def __init__(self, runtime: Runtime, algo: Any, buffers: Sequence[Buffer]) -> None:
        # The buffers stay referenced: kp holds them too, so they live while the program does.
        super().__init__(runtime, algo)
        self.buffers: "tuple[Buffer, ...]" = tuple(buffers)


class Commands(_Owned):
    """A command buffer. Record with the methods below, then `submit()` as often as needed."""

    __slots__ = ("_count", "_held")

    def __init__(self, runtime: Runtime, seq: Any) -> None:
        super().__init__(runtime, seq)
        self._count = 0
        self._held: List[_Owned] = []

    def _record(self, op: Any, *held: _Owned) -> None:
        self._check()
        for h in held:
            h._check()
        self._kp.record(op)
        self._count += 1
        self._held.extend(held)

    def upload(self, buffers: Sequence[Buffer]) -> None:
        """Copy staging to device, then a barrier so that dispatches may read or overwrite it
        (kp's own barrier after a copy covers shader reads only)."""
        kps = [b._kp for b in buffers]
        self._record(kp.OpTensorSyncDevice(kps), *buffers)
        self._record(kp.OpMemoryBarrier(kps, _ACCESS_TRANSFER_WRITE,
                                        _ACCESS_SHADER_READ | _ACCESS_SHADER_WRITE,
                                        _STAGE_TRANSFER, _STAGE_COMPUTE_SHADER))

    def download(self, buffers: Sequence[Buffer]) -> None:
        """Copy device to staging (kp records the shader-write -> transfer barrier)."""
        self._record(kp.OpTensorSyncLocal([b._kp for b in buffers]), *buffers)

    def copy(self, src: Buffer, dst: Buffer) -> None:
        """vkCmdCopyBuffer of the whole of src into dst (benchmarks' copy roofline)."""
        self._record(kp.OpTensorCopy([src._kp, dst._kp]), src, dst)

    def dispatch(self, program: Program, push: np.ndarray) -> None:
        """Run `program` with the push-constant words `push` (uint32)."""
        self._record(kp.OpAlgoDispatch(program._kp, np.asarray(push, dtype=np.uint32)),
                     program)

    def barrier(self, buffers: Iterable[Buffer]) -> None:
        """Compute -> compute: earlier dispatches' writes to `buffers` become visible to later
        dispatches' reads and writes."""
        buffers = list(buffers)
        self._record(kp.OpMemoryBarrier([b._kp for b in buffers], _ACCESS_SHADER_WRITE,
                                        _ACCESS_SHADER_READ | _ACCESS_SHADER_WRITE,
                                        _STAGE_COMPUTE_SHADER, _STAGE_COMPUTE_SHADER),
                     *buffers)

    @property
    def recorded(self) -> int:
        """How many commands were recorded (barriers and upload barriers included)."""
        return self._count

    def submit(self, what: str = "", timings: Optional[List[Tuple[int, int]]] = None) -> None:
        """Submit and wait for completion (nothing recorded: nothing to submit). With
        `timings` (diagnostics: benchmarks/investigations/host_overhead.py), append the
        nanoseconds of the two halves, (vkQueueSubmit, the fence wait)."""
        self._check()
        for h in self._held:
            h._check()
        if not self._count:  # an empty command buffer is never begun: not submittable
            return
        try:
            if timings is None:
                self._kp.eval()
            else:
                t0 = time.perf_counter_ns()
                self._kp.eval_async()
                t1 = time.perf_counter_ns()
                self._kp.eval_await()
                timings.append((t1 - t0, time.perf_counter_ns() - t1))
        except Exception as e:
            raise DeviceError(f"submission of {what or 'commands'} failed on "
                              f"{self.runtime.what}: {e}") from e

    def timestamps(self) -> List[int]:
        """Raw timestamp ticks of the last submission: one before the first command and one
        after each."""
        self._check()
        return list(self._kp.get_timestamps())

    def destroy(self) -> None:
        self._held = []
        super().destroy()
