"""Devices, device tensors, compiled operators and recordings: DirectML's execution model.

Compile a descriptor once for a device (`Device.compile`), bind device tensors by field name,
run it (`op(**tensors)`) or record any number of compiled operators into one submission
(`Device.record`) and replay it. The one-call functions (`pyvkgrad.activation_relu_grad`, ...)
run through `Device.run`, which caches a compiled operator, its tensors and its recording per
descriptor (`Device.cache_info`; `Device.cache_clear` closes them all and gives their memory
back, leaving the device and the caller's own objects open).

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

import _signal
import collections
import enum
import os
import threading
import weakref
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from . import _vulkan_info, kernels
from ._copy import copy_into
from ._state import (ClosedError, Current, Hazards, Lifetime, OneCopy, Submission,
                     TensorState)
from .plan import READ, Limits, Plan
from .runtime import FLOAT_ATOMICS_EXTENSION, DeviceError, Runtime
from .tensor import (TensorDesc, array_desc, buffer_words, check_array, dml_name, elements_of,
                     fail, words_to_array)

__all__ = ["Device", "DeviceTensor", "CompiledOperator", "Recording", "DeviceError",
           "ClosedError", "devices", "default_device", "get_device"]

# How long a wait polls the fence before it blocks, on a hardware device (a blocking wait
# returns tens of microseconds late). Not on a CPU device: there the polling thread would take
# a core from the driver's own worker threads.
DEFAULT_WAIT_SPIN_US = 2000
# Lavapipe (llvmpipe) ends every shader loop once an invocation has run this many loop
# iterations in total, over all its loops: plans keep each invocation's loops below it.
LLVMPIPE_MAX_LOOP_ITERATIONS = 65535
# The one-call cache: at most this many descriptors, holding at most this many bytes of
# device and staging memory (a larger problem runs uncached).
ONE_CALL_CACHE_ENTRIES = 16
ONE_CALL_CACHE_BYTES = 1 << 30
# Per compiled operator: bound-tensor sets whose pipelines and command buffers are kept.
OPERATOR_CACHE_ENTRIES = 8

# os.environ.get costs about 1 us a variable (a Python-level mapping that encodes the name, and
# raises and catches KeyError when it is unset), and every one-call function reads four. On
# POSIX, os.environ keeps its values in a dict of bytes that its writes go through: where it
# has one, the checks below read that, for comparison with earlier calls only. os.environ is
# looked up on every call, so a replaced os.environ (mock.patch) is seen too.


class _Variables:
    """Environment variables that every one-call function checks: `values()` is what they
    hold now, raw (equal tuples mean equal values)."""

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
_LIMIT_VARIABLES = _Variables("PYVKGRAD_MAX_BUFFER_BYTES", "PYVKGRAD_LOCAL_SIZE",
                              "PYVKGRAD_FLOAT_ATOMICS")
_DEVICE_VARIABLE = _Variables("PYVKGRAD_DEVICE")


class _CacheKey:
    """A one-call cache key, (descriptor, limits), that hashes once: a cache hit looks it up
    twice, and hashing a descriptor walks every field of every tensor."""

    __slots__ = ("value", "hash")

    def __init__(self, value: tuple):
        self.value, self.hash = value, hash(value)

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return isinstance(other, _CacheKey) and self.hash == other.hash and \
            self.value == other.value


LAVAPIPE_HINT = ("install Mesa's software Vulkan driver lavapipe with "
                 "`apt-get install mesa-vulkan-drivers` (and the loader, libvulkan1)")


def _env_int(name: str, unit: str, minimum: int, power_of_two: bool = False) -> Optional[int]:
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


def layout_key(operator: str, params, *arrays) -> Optional[tuple]:
    """What decides a one-call problem's descriptor: the operator, its parameters and each
    array's type, shape, dtype and strides. None when something is not a plain array or a
    parameter is not a plain value (such calls always take the full path)."""
    layouts = []
    for a in arrays:
        if type(a) is not np.ndarray:
            return None
        # The dtype itself, not its `char`: '>f4' and '<f4' share 'f', and a hit would copy a
        # big-endian array's bytes as native ones (the full path refuses it). As cheap: numpy
        # caches a dtype's hash, and a native dtype is one object.
        layouts.append((a.shape, a.dtype, a.strides))
    frozen = _freeze(params)
    return None if frozen is None else (operator, frozen, tuple(layouts))


def _freeze(value):
    # Types are part of the key: True == 1 and 1 == 1.0, but they validate differently.
    if isinstance(value, (tuple, list)):
        items = [_freeze(v) for v in value]
        return None if any(i is None for i in items) else (type(value), tuple(items))
    if value is None or isinstance(value, (bool, int, float, str, enum.Enum, np.generic)):
        return (type(value), value)
    return None


class _InterruptsDeferred:
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


def _interrupts_deferred():
    return _InterruptsDeferred()


# ---- device discovery --------------------------------------------------------------------------

_devices: Optional[List["Device"]] = None
_devices_lock = threading.Lock()


def _unlock_after_fork() -> None:
    # In a child after fork(): a lock that another thread of the parent held stays held here,
    # where that thread does not exist. (A device opened in the parent refuses to work here:
    # runtime.FORKED; one that was not opens in the child.)
    global _devices_lock
    _devices_lock = threading.Lock()
    for device in _devices or ():
        device._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_after_fork)


def devices() -> List["Device"]:
    """Every Vulkan physical device, in the loader's order."""
    global _devices
    with _devices_lock:
        if _devices is None:
            try:
                infos = _vulkan_info.physical_devices()
            except _vulkan_info.VulkanUnavailable as e:
                raise DeviceError(f"no Vulkan loader: {e}; {LAVAPIPE_HINT}") from e
            _devices = [Device(info) for info in infos]
        return list(_devices)


