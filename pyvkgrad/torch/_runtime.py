"""The bridge's device side: which Vulkan device, and programs (compiled operators recorded into
one submission over named tensors) that run a backward.

A `Program` is a list of compiled operators over named tensors: inputs (filled from host arrays,
or bound to device tensors that already hold them), intermediates (device only) and outputs
(read back). It is built once per structure (descriptors and bindings) and cached; each run
records all its operators into one submission.

Two ways to run one (`reuse_device_tensors`):

* fresh (the default today): every run uploads its inputs into new device tensors
  (`Device.upload`), records once, reads the outputs with `numpy()` and releases the tensors.
  Compiled operators (plans, kernels, tables) are reused; a run pays for new kp bindings.
* reuse: the program keeps its device tensors and one recording; a run writes the inputs
  (`DeviceTensor.write`), replays and reads back. This relies on the device-tensor state model
  of issue 10 (every write seen by the next replay, `numpy()` always current) and is off until
  that lands: PYVKGRAD_TORCH_REUSE=1 or `set_options(reuse_device_tensors=True)` turns it on.

Hand-off between bridged backward calls (fresh mode): a program may keep an output on the
device after reading it back (`keep`). The bridge registers the kept device tensor with the
torch tensor it returned to autograd; a later bridged backward that receives that very tensor
object, unmodified (same version counter), binds the device tensor instead of uploading it.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..tensor import TensorDesc

_lock = threading.Lock()
_device = None
_options = {"reuse_device_tensors": None, "hand_off": True}


# ---- device choice --------------------------------------------------------------------------------

def set_device(which) -> None:
    """The Vulkan device the bridge's backward runs on: an index, part of a name, a
    pyvkgrad Device, or None for pyvkgrad's default (PYVKGRAD_DEVICE, else the first GPU,
    else lavapipe). Data-parallel training gives each rank its own index."""
    global _device
    from ..device import get_device as _get
    with _lock:
        _device = None if which is None else _get(which)


def get_device():
    """The Vulkan device the bridge uses now."""
    from ..device import default_device
    return _device if _device is not None else default_device()


def set_options(*, reuse_device_tensors: Optional[bool] = None,
                hand_off: Optional[bool] = None) -> None:
    """reuse_device_tensors: keep each program's device tensors and recording between runs
    (needs issue 10's device-tensor fixes; default from PYVKGRAD_TORCH_REUSE, off).
    hand_off: keep a bridged backward's input gradient on the device for the next bridged
    backward that consumes it (default on)."""
    with _lock:
        if reuse_device_tensors is not None:
            _options["reuse_device_tensors"] = bool(reuse_device_tensors)
        if hand_off is not None:
            _options["hand_off"] = bool(hand_off)


def reuse_device_tensors() -> bool:
    value = _options["reuse_device_tensors"]
    if value is None:
        return os.environ.get("PYVKGRAD_TORCH_REUSE", "0").strip() == "1"
    return value


def hand_off_enabled() -> bool:
    return _options["hand_off"] and not reuse_device_tensors()


# ---- programs ------------------------------------------------------------------------------------

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
            self.ops.append((device.compile(desc), dict(binding)))
        self._run_lock = threading.Lock()
        self._tensors = None  # reuse mode: name -> DeviceTensor
        self._recording = None
        self.runs = 0

    def run(self, arrays: Mapping[str, np.ndarray], bound: Optional[Mapping] = None,
            keep: Iterable[str] = ()) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        """Fill the inputs from `arrays` (packed, the inputs' dtype and sizes) or `bound`
        (device tensors already holding them), run, read the outputs back.

        Returns (outputs as numpy arrays, kept device tensors): `keep` names outputs whose
        device tensors the caller takes over (fresh mode only; it closes them)."""
        with self._run_lock:
            if reuse_device_tensors():
                return self._run_reusing(arrays), {}
            return self._run_fresh(arrays, bound or {}, set(keep))

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
                    rec.execute(op, **{f: tensors[n] for f, n in binding.items()})
            results = {n: tensors[n].numpy().reshape(self.descs[n].sizes) for n in self.outputs}
            kept = {n: tensors[n] for n in keep if n in owned}
            self.runs += 1
            return results, kept
        finally:
            for name in owned:
                if name not in keep:
                    tensors[name].close()

    def _run_reusing(self, arrays):
        dev = self.device
        if self._tensors is None:
            self._tensors = {name: dev.empty(desc) for name, desc in self.descs.items()}
            for name in self.inputs:
                self._tensors[name].write(self._checked(name, arrays[name]))
            rec = dev.record()
            for op, binding in self.ops:
                rec.execute(op, **{f: self._tensors[n] for f, n in binding.items()})
            rec.submit()
            self._recording = rec
        else:
            for name in self.inputs:
                self._tensors[name].write(self._checked(name, arrays[name]))
            self._recording.replay()
        self.runs += 1
        return {n: self._tensors[n].numpy().reshape(self.descs[n].sizes) for n in self.outputs}

    def _checked(self, name, array):
        desc = self.inputs[name]
        array = np.ascontiguousarray(array)
        if array.dtype != desc.data_type.numpy_dtype or array.size != desc.element_count:
            raise AssertionError(f"program input {name}: {array.dtype} {array.shape} for {desc}")
        return array.reshape(desc.sizes)

    def close(self):
        with self._run_lock:
            if self._tensors is not None:
                for t in self._tensors.values():
                    t.close()
                self._tensors = None
                self._recording = None
            for op, _ in self.ops:
                op.close()


_programs: "collections.OrderedDict" = collections.OrderedDict()
_PROGRAMS_KEPT = 64


def program(device, inputs, ops, outputs) -> Program:
    """The cached Program of this structure on `device` (built on first use)."""
    key = (device.index, tuple(inputs.items()),
           tuple((desc, tuple(sorted(b.items()))) for desc, b in ops), tuple(outputs))
    with _lock:
        prog = _programs.get(key)
        if prog is not None:
            _programs.move_to_end(key)
            return prog
    prog = Program(device, inputs, ops, outputs)
    with _lock:
        _programs[key] = prog
        while len(_programs) > _PROGRAMS_KEPT:
            _, old = _programs.popitem(last=False)
            old.close()
    return prog


def clear_programs() -> None:
    """Release every cached program (their compiled operators and device tensors)."""
    with _lock:
        old = list(_programs.values())
        _programs.clear()
    for prog in old:
        prog.close()


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
    `device` and laid out as `layout`; else None."""
    with _hand_off_lock:
        entry = _hand_offs.get(id(torch_tensor))
        if (entry is None or entry.ref() is not torch_tensor
                or entry.version != torch_tensor._version or entry.layout != layout
                or entry.tensor.device is not device):
            stats["hand_off_misses"] += 1
            return None
        stats["hand_off_hits"] += 1
        return entry.tensor
