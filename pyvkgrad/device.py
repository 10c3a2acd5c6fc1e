"""The device layer: the only module that imports kp, and where every kp quirk lives.

Quirks handled here (../shared/kompute.md):
- tensors are always created with an explicit dtype (`tensor_t` on uint32 words); float16
  travels packed two to a word;
- push and specialization constants are always numpy uint32 arrays (a Python list would be
  sent as float32 and a kernel reading `uint` would see the float's bit pattern);
- workgroup counts are always explicit (kp defaults them to the tensor size);
- kp records no compute->compute barrier; we record `OpMemoryBarrier` (bound by our kp patch,
  tools/kp-0.9.0.patch) exactly where a dispatch reads or overwrites what an
  earlier one in the same submission touched;
- kp is not thread-safe: every call into it holds the device's lock;
- stock kp creates and destroys a fence on every submission (about 500 us on an NVIDIA H100);
  our kp patch keeps one per sequence, so we keep sequences: one per recording, replayed;
- a blocking fence wait returns tens of microseconds after the work finished (20 us for a
  trivial job, 70 us for a 270 us chain on the H100), so on hardware devices we poll the fence
  for up to DEFAULT_WAIT_SPIN_US first (the patch's `Sequence.set_wait_spin`;
  PYVKGRAD_WAIT_SPIN_US overrides, 0 disables).

Model (DirectML's): compile a descriptor once (`Device.compile`), bind device tensors, record
any number of compiled operators into one submission (`Device.record`), replay it.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Dict, List, Optional, Sequence

import numpy as np

from . import _vulkan_info, kernels
from .plan import Limits, Plan
from .tensor import TensorDesc, buffer_words, describe_array, fail, \
    words_to_array


def _import_kp():
    # The runtime is pyvkgrad's own build of kp 0.9.0 with tools/kp-0.9.0.patch
    # (pyvkgrad._kompute, compiled by the wheel build), never a stock `kp`. (Stock kp called
    # logging.basicConfig() at import, so this used to shield the root logger; the patch
    # removed that call.)
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


kp = _import_kp()

# Vulkan enum values passed to OpMemoryBarrier.
_ACCESS_SHADER_READ = 0x20
_ACCESS_SHADER_WRITE = 0x40
_STAGE_COMPUTE_SHADER = 0x800
_ACCESS_TRANSFER_WRITE = 0x1000
_STAGE_TRANSFER = 0x1000
_HAS_MEMORY_BARRIER = hasattr(kp, "OpMemoryBarrier")
_HAS_WAIT_SPIN = hasattr(kp.Sequence, "set_wait_spin")
# Patch level 2 enables VK_EXT_shader_atomic_float's float32 buffer atomics when asked.
_CAN_ENABLE_FLOAT_ATOMICS = getattr(kp, "pyvkgrad_patch", 0) >= 2
_ATOMIC_FLOAT_EXTENSION = "VK_EXT_shader_atomic_float"
# How long a wait polls the fence before it blocks, on a hardware device. Not on a CPU device:
# there the polling thread would take a core from the driver's own worker threads.
DEFAULT_WAIT_SPIN_US = 2000

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


class DeviceError(RuntimeError):
    """A Vulkan/kp failure, re-raised with what pyvkgrad was doing."""


# ---- device discovery --------------------------------------------------------------------------

_devices: Optional[List["Device"]] = None
_devices_lock = threading.Lock()


def devices() -> List["Device"]:
    """Every Vulkan physical device, in the loader's order (kp's device indices)."""
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
    found = devices()
    if not found:
        raise DeviceError(f"no Vulkan device found; {LAVAPIPE_HINT}")
    choice = os.environ.get("PYVKGRAD_DEVICE", "").strip()
    if choice:
        return get_device(int(choice) if choice.isdigit() else choice)
    gpus = [d for d in found if d.info.device_type != "cpu"]
    return (gpus or found)[0]


def get_device(which=None) -> "Device":
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

class DeviceTensor:
    """A device buffer holding a tensor laid out by `desc` (packed or strided).

    Host data goes through a host-visible staging twin (kp's device tensors): `upload` fills
    it, and the copy to the device is recorded into the next submission that uses the tensor.
    """

    def __init__(self, device: "Device", desc: TensorDesc, kp_tensor, nbytes: int,
                 pending_upload: bool):
        self.device = device
        self.desc = desc
        self.nbytes = nbytes
        self._kp = kp_tensor
        self._pending_upload = pending_upload
        self._device_newer = False  # a dispatch wrote it since the staging copy was refreshed

    @property
    def shape(self):
        return self.desc.sizes

    @property
    def dtype(self):
        return self.desc.data_type.numpy_dtype

    def numpy(self) -> np.ndarray:
        """The tensor's logical elements as a packed numpy array (a copy)."""
        with self.device._lock:
            self._check_open()
            if self._device_newer:
                self.device._submit_ops([kp.OpTensorSyncLocal([self._kp])], "read back")
                self._device_newer = False
            return words_to_array(self._kp.data(), self.desc)

    def write(self, words: np.ndarray) -> None:
        """Replace the buffer's contents with `words` (uint32), copied at the next submission."""
        self._write(words)

    def _write(self, values: np.ndarray) -> None:
        # Straight into the mapped staging memory, viewed as the values' dtype: elements from
        # `array_desc` need no intermediate word copy.
        with self.device._lock:
            self._check_open()
            self._kp.data().view(values.dtype)[: values.size] = values
            self._pending_upload = True
            self._device_newer = False

    def close(self) -> None:
        """Release the Vulkan buffers now (they are also released when garbage-collected)."""
        with self.device._lock:
            if self._kp is not None:
                self._kp.destroy()
                self._kp = None

    def _check_open(self):
        if self._kp is None:
            raise ValueError("DeviceTensor is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"DeviceTensor({self.desc.data_type.name}, sizes={self.desc.sizes}, "
                f"strides={self.desc.strides}, device={self.device.name!r})")


# ---- compiled operators and recordings ---------------------------------------------------------

class CompiledOperator:
    """A descriptor compiled for one device: its plan, kernels and scratch buffers.

    Call it with device tensors named after the descriptor's tensor fields; it submits once.
    kp ties a pipeline to the buffers it binds, so kp algorithms are cached per set of bound
    buffers: calling again with the same tensors rebuilds nothing.
    """

    _CACHE = 8  # bound-buffer sets remembered per dispatch

    def __init__(self, device: "Device", desc, plan: Plan):
        self.device = device
        self.desc = desc
        self.plan = plan
        self.operator = desc.OPERATOR
        self._fields = dict(desc.tensor_fields())  # name -> (TensorDesc, access)
        self._scratch = {}
        tables = []
        for s in plan.scratch:
            what = f"{self.operator} scratch {s.name}"
            if s.words is None:
                self._scratch[s.name] = device._create_buffer(s.nbytes, staging=False, what=what)
            else:
                words = np.zeros(buffer_words(s.nbytes), dtype=np.uint32)
                words[: s.words.size] = s.words
                self._scratch[s.name] = device._create_buffer(s.nbytes, True, what, words)
                tables.append(self._scratch[s.name])
        if tables:  # constant tables reach the device once, at compile time
            device._submit_ops([kp.OpTensorSyncDevice(tables)], f"{self.operator} tables")
        self._algorithms: "collections.OrderedDict" = collections.OrderedDict()
        self._recordings: "collections.OrderedDict" = collections.OrderedDict()
        for d in plan.dispatches:
            kernels.spirv(d.kernel)  # load (and check) every kernel now, not at the first call

    @property
    def tensor_names(self):
        return tuple(self._fields)

    def bind(self, tensors: Dict[str, DeviceTensor]) -> Dict[str, DeviceTensor]:
        """Check that the bound tensors fit the descriptor; raise before any device work."""
        names = set(self._fields)
        if set(tensors) != names:
            missing = sorted(names - set(tensors))
            extra = sorted(set(tensors) - names)
            raise TypeError(f"{self.operator}: bind every tensor field by name: "
                            f"missing {missing}, unexpected {extra}")
        for name, tensor in tensors.items():
            desc, _ = self._fields[name]
            field = _dml_field(name)
            if not isinstance(tensor, DeviceTensor):
                fail(self.operator, field, "must be bound to a DeviceTensor", "DeviceTensor",
                     type(tensor).__name__, TypeError)
            if tensor.device is not self.device:
                fail(self.operator, field, "is on another device", self.device.name,
                     tensor.device.name)
            tensor._check_open()
            if tensor.desc.data_type != desc.data_type:
                fail(self.operator, field, "has the wrong data type", desc.data_type.name,
                     tensor.desc.data_type.name, TypeError)
            if tensor.nbytes < desc.total_tensor_size_in_bytes:
                fail(self.operator, field, "is bound to a buffer too small for its descriptor",
                     f">= {desc.total_tensor_size_in_bytes} bytes", f"{tensor.nbytes} bytes")
        return tensors

    def __call__(self, **tensors: DeviceTensor) -> None:
        """Run once on `tensors`. The recording is cached per set of bound tensors, so a repeated
        call replays a command buffer instead of recording one."""
        with self.device._lock:
            key = tuple((name, id(t)) for name, t in sorted(tensors.items()))
            entry = self._recordings.get(key)
            if entry is not None and all(t._kp is not None for t in entry[1]):
                self._recordings.move_to_end(key)
                for name, (_, access) in self._fields.items():
                    if access != "read":
                        tensors[name]._device_newer = True
                entry[0].replay()
                return
            rec = self.device.record()
            rec.execute(self, **tensors)
            rec.submit()
            self._recordings[key] = (rec, tuple(tensors.values()))
            if len(self._recordings) > self._CACHE:
                self._recordings.popitem(last=False)

    def _algorithm(self, index: int, buffers):
        """The kp algorithm of dispatch `index` bound to `buffers` (kp tensors), cached."""
        key = (index, tuple(id(b) for b in buffers))
        entry = self._algorithms.get(key)
        if entry is not None:
            self._algorithms.move_to_end(key)
            return entry[0]
        d = self.plan.dispatches[index]
        try:
            algo = self.device._manager().algorithm(
                list(buffers), kernels.spirv(d.kernel), [d.workgroups, 1, 1],
                np.array(d.spec_constants, dtype=np.uint32),
                np.array(d.push_constants or (0,), dtype=np.uint32))
        except Exception as e:
            raise DeviceError(f"{self.operator}: creating kernel {d.kernel} failed: {e}") from e
        # The entry keeps the buffers alive, so their ids cannot be reused while it is cached.
        self._algorithms[key] = (algo, buffers)
        if len(self._algorithms) > self._CACHE * len(self.plan.dispatches):
            self._algorithms.popitem(last=False)
        return algo

    def close(self):
        with self.device._lock:
            self._recordings.clear()
            for algo, _ in self._algorithms.values():
                algo.destroy()
            self._algorithms.clear()
            for buf in self._scratch.values():
                buf.destroy()
            self._scratch.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _dml_field(name: str) -> str:
    """input_gradient_tensor -> InputGradientTensor (DirectML's field name, for messages)."""
    return "".join(part.capitalize() for part in name.split("_"))


class Recording:
    """Compiled operators recorded into one submission, with the barriers they need.

    A dispatch that reads or writes a buffer written earlier in the recording, or writes one
    read earlier, gets a compute->compute buffer memory barrier on exactly those buffers;
    independent dispatches get none. Submitted when the `with` block ends; `replay()` runs
    the same command buffer again without recording anything.
    """

    def __init__(self, device: "Device", timestamps: bool = False):
        self.device = device
        self._timestamps = timestamps
        self._ops: list = []
        self._labels: List[str] = []
        self._uploads: list = []  # DeviceTensors whose staging copy must reach the device first
        self._downloads: list = []
        self._written: set = set()  # kp tensor ids written since their last barrier
        self._read: set = set()  # kp tensor ids read since the last barrier
        self._written_tensors: list = []
        self._sequences: dict = {}
        self._last = None
        self._count = 0

    def execute(self, op: CompiledOperator, **tensors: DeviceTensor) -> None:
        """Record `op` on `tensors` (named after its descriptor's tensor fields)."""
        if not isinstance(op, CompiledOperator):
            raise TypeError(f"execute() needs a CompiledOperator, got {type(op).__name__}")
        if op.device is not self.device:
            raise ValueError(f"{op.operator}: compiled for {op.device.name}, "
                             f"recorded on {self.device.name}")
        if self._sequences:
            raise RuntimeError("this recording was already submitted; record a new one")
        op.bind(tensors)
        for t in tensors.values():
            if t._pending_upload and t not in self._uploads:
                self._uploads.append(t)
        buffers = {name: t._kp for name, t in tensors.items()}
        buffers.update(op._scratch)
        for index, d in enumerate(op.plan.dispatches):
            bound = [buffers[name] for name, _ in d.bindings]
            reads = {id(buffers[n]) for n in d.reads}
            writes = {id(buffers[n]) for n in d.writes}
            hazards = ((reads | writes) & self._written) | (writes & self._read)
            if hazards:
                self._barrier([b for b in bound if id(b) in hazards])
            algo = op._algorithm(index, bound)
            self._ops.append(kp.OpAlgoDispatch(algo, np.array(d.push_constants or (0,),
                                                              dtype=np.uint32)))
            self._labels.append(f"{op.operator}:{d.kernel}")
            self._read |= reads
            self._written |= writes
        for name, (_, access) in op._fields.items():
            if access != "read":
                tensors[name]._device_newer = True

    def _barrier(self, bound):
        unique = list({id(b): b for b in bound}.values())
        if _HAS_MEMORY_BARRIER:
            self._ops.append(kp.OpMemoryBarrier(
                unique, _ACCESS_SHADER_WRITE, _ACCESS_SHADER_READ | _ACCESS_SHADER_WRITE,
                _STAGE_COMPUTE_SHADER, _STAGE_COMPUTE_SHADER))
        else:
            # Stock kp 0.9.0: a shader-write -> transfer barrier (OpTensorSyncLocal) chains with
            # the next dispatch's transfer -> shader barrier. Valid, but copies the buffer.
            self._ops.append(kp.OpTensorSyncLocal(unique))
        self._labels.append("barrier")
        # A pipeline barrier orders all earlier dispatches (execution), and makes the listed
        # buffers' writes visible (memory); other written buffers still need their own.
        for b in unique:
            self._written.discard(id(b))
        self._read.clear()

    def _download(self, tensors: Sequence[DeviceTensor]) -> None:
        """Copy `tensors` back to their staging twins at the end of the submission."""
        self._downloads.extend(tensors)

    def _build(self, uploads):
        n_stamps = len(self._ops) + 2 if self._timestamps else 0
        seq = self.device._sequence(n_stamps)
        if uploads:
            seq.record(kp.OpTensorSyncDevice([t._kp for t in uploads]))
            if _HAS_MEMORY_BARRIER:
                # kp's own barrier before each dispatch makes copies visible to shader reads
                # only; a dispatch that overwrites an uploaded tensor also needs its writes
                # ordered after the copy's (write-after-write).
                seq.record(kp.OpMemoryBarrier(
                    [t._kp for t in uploads], _ACCESS_TRANSFER_WRITE,
                    _ACCESS_SHADER_READ | _ACCESS_SHADER_WRITE, _STAGE_TRANSFER,
                    _STAGE_COMPUTE_SHADER))
        for op in self._ops:
            seq.record(op)
        if self._downloads:
            seq.record(kp.OpTensorSyncLocal([t._kp for t in self._downloads]))
        return seq

    def submit(self) -> None:
        """Submit the recording (first run); later runs use replay()."""
        with self.device._lock:
            if self._sequences:
                raise RuntimeError("this recording was already submitted; use replay()")
            self._run()

    def replay(self) -> None:
        """Run the recorded submission again. Inputs are whatever the buffers now hold; a
        tensor refreshed with `DeviceTensor.write` is uploaded as part of the run."""
        with self.device._lock:
            if not self._sequences:
                raise RuntimeError("nothing submitted yet: end the `with` block first")
            self._run()

    def _run(self):
        # Command buffers are cached per set of tensors that need uploading, so a replay with
        # fresh inputs (the one-call functions) records nothing.
        pending = tuple(t for t in self._uploads if t._pending_upload)
        key = tuple(id(t) for t in pending)
        seq = self._sequences.get(key)
        if seq is None:
            seq = self._sequences[key] = self._build(pending)
        for t in pending:
            t._pending_upload = False
        self._last = seq
        self.device._eval(seq, self._labels)
        self._after_run()

    def _after_run(self):
        self._count += 1
        for t in self._downloads:
            t._device_newer = False

    def kernel_times_ns(self) -> List[float]:
        """Per-op durations of the last run from Vulkan timestamps (needs timestamps=True)."""
        seq = self._last
        if seq is None:
            raise RuntimeError("nothing submitted yet")
        stamps = np.array(seq.get_timestamps(), dtype=np.float64) * self.device.info.timestamp_period
        return list(np.diff(stamps))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.submit()


# ---- the device ---------------------------------------------------------------------------------

class Device:
    """One Vulkan physical device; its kp Manager is created on first use."""

    def __init__(self, info):
        self.info = info
        self.index = info.index
        self.name = info.name
        self._lock = threading.RLock()
        self._mgr = None
        self._compiled: "collections.OrderedDict" = collections.OrderedDict()

    # -- kp plumbing --
    @property
    def float_atomic_add(self) -> bool:
        """Whether kernels may use native float32 atomicAdd on storage buffers: the device
        supports it and our kp patch enables it at device creation (stock kp enables no
        feature). PYVKGRAD_FLOAT_ATOMICS=0 turns it off (kernels then add through
        compare-and-swap, as on every other device)."""
        return (self._float_atomics_enabled
                and os.environ.get("PYVKGRAD_FLOAT_ATOMICS", "1").strip() != "0")

    @property
    def _float_atomics_enabled(self) -> bool:
        # The device has the feature and our kp patch enables it when the extension is asked
        # for. It is asked for whenever it can be, so that PYVKGRAD_FLOAT_ATOMICS may change
        # between calls without a new Vulkan device.
        return self.info.shader_buffer_float32_atomic_add and _CAN_ENABLE_FLOAT_ATOMICS

    def _manager(self):
        if self._mgr is None:
            extensions = [_ATOMIC_FLOAT_EXTENSION] if self._float_atomics_enabled else []
            try:
                self._mgr = kp.Manager(self.index, [], extensions)
            except Exception as e:
                raise DeviceError(f"creating a Vulkan device on {self.name} failed: {e}") from e
        return self._mgr

    @property
    def max_buffer_bytes(self) -> int:
        """The largest buffer a kernel may bind: the device's maxStorageBufferRange, or less
        with PYVKGRAD_MAX_BUFFER_BYTES (tests use it to exercise splitting on small arrays)."""
        limit = self.info.max_storage_buffer_range
        forced = _env_int("PYVKGRAD_MAX_BUFFER_BYTES", "bytes", minimum=1024)
        return limit if forced is None else min(limit, forced)

    def _sequence(self, timestamps: int = 0):
        seq = self._manager().sequence(0, timestamps)
        if _HAS_WAIT_SPIN:
            seq.set_wait_spin(self.wait_spin_us * 1000)
        return seq

    @property
    def wait_spin_us(self) -> int:
        """Microseconds a wait for a submission polls before it blocks (see module notes)."""
        spin = _env_int("PYVKGRAD_WAIT_SPIN_US", "microseconds", minimum=0)
        if spin is None:
            spin = 0 if self.info.device_type == "cpu" else DEFAULT_WAIT_SPIN_US
        return spin

    @property
    def limits(self) -> Limits:
        i = self.info
        return Limits(subgroup_size=i.subgroup_size,
                      max_workgroups=min(i.max_compute_work_group_count[0], 65535),
                      max_storage_buffer_range=self.max_buffer_bytes,
                      # PYVKGRAD_LOCAL_SIZE forces a narrower workgroup (tests use it to
                      # show reductions do not depend on the workgroup or subgroup width).
                      local_size=min(_env_int("PYVKGRAD_LOCAL_SIZE", "invocations",
                                              minimum=1, power_of_two=True) or 256,
                                     i.max_compute_work_group_size[0],
                                     i.max_compute_work_group_invocations),
                      max_shared_memory=i.max_compute_shared_memory_size,
                      float_atomic_add=self.float_atomic_add)

    def _create_buffer(self, nbytes: int, staging: bool, what: str, words=None):
        if nbytes > self.max_buffer_bytes:
            raise ValueError(f"{what}: {nbytes} bytes exceed this device's maximum storage "
                             f"buffer range ({self.max_buffer_bytes} bytes on "
                             f"{self.name})")
        if words is None:
            words = np.zeros(buffer_words(nbytes), dtype=np.uint32)
        kind = kp.TensorTypes.device if staging else kp.TensorTypes.storage
        with self._lock:
            try:
                return self._manager().tensor_t(words, kind)
            except Exception as e:
                raise DeviceError(f"{what}: allocating {nbytes} bytes on {self.name} failed: "
                                  f"{e}") from e

    def _eval(self, seq, labels):
        try:
            seq.eval()
        except Exception as e:
            raise DeviceError(f"submission of {', '.join(dict.fromkeys(labels)) or 'copies'} "
                              f"failed on {self.name}: {e}") from e

    def _submit_ops(self, ops, what):
        with self._lock:
            seq = self._sequence()
            for op in ops:
                seq.record(op)
            self._eval(seq, [what])
            seq.destroy()

    # -- public API --
    def upload(self, array: np.ndarray) -> DeviceTensor:
        """A device tensor holding `array` (float32 or float16, any strides; the array is
        copied, never modified). The copy to the device runs with the next submission."""
        desc, words = describe_array(array, "Device.upload", "array")
        return self._tensor(desc, words, pending_upload=True)

    def empty(self, desc: TensorDesc) -> DeviceTensor:
        """An uninitialised device tensor laid out by `desc`."""
        if not isinstance(desc, TensorDesc):
            raise TypeError(f"Device.empty: desc must be a TensorDesc, got {type(desc).__name__}")
        return self._tensor(desc, None, pending_upload=False)

    def _tensor(self, desc, words, pending_upload):
        nbytes = buffer_words(desc.total_tensor_size_in_bytes) * 4
        buf = self._create_buffer(nbytes, staging=True, what=f"tensor {desc.sizes}", words=words)
        return DeviceTensor(self, desc, buf, nbytes, pending_upload)

    def compile(self, desc) -> CompiledOperator:
        """Compile an operator descriptor: validate, plan and load its kernels once."""
        plan_fn = getattr(desc, "plan", None)
        if plan_fn is None:
            raise TypeError(f"Device.compile needs an operator descriptor, got {type(desc).__name__}")
        plan = desc.plan(self.limits)
        for t, _ in dict(desc.tensor_fields()).values():
            if buffer_words(t.total_tensor_size_in_bytes) * 4 > self.max_buffer_bytes:
                raise ValueError(f"{desc.OPERATOR}: a tensor of {t.total_tensor_size_in_bytes} "
                                 f"bytes exceeds the maximum storage buffer range of "
                                 f"{self.name} ({self.max_buffer_bytes} bytes; the one-call "
                                 f"functions split such problems where they can)")
        with self._lock:
            return CompiledOperator(self, desc, plan)

    def record(self, timestamps: bool = False) -> Recording:
        """`with device.record() as rec: rec.execute(op, **tensors)` submits once at the end."""
        return Recording(self, timestamps)

    def run(self, desc, arrays: Dict[str, np.ndarray], outputs: Sequence[str]):
        """One-call execution: compile (cached per descriptor), upload, run, read back, in one
        submission. `arrays` maps input fields to their elements (`array_desc`). The
        descriptor's cached buffers are reused when shapes repeat."""
        with self._lock:
            key = (desc, self.limits)
            entry = self._compiled.get(key)
            if entry is None:
                op = self.compile(desc)
                fields = dict(desc.tensor_fields())
                tensors = {name: self.empty(fields[name][0]) for name in fields}
                for name, elements in arrays.items():
                    tensors[name]._write(elements)
                rec = Recording(self)
                rec.execute(op, **tensors)
                rec._download([tensors[n] for n in outputs])
                self._compiled[key] = (op, tensors, rec)
                if len(self._compiled) > 16:
                    _, (old_op, old_tensors, _) = self._compiled.popitem(last=False)
                    _close_later(old_op, old_tensors)
                rec.submit()
            else:
                self._compiled.move_to_end(key)
                op, tensors, rec = entry
                for name, elements in arrays.items():
                    tensors[name]._write(elements)
                rec.replay()
            return [tensors[n].numpy() for n in outputs]

    def memory_in_use(self) -> Optional[int]:
        """Bytes this process holds in the device's device-local heaps (VK_EXT_memory_budget),
        or None where the driver lacks the extension."""
        return _vulkan_info.device_memory_in_use(self.index)

    def close(self) -> None:
        """Release every Vulkan object of this device (it reopens on next use)."""
        with self._lock:
            for op, tensors, _ in self._compiled.values():
                _close_later(op, tensors)
            self._compiled.clear()
            if self._mgr is not None:
                self._mgr.destroy()
                self._mgr = None

    def __repr__(self):
        return f"Device({self.index}, {self.name!r})"


def _close_later(op, tensors):
    op.close()
    for t in tensors.values():
        t.close()