def default_device() -> "Device":
    """`PYVKGRAD_DEVICE` (an index or part of a name), else the first GPU, else lavapipe."""
    global _default
    raw = _DEVICE_VARIABLE.values()
    if _default is not None and _default[0] == raw:
        return _default[1]  # every one-call function asks: answer from the last lookup
    found = devices()
    if not found:
        raise DeviceError(f"no Vulkan device found; {LAVAPIPE_HINT}")
    choice = os.environ.get("PYVKGRAD_DEVICE", "").strip()
    if choice:
        device = get_device(int(choice) if choice.isdigit() else choice)
    else:
        gpus = [d for d in found if d.info.device_type != "cpu"]
        device = (gpus or found)[0]
    _default = (raw, device)
    return device


_default: Optional[tuple] = None  # (PYVKGRAD_DEVICE raw, the device it chose)


# What the `device=` argument of the one-call functions takes: None (the default device), a
# Device, an index or part of a device name.
DeviceLike = Union[None, int, str, "Device"]


def get_device(which: "DeviceLike" = None) -> "Device":
    """A Device from None (default), a Device, an index or part of a device name."""
    if which is None:
        return default_device()
    if isinstance(which, Device):
        return which
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


# ---- tensors -----------------------------------------------------------------------------------

class _Storage:
    """What a device tensor is made of: its buffer (with staging), which copy is current, and
    whether it is still open. Recordings and caches keep this, not the DeviceTensor, so they
    never keep a tensor alive that its caller dropped."""

    __slots__ = ("desc", "buffer", "state", "lifetime", "_download", "__weakref__")

    def __init__(self, desc, buffer, lifetime):
        self.desc, self.buffer, self.lifetime = desc, buffer, lifetime
        # Staging holds the contents (zeros or data); a mapped buffer is its own staging.
        self.state = OneCopy() if buffer.kind == "mapped" else TensorState(Current.HOST)
        self._download = None  # a cached command buffer that copies the device copy back

    def host_words(self, action: str) -> np.ndarray:
        """Staging words holding the current contents (downloading first if need be)."""
        self.lifetime.check(action)
        if self.state.needs_download:
            if self._download is None:
                self._download = self.buffer.runtime.commands()
                self._download.download([self.buffer])
            with _interrupts_deferred():
                self._download.submit("read back")
                self.state.downloaded()
        return self.buffer.words()

    def write_elements(self, elements: np.ndarray) -> None:
        """The one-call path's write: `elements`, the 1-D span `array_desc` made for this
        descriptor, into the host-visible words (the caller checked the lifetime)."""
        copy_into(self.buffer.words().view(elements.dtype)[: elements.size], elements)
        self.state.host_written()

    def close(self):
        self.lifetime.close()
        if self._download is not None:
            self._download.destroy()
        self.buffer.destroy()


class DeviceTensor:
    """A device buffer holding a tensor laid out by `desc` (packed or strided).

    Made by `Device.upload` (a copy of an array) or `Device.empty` (zeros). `write` replaces
    the contents, `numpy` reads them; both go through host-visible staging memory, and the
    copies between staging and the device happen as part of the next submission that needs
    them.
    """

    def __init__(self, device: "Device", storage: _Storage):
        self.device = device
        self._storage = storage
        # When the caller drops this tensor, caches holding its storage let it go.
        weakref.finalize(self, device._forget, storage)

    @property
    def desc(self) -> TensorDesc:
        return self._storage.desc

    @property
    def nbytes(self) -> int:
        """Bytes of the device buffer (the descriptor's size rounded up to 16)."""
        return self._storage.buffer.nbytes

    @property
    def shape(self):
        return self.desc.sizes

    @property
    def dtype(self) -> np.dtype:
        return self.desc.data_type.numpy_dtype

    @property
    def closed(self) -> bool:
        return not self._storage.lifetime.alive

    def numpy(self) -> np.ndarray:
        """The tensor's elements as a new packed numpy array."""
        with self.device._lock:
            words = self._storage.host_words("DeviceTensor.numpy")
            return words_to_array(words, self.desc)

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("DeviceTensor: the elements live in device memory; numpy needs a "
                             "copy (np.asarray(t) or t.numpy())")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, stream=None):
        """DLPack of a host copy (never of device or staging memory, which may be freed)."""
        return self.numpy().__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: the capsule holds a host copy

    def write(self, array: np.ndarray) -> None:
        """Replace the contents with `array` (the tensor's dtype and shape; copied). The next
        operator call or replay that binds the tensor uploads it."""
        array = check_array(array, self.desc, "DeviceTensor.write", "array")
        with self.device._lock:
            storage = self._storage
            storage.lifetime.check("DeviceTensor.write")
            desc = storage.desc
            item = desc.data_type.element_size
            strides = tuple(s * item for s in desc.element_strides)
            if desc.has_overlap():
                trial = np.zeros(desc.element_span, desc.data_type.numpy_dtype)
                placed = np.lib.stride_tricks.as_strided(trial, desc.sizes, strides)
                placed[...] = array
                if not np.array_equal(placed, array, equal_nan=True):
                    fail("DeviceTensor.write", "array", "must hold equal values where the "
                         "descriptor's elements share memory (zero or overlapping strides)",
                         "equal values", "different values")
            # Elements outside the descriptor keep their values: if a kernel wrote the device
            # copy since, fetch it first (unless the descriptor covers every byte).
            covers = desc.is_packed and desc.element_count * item == storage.buffer.nbytes
            words = (storage.buffer.words() if covers
                     else storage.host_words("DeviceTensor.write"))
            np.lib.stride_tricks.as_strided(words.view(desc.data_type.numpy_dtype),
                                            desc.sizes, strides)[...] = array
            storage.state.host_written()

    def close(self) -> None:
        """Release the device memory now (it is also released when garbage-collected);
        using the tensor afterwards raises ClosedError."""
        with self.device._lock:
            self._storage.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else self._storage.state.current.value + " current"
        return (f"DeviceTensor({self.desc.data_type.name}, sizes={self.desc.sizes}, "
                f"strides={self.desc.strides}, device={self.device.name!r}, {state})")


