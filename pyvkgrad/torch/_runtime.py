"""The bridge's device side: which Vulkan device, and programs (compiled operators recorded into
one submission over named tensors) that run a backward.

A `Program` is a list of compiled operators over named tensors: inputs (filled from host arrays,
or bound to device tensors that already hold them), intermediates (device only) and outputs
(read back). It is built once per structure (descriptors and bindings) and cached; each run
records all its operators into one submission.

Three ways to run one (`set_options(execution=...)`, or PYVKGRAD_TORCH_EXECUTION):

* "reuse" (the default): the program keeps its device tensors and one recording; a run writes
  the inputs (`DeviceTensor.write`), replays, and reads the outputs back inside the same
  submission: one submission per chain, intermediates on the device, nothing rebuilt. It relies
  on issue 10's device-tensor state model (every write seen by the next replay, `numpy()`
  current after it). The device memory of the cached programs' tensors stays held (at most
  PROGRAM_CACHE_BYTES, least recently used programs released first).
* "one-call": each operator through the one-call functions' machinery (device
  tensors and a recording cached per descriptor). One submission per operator; a chain's
  intermediate gradients make a round trip through the host.
* "fresh": every run uploads its inputs into new device tensors (`Device.upload`), records all
  operators into one submission, reads the outputs back and releases the tensors: no device
  memory held between backward calls, and gradients handed between separate bridged calls stay
  on the device (below), but new buffers mean new kp pipeline bindings on every run (about
  5 ms per dispatch on lavapipe).

Hand-off between bridged backward calls ("fresh" only): a program may keep an output on the
device after reading it back (`keep`). The bridge registers the kept device tensor with the
torch tensor it returned to autograd; a later bridged backward that receives that very tensor
object, unmodified (same version counter), binds the device tensor instead of uploading it.

`cache_clear()` releases the programs and the hand-off tensors. A device close ends them too
(ClosedError for their own users): a program whose tensors or operators it closed builds them
again in the device's new session on its next run, and closed hand-off tensors are not bound.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import TYPE_CHECKING, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..device import context_of
from ..device_tensor import make_tensor
from ..ops._one_call import run_described
from ..tensor import TensorDesc

if TYPE_CHECKING:
    from ..device import Device, DeviceLike
    from ..one_call_cache import CacheInfo

_lock = threading.Lock()
_device: Optional[Device] = None
EXECUTIONS = ("one-call", "fresh", "reuse")
DEFAULT_EXECUTION = "reuse"
_options = {"execution": None, "hand_off": True}


# ---- device choice -------------------------------------------------------------------------------

def set_device(which: DeviceLike) -> None:
    """The Vulkan device the bridge's backward runs on: an index, part of a name, a
    pyvkgrad Device, or None for pyvkgrad's default (PYVKGRAD_DEVICE, else the first GPU,
    else lavapipe). Data-parallel training gives each rank its own index."""
    global _device
    from ..device import get_device as _get
    with _lock:
        _device = None if which is None else _get(which)


def get_device() -> Device:
    """The Vulkan device the bridge uses now."""
    from ..device import default_device
    return _device if _device is not None else default_device()


def set_options(*, execution: Optional[str] = None, hand_off: Optional[bool] = None) -> None:
    """execution: how backward programs run, "one-call", "fresh" or "reuse" (module notes;
    default PYVKGRAD_TORCH_EXECUTION, else DEFAULT_EXECUTION). hand_off: in "fresh" execution,
    keep a bridged backward's input gradient on the device for the next bridged backward that
    consumes it (default on)."""
    if execution is not None and execution not in EXECUTIONS:
        raise ValueError(f"pyvkgrad.torch.set_options: execution must be one of {EXECUTIONS}, "
                         f"got {execution!r}")
    with _lock:
        if execution is not None:
            _options["execution"] = execution
        if hand_off is not None:
            _options["hand_off"] = bool(hand_off)


def execution() -> str:
    value = _options["execution"]
    if value is None:
        value = os.environ.get("PYVKGRAD_TORCH_EXECUTION", "").strip() or DEFAULT_EXECUTION
        if value not in EXECUTIONS:
            raise ValueError(f"PYVKGRAD_TORCH_EXECUTION must be one of {EXECUTIONS}, got "
                             f"{value!r}")
    return value


def hand_off_enabled() -> bool:
    return _options["hand_off"] and execution() == "fresh"


# ---- programs ------------------------------------------------------------------------------------

class _Compiled:
    """A descriptor and, on first use outside "one-call" execution, its compiled operator
    ("one-call" execution compiles through the one-call cache instead)."""

    def __init__(self, device, desc):
        self.device, self.desc, self._op = device, desc, None

    @property
    def op(self):
        # A device close closes the operator with its session: compile it again in the new one.
        if self._op is None or self._op.closed:
            self._op = self.device.compile(self.desc)
        return self._op

    def close(self):
        if self._op is not None:
            self._op.close()
            self._op = None


class Program:
    """Compiled operators over named tensors, recorded into one submission per run.

    inputs: name -> TensorDesc (packed) of the tensors a run fills from host arrays;
    ops: (operator descriptor, {descriptor tensor field: tensor name}) in order;
    outputs: names read back after a run. A name bound to several fields with different
    descriptors (a packed tensor seen with merged dimensions) gets the first one's buffer;
    every later use must have the same data type and element count.
    """

    def __init__(self, device, inputs: Mapping[str, TensorDesc],
                 ops: Sequence[Tuple[object, Mapping[str, str]]], outputs: Sequence[str]):
        self.device = device
        self.inputs = dict(inputs)
        self.descs: Dict[str, TensorDesc] = dict(inputs)
        self.outputs = tuple(outputs)
        self.ops = []
        for desc, binding in ops:
            fields = dict(desc.tensor_fields())
            for field, name in binding.items():
                tdesc, _ = fields[field]
                known = self.descs.setdefault(name, tdesc)
                if (known.data_type != tdesc.data_type
                        or known.element_count != tdesc.element_count
                        or not (known.is_packed and tdesc.is_packed)):
                    raise AssertionError(f"program tensor {name}: {known} vs {tdesc}")
            self.ops.append((_Compiled(device, desc), dict(binding)))
        self._run_lock = threading.Lock()
        self._tensors = None  # reuse mode: name -> DeviceTensor
        self._recording = None
        self.runs = 0

    def run(self, arrays: Mapping[str, np.ndarray], bound: Optional[Mapping] = None,
            keep: Iterable[str] = ()) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        """Fill the inputs from `arrays` (packed, the inputs' dtype and sizes) or `bound`
        (device tensors already holding them; "fresh" execution only), run, read the outputs
        back.

        Returns (outputs as numpy arrays, kept device tensors): `keep` names outputs whose
        device tensors the caller takes over ("fresh" execution only; it closes them)."""
        mode = execution()
        if bound and mode != "fresh":
            raise AssertionError("device tensors are bound only in fresh execution")
        with self._run_lock:
            if mode == "reuse":
                return self._run_reusing(arrays), {}
            if mode == "one-call":
                return self._run_one_call(arrays), {}
            return self._run_fresh(arrays, bound or {}, set(keep))

    def _run_one_call(self, arrays):
        values = {name: self._checked(name, arrays[name]) for name in self.inputs}
        for op, binding in self.ops:
            fields = op.desc.tensor_fields()
            inputs = {f: values[binding[f]].reshape(-1) for f, (_, access) in fields
                      if access == "read"}
            outputs = [f for f, (_, access) in fields if access != "read"]
            shapes = [d.sizes for f, (d, access) in fields if access != "read"]
            for f, result in zip(outputs, run_described(self.device, op.desc, inputs, outputs,
                                                         shapes)):
                values[binding[f]] = result
            stats["uploads"] += len(inputs)
        self.runs += 1
        return {n: values[n].reshape(self.descs[n].sizes) for n in self.outputs}

    def _run_fresh(self, arrays, bound, keep):
        dev = self.device
        tensors, owned = {}, []
        try:
            for name, desc in self.descs.items():
                if name in bound:
                    tensors[name] = bound[name]
                elif name in self.inputs:
                    tensors[name] = dev.upload(self._checked(name, arrays[name]))
                    owned.append(name)
                    stats["uploads"] += 1
                else:
                    tensors[name] = dev.empty(desc)
                    owned.append(name)
            with dev.record() as rec:
                for op, binding in self.ops:
                    rec.execute(op.op, **{f: tensors[n] for f, n in binding.items()})
                _read_back_in_submission(rec, [tensors[n] for n in self.outputs])
            results = {n: tensors[n].numpy().reshape(self.descs[n].sizes) for n in self.outputs}
            kept = {n: tensors[n] for n in keep if n in owned}
            self.runs += 1
            return results, kept
        finally:
            for name in owned:
                if name not in keep:
                    tensors[name].close()

    def _run_reusing(self, arrays):
        if self._tensors is not None and any(t.closed for t in self._tensors.values()):
            self._release()  # made in a session a device close has ended: build anew
        if self._tensors is None:
            # _tensors last: set, it says the program is complete.
            tensors, self._recording = self._first_run(arrays)
            self._tensors = tensors
            uploaded = 0
        else:
            for name in self.inputs:
                self._tensors[name].write(self._checked(name, arrays[name]))
            uploaded = self._recording.stats.uploads
            self._recording.replay()
        # What the device copied, and the inputs written straight into device memory.
        stats["uploads"] += self._recording.stats.uploads - uploaded + sum(
            self._tensors[n].storage.buffer.kind == "mapped" for n in self.inputs)
        self.runs += 1
        return {n: self._tensors[n].numpy().reshape(self.descs[n].sizes) for n in self.outputs}

    def _first_run(self, arrays):
        """Make the program's tensors and recording, and submit it; returns (tensors,
        recording). Nothing is kept unless the whole first run succeeds: an exception (a
        Ctrl-C) releases what was made, so the next run starts again from nothing."""
        dev = self.device
        tensors, rec = {}, None
        # Inputs in mapped device memory where the device has it (Runtime.input_kind), as the
        # one-call path's. Intermediates (neither inputs nor outputs: one operator writes them
        # whole, the next reads them) in device memory alone, with no staging buffer.
        input_kind = dev.runtime().input_kind
        try:
            for name, desc in self.descs.items():
                kind = input_kind if name in self.inputs else (
                    "staged" if name in self.outputs else "device")
                tensors[name] = make_tensor(context_of(dev), desc, kind)
            for name in self.inputs:
                tensors[name].write(self._checked(name, arrays[name]))
            rec = dev.record()
            for op, binding in self.ops:
                rec.execute(op.op, **{f: tensors[n] for f, n in binding.items()})
            _read_back_in_submission(rec, [tensors[n] for n in self.outputs])
            rec.submit()
        except BaseException:
            _close_all(rec, tensors.values())
            raise
        return tensors, rec

    def _checked(self, name, array):
        desc = self.inputs[name]
        array = np.ascontiguousarray(array)
        if array.dtype != desc.data_type.numpy_dtype or array.size != desc.element_count:
            raise AssertionError(f"program input {name}: {array.dtype} {array.shape} for {desc}")
        return array.reshape(desc.sizes)

    @property
    def nbytes(self) -> int:
        """Bytes the program's own tensors hold between runs ("reuse" execution): a staged
        tensor holds a device buffer and a staging buffer of its size, a mapped input or a
        device-only intermediate one buffer (counted as staged where its tensors are not made
        yet)."""
        tensors = self._tensors
        return sum(d.total_tensor_size_in_bytes * (
            1 if tensors is not None and tensors[n].storage.buffer.kind != "staged" else 2)
            for n, d in self.descs.items())

    def _release(self):
        """Give back the "reuse" tensors and recording (the caller holds the run lock)."""
        if self._tensors is not None:
            tensors, rec = self._tensors, self._recording
            self._tensors = self._recording = None
            _close_all(rec, tensors.values())

    def close(self):
        with self._run_lock:
            self._release()
            for op, _ in self.ops:
                op.close()


def _close_all(recording, tensors) -> None:
    if recording is not None:
        recording.close()
    for t in tensors:
        t.close()


def _read_back_in_submission(rec, tensors) -> None:
    """Copy the outputs back to their staging memory at the end of every run of `rec`, as the
    one-call path does, so that `numpy()` after a run needs no submission of its own (one per
    output otherwise: 3 ms of a 15 ms chain on lavapipe)."""
    rec.read_back(tensors)


_programs: "collections.OrderedDict" = collections.OrderedDict()
# (256: a step runs one program per distinct bridged chain, and an LRU cycled by more of them
# than it keeps misses every time: 65 avg_pool2d shapes took 1.2-1.6 s a step with 64 kept,
# against 9 ms with 64 shapes. The bytes stay bounded by PROGRAM_CACHE_BYTES.)
_PROGRAMS_KEPT = 256
PROGRAM_CACHE_BYTES = 1 << 30  # tensors "reuse" programs keep on the device, all together
_counts = {"hits": 0, "misses": 0}


def program(device, inputs, ops, outputs) -> Program:
    """The cached Program of this structure on `device` (built on first use)."""
    key = (device.index, tuple(inputs.items()),
           tuple((desc, tuple(sorted(b.items()))) for desc, b in ops), tuple(outputs))
    with _lock:
        prog = _programs.get(key)
        if prog is not None:
            _counts["hits"] += 1
            _programs.move_to_end(key)
            return prog
        _counts["misses"] += 1
    prog = Program(device, inputs, ops, outputs)
    with _lock:
        _programs[key] = prog
        total = sum(p.nbytes for p in _programs.values())
        while len(_programs) > 1 and (len(_programs) > _PROGRAMS_KEPT
                                      or total > PROGRAM_CACHE_BYTES):
            _, old = _programs.popitem(last=False)
            total -= old.nbytes
            old.close()
    return prog


def cache_info() -> CacheInfo:
    """The program cache, as `Device.cache_info()` and functools' cache_info: hits and misses
    so far, programs and the device bytes their tensors take ("reuse" execution holds them
    between backward calls), and the limits."""
    from ..device import CacheInfo
    with _lock:
        return CacheInfo(_counts["hits"], _counts["misses"], len(_programs),
                         sum(p.nbytes for p in _programs.values()), _PROGRAMS_KEPT,
                         PROGRAM_CACHE_BYTES)


def cache_clear() -> None:
    """Release what the bridge caches on devices, and its statistics (as functools'
    cache_clear): every program (compiled operators, device tensors, recording) and the
    device tensors kept for hand-off. Later backward calls build what they need again."""
    with _lock:
        old = list(_programs.values())
        _programs.clear()
        _counts.update(hits=0, misses=0)
    with _hand_off_lock:
        kept = [entry.tensor for entry in _hand_offs.values()]
        _hand_offs.clear()
    for prog in old:
        prog.close()
    for t in kept:
        t.close()


clear_programs = cache_clear  # its name before cache_clear


# ---- hand-off of gradients between bridged backward calls ----------------------------------------

class _Entry:
    __slots__ = ("ref", "version", "tensor", "layout")

    def __init__(self, ref, version, tensor, layout):
        self.ref, self.version, self.tensor, self.layout = ref, version, tensor, layout


_hand_offs: Dict[int, _Entry] = {}
_hand_off_lock = threading.Lock()
stats = collections.Counter()  # "hand_off_hits", "hand_off_misses", "uploads" (tests, benchmarks)


def register(torch_tensor, device_tensor, layout) -> None:
    """Remember that `device_tensor` holds `torch_tensor`'s contents, packed in the order
    `layout` describes (a hashable: permutation, sizes, dtype), for as long as the torch tensor
    lives unmodified; the device tensor is closed with it."""
    key = id(torch_tensor)

    def forget(_ref, key=key, device_tensor=device_tensor):
        with _hand_off_lock:
            entry = _hand_offs.get(key)
            if entry is not None and entry.tensor is device_tensor:
                del _hand_offs[key]
        device_tensor.close()

    entry = _Entry(weakref.ref(torch_tensor, forget), torch_tensor._version, device_tensor,
                   layout)
    with _hand_off_lock:
        old = _hand_offs.pop(key, None)
        _hand_offs[key] = entry
    if old is not None:
        old.tensor.close()


def lookup(torch_tensor, layout, device):
    """The device tensor registered for this very tensor object, when it is unmodified, on
    `device`, laid out as `layout` and still open (a device close closes it); else None."""
    with _hand_off_lock:
        entry = _hand_offs.get(id(torch_tensor))
        if (entry is None or entry.ref() is not torch_tensor
                or entry.version != torch_tensor._version or entry.layout != layout
                or entry.tensor.device is not device or entry.tensor.closed):
            stats["hand_off_misses"] += 1
            return None
        stats["hand_off_hits"] += 1
        return entry.tensor