# ---- compiled operators ------------------------------------------------------------------------

class CompiledOperator:
    """A descriptor compiled for one device: its plan, kernels and scratch buffers.

    Call it with device tensors named after the descriptor's tensor fields; it submits once.
    Pipelines bind particular buffers, so they are cached per bound-tensor set, and so is a
    recorded command buffer: calling again with the same tensors records nothing.
    """

    def __init__(self, device: "Device", session: "_Session", desc, plan: Plan):
        self.device = device
        self.desc = desc
        self.plan = plan
        self.operator = desc.OPERATOR
        self._lifetime = Lifetime(f"the compiled {self.operator} operator", session.lifetime)
        self._fields = dict(desc.tensor_fields())  # name -> (TensorDesc, access)
        self._in_place = dict(getattr(desc, "IN_PLACE", {}))
        self._session = session
        self._scratch = {}
        self._programs: "collections.OrderedDict" = collections.OrderedDict()
        self._calls: "collections.OrderedDict" = collections.OrderedDict()
        runtime = session.runtime
        tables = []
        for s in plan.scratch:
            words = None
            if s.words is not None:
                words = np.zeros(buffer_words(s.nbytes), dtype=np.uint32)
                words[: s.words.size] = s.words
            buf = runtime.buffer(buffer_words(s.nbytes) * 4,
                                 "device" if words is None else "staged", words=words)
            self._scratch[s.name] = buf
            if words is not None:
                tables.append(buf)
        if tables:  # constant tables reach the device once, at compile time
            cmds = runtime.commands()
            cmds.upload(tables)
            cmds.submit(f"{self.operator} tables")
            cmds.destroy()
        for d in plan.dispatches:
            kernels.spirv(d.kernel)  # load (and check) every kernel now, not at the first call

    @property
    def closed(self) -> bool:
        return not self._lifetime.alive

    def bind(self, tensors: Dict[str, "DeviceTensor"], action: str) -> Dict[str, "DeviceTensor"]:
        """Check that the bound tensors fit the descriptor and may share buffers as bound;
        raise before any device work."""
        self._lifetime.check(action)
        names = set(self._fields)
        if set(tensors) != names:
            missing = sorted(names - set(tensors))
            extra = sorted(set(tensors) - names)
            raise TypeError(f"{self.operator}: bind every tensor field by name: "
                            f"missing {missing}, unexpected {extra}")
        for name, tensor in tensors.items():
            desc, _ = self._fields[name]
            field = dml_name(name)
            if not isinstance(tensor, DeviceTensor):
                fail(self.operator, field, "must be bound to a DeviceTensor", "DeviceTensor",
                     type(tensor).__name__, TypeError)
            if tensor.device is not self.device:
                fail(self.operator, field, "is on another device", self.device.name,
                     tensor.device.name)
            tensor._storage.lifetime.check(f"{self.operator}: {field}")
            if tensor.desc.data_type != desc.data_type:
                fail(self.operator, field, "has the wrong data type", desc.data_type.name,
                     tensor.desc.data_type.name, TypeError)
            if tensor.nbytes < desc.total_tensor_size_in_bytes:
                fail(self.operator, field, "is bound to a buffer too small for its descriptor",
                     f">= {desc.total_tensor_size_in_bytes} bytes", f"{tensor.nbytes} bytes")
        self._check_aliasing(tensors)
        return tensors

    def _check_aliasing(self, tensors):
        """One tensor in several fields: inputs may share; an output only over an input that
        the operator allows in place (`IN_PLACE`), with the identical descriptor."""
        shared = collections.defaultdict(list)
        for name, tensor in tensors.items():
            shared[id(tensor._storage)].append(name)
        for names in shared.values():
            written = [n for n in names if self._fields[n][1] != "read"]
            if len(names) < 2 or not written:
                continue
            out = written[0]
            if len(written) > 1:
                fail(self.operator, " and ".join(dml_name(n) for n in written),
                     "are outputs bound to one tensor", "a tensor per output", "one tensor")
            for other in names:
                if other == out:
                    continue
                allowed = other in self._in_place.get(out, ())
                same = self._fields[other][0] == self._fields[out][0]
                if not (allowed and same):
                    rule = ("may share a tensor only with an identical descriptor" if allowed
                            else "may not share a tensor with " + dml_name(other))
                    pairs = ", ".join(f"{dml_name(o)} with {dml_name(i)}"
                                      for o, ins in self._in_place.items() for i in ins)
                    fail(self.operator, f"{dml_name(out)} and {dml_name(other)}",
                         f"are bound to one tensor; {dml_name(out)} {rule}",
                         f"in place only {pairs or 'never'} (identical descriptors)",
                         f"{self._fields[out][0]} over {self._fields[other][0]}")

    def __call__(self, **tensors: DeviceTensor) -> None:
        """Run once on `tensors` (one submission)."""
        device = self.device
        with device._lock:
            device._collect()
            # The same tensors as a cached call passed `bind` before, and a tensor's data type
            # and size never change: only lifetimes can, and the recording checks them.
            try:
                key = tuple(id(tensors[name]._storage) for name in self._fields)
            except (KeyError, AttributeError):
                key = None
            rec = self._calls.get(key) if len(tensors) == len(self._fields) else None
            if rec is not None:
                self._calls.move_to_end(key)
                rec._run()
                return
            self.bind(tensors, f"{self.operator} operator call")
            rec = Recording(device)
            rec.execute(self, **tensors)
            rec._finish()
            with _interrupts_deferred():
                rec._run()
                self._calls[key] = rec
                while len(self._calls) > OPERATOR_CACHE_ENTRIES:
                    self._calls.popitem(last=False)[1].close()

    def _program(self, index: int, buffers):
        """The pipeline of dispatch `index` bound to `buffers` (runtime Buffers), cached."""
        self._lifetime.check(f"{self.operator} operator")
        key = (index, tuple(id(b) for b in buffers))
        program = self._programs.get(key)
        if program is not None and program.alive:
            self._programs.move_to_end(key)
            return program
        d = self.plan.dispatches[index]
        program = self._session.runtime.program(
            buffers, kernels.spirv(d.kernel), d.workgroups,
            kernels.specialization(d.kernel, d.constants), len(d.push_constants))
        # The program holds its buffers, so their ids cannot be reused while it is cached.
        # Leaving the cache drops only the cache's reference: a recording may still use the
        # program, and Python frees it (and the pipeline) when the last user lets go.
        self._programs[key] = program
        while len(self._programs) > OPERATOR_CACHE_ENTRIES * len(self.plan.dispatches):
            self._programs.popitem(last=False)
        return program

    def _forget(self, storage: _Storage) -> None:
        """Drop cached pipelines and calls that bind `storage` (its tensor was dropped)."""
        for key in [k for k, rec in self._calls.items() if rec._binds(storage)]:
            self._calls.pop(key).close()
        for key in [k for k, p in self._programs.items()
                    if any(b is storage.buffer for b in p.buffers)]:
            del self._programs[key]  # a recording that binds the tensor keeps its own reference

    def close(self) -> None:
        """Release the operator's pipelines and scratch now; recordings that use it, and
        calling it, raise ClosedError afterwards."""
        with self.device._lock:
            self._lifetime.close()
            for rec in self._calls.values():
                rec.close()
            self._calls.clear()
            for program in self._programs.values():
                program.destroy()
            self._programs.clear()
            for buf in self._scratch.values():
                buf.destroy()
            self._scratch.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- recordings ---------------------------------------------------------------------------------

RecordingStats = collections.namedtuple("RecordingStats", "runs uploads command_buffers")


class Recording:
    """Compiled operators recorded into one submission, with the barriers they need.

    Submitted when the `with` block ends; `replay()` runs the same commands again. Each run
    first uploads the bound tensors whose staging copy is newer (a `write` since), so a
    replay always sees the current inputs; a replay with unchanged inputs copies nothing.
    """

    _COMMAND_BUFFERS = 8  # command buffers kept per recording, one per set of uploads

    def __init__(self, device: "Device", timestamps: bool = False):
        self.device = device
        session = device._session()
        self._session = session
        self._lifetime = Lifetime("the recording", session.lifetime)
        self._timestamps = timestamps
        self._steps: list = []  # (program, push words, label) or (None, [buffers], "barrier")
        self._storages: Dict[int, tuple] = {}  # id -> (storage, written)
        self._ops: Dict[int, CompiledOperator] = {}
        self._hazards = Hazards()
        self._downloads: List[_Storage] = []
        self._commands: "collections.OrderedDict" = collections.OrderedDict()
        self._finished = False
        self._last = None  # (commands, index of the first step's timestamp)
        self._runs = self._uploaded = self._built = 0
        self._submission = None  # made once the steps are final, reused by every run
        session.own(self)

    @property
    def stats(self) -> RecordingStats:
        """runs so far, tensors uploaded over them, command buffers recorded (one per set of
        tensors that needed an upload)."""
        return RecordingStats(self._runs, self._uploaded, self._built)

    @property
    def labels(self) -> List[str]:
        """What each recorded step is: "OPERATOR:kernel" for a dispatch, or "barrier"."""
        return [label for _, _, label in self._steps]

    def execute(self, op: CompiledOperator, **tensors: DeviceTensor) -> None:
        """Record `op` on `tensors` (named after its descriptor's tensor fields)."""
        with self.device._lock:
            self._lifetime.check("Recording.execute")
            if not isinstance(op, CompiledOperator):
                raise TypeError(f"execute() needs a CompiledOperator, got {type(op).__name__}")
            if op.device is not self.device:
                raise ValueError(f"{op.operator}: compiled for {op.device.name}, "
                                 f"recorded on {self.device.name}")
            if self._finished:
                raise RuntimeError("this recording was already submitted; record a new one")
            op.bind(tensors, "Recording.execute")
            self._ops[id(op)] = op
            buffers = {name: t._storage.buffer for name, t in tensors.items()}
            buffers.update(op._scratch)
            for name, t in tensors.items():
                storage = t._storage
                written = op._fields[name][1] != "read"
                was = self._storages.get(id(storage), (storage, False))[1]
                self._storages[id(storage)] = (storage, was or written)
            for index, d in enumerate(op.plan.dispatches):
                bound = [buffers[name] for name in kernels.binding_order(d.kernel, d.bindings)]
                hazards = self._hazards.dispatch([id(buffers[n]) for n in d.reads],
                                                 [id(buffers[n]) for n in d.writes])
                if hazards:
                    need = list({id(b): b for b in bound if id(b) in hazards}.values())
                    self._steps.append((None, need, "barrier"))
                program = op._program(index, bound)
                self._steps.append((program, np.array(d.push_constants or (0,),
                                                      dtype=np.uint32),
                                    f"{op.operator}:{d.kernel}"))

    def _download(self, tensors: Sequence[DeviceTensor]) -> None:
        """Copy `tensors` back to staging at the end of every run (the one-call path)."""
        self._downloads.extend(t._storage for t in tensors)

    def _binds(self, storage: _Storage) -> bool:
        return id(storage) in self._storages

    def _finish(self) -> None:
        self._finished = True
        submission = Submission()
        for storage, written in self._storages.values():
            submission.bind(storage.state, written)
        for storage in self._downloads:
            submission.download(storage.state)
        self._submission = (submission, ", ".join(dict.fromkeys(self.labels)) or "copies")

    def submit(self) -> None:
        """Submit the recording (first run); later runs use replay()."""
        with self.device._lock:
            self._lifetime.check("Recording.submit")
            if self._last is not None:
                raise RuntimeError("this recording was already submitted; use replay()")
            self._finish()
            self._run()

    def replay(self) -> None:
        """Run the recorded commands again on the tensors' current contents."""
        with self.device._lock:
            self._lifetime.check("Recording.replay")
            if self._last is None:
                raise RuntimeError("nothing submitted yet: end the `with` block first")
            self._run()

    def _check_open(self, action: str) -> None:
        self._lifetime.check(action)
        for op in self._ops.values():
            op._lifetime.check(action)
        for storage, _ in self._storages.values():
            storage.lifetime.check(action)

    def _run(self) -> None:
        self.device._collect()
        self._check_open("Recording.replay" if self._last is not None else "Recording.submit")
        submission, what = self._submission
        uploads = submission.uploads()
        key = tuple(id(s) for s in uploads)
        commands = self._commands.get(key)
        if commands is None:
            by_state = {id(s.state): s for s, _ in self._storages.values()}
            commands = self._build([by_state[k].buffer for k in key])
            self._built += 1
            self._commands[key] = commands
            while len(self._commands) > self._COMMAND_BUFFERS:
                self._commands.popitem(last=False)[1][0].destroy()
        else:
            self._commands.move_to_end(key)
        with _interrupts_deferred():
            commands[0].submit(what)
            submission.commit(uploads)
            self._last = commands
            self._runs += 1
            self._uploaded += len(uploads)

    def _build(self, uploads):
        runtime = self._session.runtime
        count = (2 if uploads else 0) + len(self._steps) + (1 if self._downloads else 0)
        commands = runtime.commands(count + 1 if self._timestamps else 0,
                                    self.device.wait_spin_us * 1000)
        if uploads:
            commands.upload(uploads)
        first = commands.recorded
        for program, arg, _ in self._steps:
            if program is None:
                commands.barrier(arg)
            else:
                commands.dispatch(program, arg)
        if self._downloads:
            commands.download([s.buffer for s in self._downloads])
        return commands, first

    def kernel_times_ns(self) -> List[float]:
        """Per-step durations (dispatches and barriers, as `labels`) of the last run, from
        Vulkan timestamps (needs timestamps=True)."""
        if self._last is None:
            raise RuntimeError("nothing submitted yet")
        if not self._timestamps:
            raise RuntimeError("record with device.record(timestamps=True) to time kernels")
        commands, first = self._last
        stamps = np.array(commands.timestamps(), dtype=np.float64)
        stamps *= self.device.info.timestamp_period
        return list(np.diff(stamps)[first: first + len(self._steps)])

    def close(self) -> None:
        """Release the recorded command buffers; replaying afterwards raises ClosedError."""
        with self.device._lock:
            self._lifetime.close()
            for commands, _ in self._commands.values():
                commands.destroy()
            self._commands.clear()
            self._steps = []
            self._storages = {}
            self._ops = {}
            self._downloads = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.submit()


# ---- the device ---------------------------------------------------------------------------------

class _Session:
    """One opening of a device: the lifetime every object made on it shares (closing the
    device closes them all and releases their Vulkan objects). The Vulkan device itself (the
    runtime) outlives sessions: the NVIDIA driver aborted the process after a few dozen
    create/destroy cycles of a device, and reopening costs nothing this way."""

    def __init__(self, device: "Device", runtime: Runtime):
        self.runtime = runtime
        self.lifetime = Lifetime(f"device {device.name!r}")
        self._owned = weakref.WeakSet()

    def own(self, obj) -> None:
        self._owned.add(obj)

    def close(self) -> None:
        self.lifetime.close()
        for obj in list(self._owned):
            obj.close()


class _OneCallEntry:
    """A one-call problem ready to run again: its operator, tensors, recording (uploads,
    dispatches, downloads), and what its inputs and outputs look like."""

    __slots__ = ("op", "tensors", "recording", "nbytes", "inputs", "outputs", "shapes",
                 "_writes", "_reads")

    def __init__(self, op, tensors, recording, inputs, outputs, shapes):
        self.op, self.tensors, self.recording = op, tensors, recording
        self.inputs = inputs  # ((field, TensorDesc), ...) in the caller's order
        self.outputs, self.shapes = outputs, shapes
        # Staged tensors hold their bytes twice (device and staging), mapped ones once.
        self.nbytes = sum(t.nbytes * (1 if t._storage.buffer.kind == "mapped" else 2)
                          for t in tensors.values()) + sum(b.nbytes
                                                           for b in op._scratch.values())
        # The hot path's lookups, done once: storages with their descriptors and shapes.
        self._writes = tuple((tensors[name]._storage, desc) for name, desc in inputs)
        self._reads = tuple((tensors[name]._storage, shape) for name, shape in zip(outputs,
                                                                                  shapes))

    def run(self, arrays) -> list:
        """Write `arrays` in, run the recording, read the outputs back (new arrays)."""
        self.recording._check_open("one-call function")  # its tensors and operator too
        for (storage, desc), array in zip(self._writes, arrays):
            storage.write_elements(elements_of(array, desc))
        self.recording._run()
        return [words_to_array(storage.host_words("one-call function"), storage.desc
                               ).reshape(shape) for storage, shape in self._reads]

    def close(self):
        self.recording.close()
        self.op.close()
        for t in self.tensors.values():
            t.close()


CacheInfo = collections.namedtuple("CacheInfo", "hits misses entries nbytes max_entries max_bytes")


class Device:
    """One Vulkan physical device. It opens (creates its Vulkan device) on first use, and
    again after `close()`."""

    def __init__(self, info):
        self.info = info
        self.index = info.index
        self.name = info.name
        self._lock = threading.RLock()
        self._open: Optional[_Session] = None
        self._runtime: Optional[Runtime] = None  # the Vulkan device, opened on first use
        self._one_call: "collections.OrderedDict" = collections.OrderedDict()
        self._forgotten: "collections.deque" = collections.deque()
        # (layout_key, _LIMIT_VARIABLES.values()) -> one-call cache key: the limits follow from
        # the device and those variables, so a hit needs neither descriptor nor limits.
        self._layouts: Dict[tuple, _CacheKey] = {}
        self._limits = None  # (environment, Limits)
        self._hits = self._misses = 0

    # -- plumbing --
    def _session(self) -> _Session:
        with self._lock:
            if self._open is None:
                if self._runtime is None:
                    extensions = ([FLOAT_ATOMICS_EXTENSION]
                                  if self.info.shader_buffer_float32_atomic_add else [])
                    self._runtime = Runtime(self.index, extensions, what=self.name)
                self._open = _Session(self, self._runtime)
            return self._open

    def runtime(self) -> Runtime:
        """The Vulkan runtime (runtime.py): the low-level seam for benchmarks and diagnostics.
        What is made directly on it is the caller's to destroy (`Device.close` closes only
        pyvkgrad's own tensors, operators and recordings)."""
        return self._session().runtime

    def _forget(self, storage: _Storage) -> None:
        # Called by a DeviceTensor's finalizer, possibly from a garbage collection in the
        # middle of another call: only note it; `_collect` lets the caches go later.
        self._forgotten.append(storage)

    def _collect(self) -> None:
        """Let cached pipelines and calls of dropped tensors go (under the lock)."""
        while self._forgotten:
            storage = self._forgotten.popleft()
            if self._open is not None:
                for obj in list(self._open._owned):
                    if isinstance(obj, CompiledOperator):
                        obj._forget(storage)

    @property
    def float_atomic_add(self) -> bool:
        """Whether kernels may use native float32 atomicAdd on storage buffers: the device
        supports it, and pyvkgrad's kp patch enables it when the device opens.
        PYVKGRAD_FLOAT_ATOMICS=0 turns it off (kernels then add through compare-and-swap)."""
        return (self.info.shader_buffer_float32_atomic_add
                and os.environ.get("PYVKGRAD_FLOAT_ATOMICS", "1").strip() != "0")

    @property
    def max_buffer_bytes(self) -> int:
        """The largest buffer a kernel may bind: the device's maxStorageBufferRange, or less
        with PYVKGRAD_MAX_BUFFER_BYTES (tests use it to exercise splitting on small arrays)."""
        limit = self.info.max_storage_buffer_range
        forced = _env_int("PYVKGRAD_MAX_BUFFER_BYTES", "bytes", minimum=1024)
        return limit if forced is None else min(limit, forced)

    @property
    def wait_spin_us(self) -> int:
        """Microseconds a wait for a submission polls before it blocks (see runtime.py)."""
        spin = _env_int("PYVKGRAD_WAIT_SPIN_US", "microseconds", minimum=0)
        if spin is None:
            spin = 0 if self.info.device_type == "cpu" else DEFAULT_WAIT_SPIN_US
        return spin

    @property
    def max_loop_iterations(self) -> int:
        """Loop iterations an invocation may run in total before the driver ends its loops
        (lavapipe's llvmpipe: 65535), or 0 where there is no such limit."""
        llvmpipe = "llvmpipe" in self.name.lower() or "llvmpipe" in self.info.driver_name.lower()
        return LLVMPIPE_MAX_LOOP_ITERATIONS if llvmpipe else 0

    @property
    def limits(self) -> Limits:
        """What plans may assume about this device (recomputed when a PYVKGRAD_ variable that
        changes it does)."""
        env = _LIMIT_VARIABLES.values()
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
        forced = _env_int("PYVKGRAD_LOCAL_SIZE", "invocations", minimum=1, power_of_two=True)
        local = min(forced or 256, widest)
        return Limits(subgroup_size=i.subgroup_size,
                      max_workgroups=min(i.max_compute_work_group_count[0], 65535),
                      max_storage_buffer_range=self.max_buffer_bytes,
                      local_size=local, max_local_size=local if forced else widest,
                      float_atomic_add=self.float_atomic_add,
                      max_loop_iterations=self.max_loop_iterations)

    # -- public API --
    def upload(self, array: np.ndarray) -> DeviceTensor:
        """A device tensor holding a copy of `array` (float32 or float16, any strides; a
        broadcast view keeps its zero strides and uploads only its distinct elements). The
        copy to the device runs with the next submission that uses the tensor."""
        desc, _ = array_desc(array, "Device.upload", "array")
        tensor = self._tensor(desc)
        # Through the view: what lies between a strided view's elements in its base array is
        # not the tensor's (the buffer holds zeros there).
        tensor.write(np.reshape(array, desc.sizes))
        return tensor

    def empty(self, desc: TensorDesc) -> DeviceTensor:
        """A device tensor laid out by `desc`, holding zeros (on the device too: kernels and
        `numpy` see the same contents)."""
        if not isinstance(desc, TensorDesc):
            raise TypeError(f"Device.empty: desc must be a TensorDesc, got {type(desc).__name__}")
        return self._tensor(desc)

    def _tensor(self, desc: TensorDesc, kind: str = "staged") -> DeviceTensor:
        nbytes = buffer_words(desc.total_tensor_size_in_bytes) * 4
        if nbytes > self.max_buffer_bytes:
            fail("Device", f"tensor {desc.sizes}", "exceeds the device's maximum storage buffer "
                 "range", f"<= {self.max_buffer_bytes} bytes", f"{nbytes} bytes")
        with self._lock:
            self._collect()
            session = self._session()
            storage = _Storage(desc, session.runtime.buffer(nbytes, kind),
                               Lifetime(f"the DeviceTensor {desc.sizes}", session.lifetime))
            tensor = DeviceTensor(self, storage)
            session.own(storage)
            return tensor

    def compile(self, desc, limits: Optional[Limits] = None) -> CompiledOperator:
        """Compile an operator descriptor: validate, plan and load its kernels once.

        `limits`: plan with these instead of `Device.limits` (explorations of plan choices,
        e.g. benchmarks/relu_variants.py; they must stay within what the device supports)."""
        plan_fn = getattr(desc, "plan", None)
        if plan_fn is None:
            raise TypeError(f"Device.compile needs an operator descriptor, got "
                            f"{type(desc).__name__}")
        for name, (t, _) in desc.tensor_fields():
            if buffer_words(t.total_tensor_size_in_bytes) * 4 > self.max_buffer_bytes:
                fail(desc.OPERATOR, f"{dml_name(name)}.Sizes", "make a tensor that "
                     f"exceeds the maximum storage buffer range of {self.name} (compiled "
                     f"operators bind whole buffers; the one-call functions cut such problems "
                     f"where they can)", f"<= {self.max_buffer_bytes} bytes",
                     f"{t.total_tensor_size_in_bytes} bytes")
        plan = desc.plan(self.limits if limits is None else limits)
        # Binding more storage buffers than the device allows a shader is undefined behaviour
        # in Vulkan (Vulkan guarantees 4; pyvkgrad's kernels bind up to 10): refuse it here.
        most = self.info.max_per_stage_descriptor_storage_buffers
        for d in plan.dispatches:
            if len(d.bindings) > most:
                fail(desc.OPERATOR, f"kernel {d.kernel}", f"binds more storage buffers than "
                     f"{self.name} allows a shader (maxPerStageDescriptorStorageBuffers)",
                     f"<= {most}", len(d.bindings), kind=RuntimeError)
        with self._lock:
            self._collect()
            session = self._session()
            op = CompiledOperator(self, session, desc, plan)
            session.own(op)
            return op

    def record(self, timestamps: bool = False) -> Recording:
        """`with device.record() as rec: rec.execute(op, **tensors)` submits once at the end."""
        with self._lock:
            return Recording(self, timestamps)

    def run(self, desc, arrays: Dict[str, np.ndarray], outputs: Sequence[str],
            shapes: Sequence[tuple], layout: Optional[tuple] = None) -> list:
        """One-call execution: compile (cached per descriptor), upload, run and read back in
        one submission. `arrays` maps input fields to arrays whose layouts `array_desc` turned
        into the descriptor's fields; outputs come back reshaped to `shapes`. With `layout`
        (`layout_key` of the call), `run_again` finds this problem without building its
        descriptor again."""
        with self._lock:
            self._collect()
            env = _LIMIT_VARIABLES.values()
            key = _CacheKey((desc, self.limits))
            entry = self._one_call.get(key)
            fields = dict(desc.tensor_fields())
            if entry is None:
                self._misses += 1
                op = self.compile(desc)
                # Inputs go straight into mapped memory when that is device memory: no staging
                # copy and no copy command. Only fields kernels read: outputs come back through
                # staging, since the host may read a kernel's writes to mapped memory only
                # after a barrier, and reads mapped device memory slowly.
                mapped = self._session().runtime.mapped_device_local
                tensors = {name: self._tensor(fields[name][0], "mapped" if mapped and name
                                              in arrays and fields[name][1] == READ
                                              else "staged") for name in fields}
                rec = Recording(self)
                rec.execute(op, **tensors)
                rec._download([tensors[n] for n in outputs])
                rec._finish()
                entry = _OneCallEntry(op, tensors, rec,
                                      tuple((n, fields[n][0]) for n in arrays),
                                      tuple(outputs), tuple(shapes))
                with _interrupts_deferred():
                    results = entry.run(list(arrays.values()))
                    self._cache_one_call(key, entry)
            else:
                self._hits += 1
                self._one_call.move_to_end(key)
                results = entry.run(list(arrays.values()))
            if key not in self._one_call:
                entry.close()  # too large to keep
            elif layout is not None:
                self._layouts[(layout, env)] = key
            return results

    def run_again(self, layout: Optional[tuple], arrays: Sequence[np.ndarray]):
        """The outputs of a one-call problem cached by `run` for arrays of the same layouts
        (`layout_key`), or None: then the caller takes the full path."""
        if layout is None:
            return None
        with self._lock:
            self._collect()
            key = self._layouts.get((layout, _LIMIT_VARIABLES.values()))
            entry = None if key is None else self._one_call.get(key)
            if entry is None:
                return None
            self._hits += 1
            self._one_call.move_to_end(key)
            return entry.run(arrays)

    def _cache_one_call(self, key, entry) -> None:
        if entry.nbytes > ONE_CALL_CACHE_BYTES:
            return
        self._one_call[key] = entry
        total = sum(e.nbytes for e in self._one_call.values())
        while len(self._one_call) > ONE_CALL_CACHE_ENTRIES or total > ONE_CALL_CACHE_BYTES:
            _, old = self._one_call.popitem(last=False)
            total -= old.nbytes
            old.close()
        live = set(self._one_call)
        self._layouts = {k: v for k, v in self._layouts.items() if v in live}

    def cache_info(self) -> CacheInfo:
        """The one-call cache: hits and misses so far, descriptors and bytes it holds, and its
        limits (like functools' cache_info)."""
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._one_call),
                             sum(e.nbytes for e in self._one_call.values()),
                             ONE_CALL_CACHE_ENTRIES, ONE_CALL_CACHE_BYTES)

    def cache_clear(self) -> None:
        """Empty the one-call cache: close its entries (their tensors, operators and
        recordings), so their memory goes back now, and restart its hits and misses at 0 (like
        functools' cache_clear). The device, and the tensors, operators and recordings made by
        callers, stay open."""
        with self._lock, _interrupts_deferred():
            entries = list(self._one_call.values())
            self._one_call.clear()
            self._layouts.clear()
            self._hits = self._misses = 0
            for entry in entries:
                entry.close()

    def memory_in_use(self) -> Optional[int]:
        """Bytes this process holds in the device's device-local heaps (VK_EXT_memory_budget),
        or None where the driver lacks the extension."""
        return _vulkan_info.device_memory_in_use(self.index)

    def close(self) -> None:
        """Release every Vulkan object made on this device: its tensors, operators and
        recordings are closed (using them raises ClosedError); new ones work as before."""
        with self._lock:
            self._one_call.clear()
            self._layouts.clear()
            self._forgotten.clear()
            if self._open is not None:
                session, self._open = self._open, None
                session.close()

    def __repr__(self):
        return f"Device({self.index}, {self.name!r})"
