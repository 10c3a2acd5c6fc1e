"""The one-call cache: one-call problems ready to run again.

A one-call function (`pyvkgrad.activation_relu_grad`, ...) compiles its descriptor, makes its
tensors and records uploads, dispatches and downloads once per problem; the cache keeps up to
ONE_CALL_CACHE_ENTRIES such problems, ONE_CALL_CACHE_BYTES of device and staging memory in all
(a larger problem runs uncached), least recently used first out. A later call with arrays of
the same layouts (`layout_key`) finds its problem without building a descriptor (`again`).
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ._context import DeviceContext
from ._environment import LIMIT_VARIABLES, interrupts_deferred
from .compiled_operator import CompiledOperator, compile_operator
from .device_tensor import DeviceTensor, make_tensor
from .plan import READ
from .recording import Recording
from .plan import OperatorDesc
from .tensor import TensorDesc, elements_of, words_to_array

# (64: the PyTorch bridge's BatchNorm training forwards, LRN and roi_align backwards run
# through this cache, and a model's distinct shapes cycle it every step; 16 missed every time
# past 16 BatchNorm shapes: 96 against 51 ms a step with 24 on lavapipe.)
ONE_CALL_CACHE_ENTRIES = 64
ONE_CALL_CACHE_BYTES = 1 << 30
# Layouts kept for `again`, least recently used first out: arrays of many layouts can give one
# descriptor (views packed into the same one, scalars equal in float32), so without a bound
# the index grew by one entry a call while its problem stayed cached.
ONE_CALL_CACHE_LAYOUTS = 4 * ONE_CALL_CACHE_ENTRIES


class CacheInfo(NamedTuple):
    """The one-call cache's counts and limits (`Device.cache_info`)."""

    hits: int
    misses: int
    entries: int
    nbytes: int
    max_entries: int
    max_bytes: int


def layout_key(operator: str, params: object, *arrays: object) -> Optional[Tuple[Any, ...]]:
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


def _freeze(value: object) -> Optional[Tuple[Any, ...]]:
    # Types are part of the key: True == 1 and 1 == 1.0, but they validate differently.
    if isinstance(value, (tuple, list)):
        items = [_freeze(v) for v in value]
        return None if any(i is None for i in items) else (type(value), tuple(items))
    if isinstance(value, (float, np.floating)):
        # A float by its bytes: -0.0 == 0.0 (their operators differ: a LearningRate or an
        # Epsilon of -0 gives other signs), and NaN (a clip bound that disables its side)
        # never equals itself, so repeated calls would miss and fill the cache.
        return (type(value), _bits(value))
    if value is None or isinstance(value, (bool, int, float, str, enum.Enum, np.generic)):
        return (type(value), value)
    return None


def float_bits(desc: OperatorDesc) -> Tuple[bytes, ...]:
    """The descriptor's float fields (and floats in its tuple fields) by their bytes, beside
    the descriptor in a cache key: == takes -0.0 for 0.0, whose operators differ (a
    LearningRate or an Epsilon of -0 gives other signs), and never a NaN for itself."""
    values = []
    for name in getattr(desc, "__dataclass_fields__", {}):
        value = getattr(desc, name)
        values += list(value) if isinstance(value, tuple) else [value]
    return tuple(_bits(v) for v in values if isinstance(v, (float, np.floating)))


def _bits(value: object) -> bytes:
    return np.asarray(value).tobytes()


class CacheKey:
    """A one-call cache key, (descriptor, limits), that hashes once: a cache hit looks it up
    twice, and hashing a descriptor walks every field of every tensor."""

    __slots__ = ("value", "hash")

    def __init__(self, value: Tuple[Any, ...]) -> None:
        self.value: Tuple[Any, ...] = value
        self.hash: int = hash(value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CacheKey) and self.hash == other.hash and \
            self.value == other.value


class OneCallEntry:
    """A one-call problem ready to run again: its operator, tensors, recording (uploads,
    dispatches, downloads), and what its inputs and outputs look like."""

    __slots__ = ("op", "tensors", "recording", "nbytes", "inputs", "outputs", "shapes",
                 "_writes", "_reads", "_submitted")

    def __init__(self, op: CompiledOperator, tensors: Dict[str, DeviceTensor],
                 recording: Recording, inputs: Tuple[Tuple[str, TensorDesc], ...],
                 outputs: Tuple[str, ...], shapes: Tuple[Tuple[int, ...], ...]) -> None:
        self.op: CompiledOperator = op
        self.tensors: Dict[str, DeviceTensor] = tensors
        self.recording: Recording = recording
        self._submitted = False  # the first run submits the recording, later ones replay it
        # ((field, TensorDesc), ...) in the caller's order
        self.inputs: Tuple[Tuple[str, TensorDesc], ...] = inputs
        self.outputs: Tuple[str, ...] = outputs
        self.shapes: Tuple[Tuple[int, ...], ...] = shapes
        # Staged tensors hold their bytes twice (device and staging), mapped ones once.
        self.nbytes: int = sum(t.nbytes * (1 if t.storage.buffer.kind == "mapped" else 2)
                               for t in tensors.values()) + sum(b.nbytes
                                                                for b in op.scratch.values())
        # The hot path's lookups, done once: storages with their descriptors and shapes.
        self._writes = tuple((tensors[name].storage, desc) for name, desc in inputs)
        self._reads = tuple((tensors[name].storage, shape)
                            for name, shape in zip(outputs, shapes))

    def run(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        """Write `arrays` in, run the recording, read the outputs back (new arrays)."""
        recording = self.recording
        recording.check_open("one-call function")  # its tensors and operator too
        for (storage, desc), array in zip(self._writes, arrays):
            storage.write_elements(elements_of(array, desc))
        if self._submitted:
            recording.replay()
        else:
            recording.submit()
            self._submitted = True
        return [words_to_array(storage.host_words("one-call function"), storage.desc
                               ).reshape(shape) for storage, shape in self._reads]

    def close(self) -> None:
        self.recording.close()
        self.op.close()
        for t in self.tensors.values():
            t.close()


class OneCallCache:
    """One device's one-call problems (see the module's docstring)."""

    def __init__(self, context: DeviceContext) -> None:
        self._context = context
        self._entries: "collections.OrderedDict[CacheKey, OneCallEntry]" = \
            collections.OrderedDict()
        # (layout_key, LIMIT_VARIABLES.values()) -> cache key: the limits follow from the
        # device and those variables, so a hit needs neither descriptor nor limits.
        self._layouts: "collections.OrderedDict[tuple, CacheKey]" = collections.OrderedDict()
        self._hits = self._misses = 0

    def _refuse_reentry(self, operator: str) -> None:
        """Raise RuntimeError where this thread is already inside a call on the device: a
        one-call function called from a garbage collection's callback, a finalizer or a
        signal handler that ran in the middle of another call (the device's lock is
        reentrant). Its cache changes would pull entries from under the outer call (one
        closed the entry the outer call was running). Nothing of pyvkgrad's reaches the cache
        under the lock, so this refuses only such calls."""
        if self._context.lock._is_owned():  # type: ignore[attr-defined]
            raise RuntimeError(
                f"{operator}: a one-call function called in the middle of another pyvkgrad "
                f"call on this thread (from a garbage-collection callback, a finalizer or a "
                f"signal handler?); call it outside, once the other call has returned")

    def run(self, desc: OperatorDesc, arrays: Dict[str, np.ndarray], outputs: Sequence[str],
            shapes: Sequence[Tuple[int, ...]], layout: Optional[Tuple[Any, ...]] = None
            ) -> List[np.ndarray]:
        """Compile (cached per descriptor and limits), upload, run and read back in one
        submission. `arrays` maps input fields to arrays whose layouts `array_desc` turned
        into the descriptor's fields; outputs come back reshaped to `shapes`. With `layout`
        (`layout_key` of the call), `again` finds this problem without its descriptor."""
        self._refuse_reentry(desc.OPERATOR)
        context = self._context
        with context.lock:
            context.collect()
            env = LIMIT_VARIABLES.values()
            key = CacheKey((desc, context.limits, float_bits(desc)))
            entry = self._entries.get(key)
            if entry is None:
                self._misses += 1
                entry = self._entry(desc, arrays, outputs, shapes)
                with interrupts_deferred():
                    results = entry.run(list(arrays.values()))
                    self._keep(key, entry)
            else:
                self._hits += 1
                self._entries.move_to_end(key)
                results = entry.run(list(arrays.values()))
            if key not in self._entries:
                entry.close()  # too large to keep
            elif layout is not None:
                self._layouts[(layout, env)] = key
                self._layouts.move_to_end((layout, env))
                while len(self._layouts) > ONE_CALL_CACHE_LAYOUTS:
                    self._layouts.popitem(last=False)
            return results

    def _entry(self, desc: OperatorDesc, arrays: Dict[str, np.ndarray], outputs: Sequence[str],
               shapes: Sequence[Tuple[int, ...]]) -> OneCallEntry:
        context = self._context
        op = compile_operator(context, desc)
        fields = op.fields
        # Inputs straight into mapped device memory where the device has it (Runtime.input_kind);
        # outputs come back through staging.
        input_kind = context.session().runtime.input_kind
        tensors = {name: make_tensor(context, fields[name][0],
                                     input_kind if name in arrays and fields[name][1] == READ
                                     else "staged")
                   for name in fields}
        rec = Recording(context)
        rec.execute(op, **tensors)
        rec.read_back([tensors[n] for n in outputs])
        return OneCallEntry(op, tensors, rec, tuple((n, fields[n][0]) for n in arrays),
                            tuple(outputs), tuple(shapes))

    def again(self, layout: Optional[Tuple[Any, ...]], arrays: Sequence[np.ndarray]
              ) -> Optional[List[np.ndarray]]:
        """The outputs of a problem cached by `run` for arrays of the same layouts
        (`layout_key`), or None: then the caller takes the full path."""
        if layout is None:
            return None
        self._refuse_reentry(layout[0])  # (the operator: layout_key's first item)
        with self._context.lock:
            self._context.collect()
            found = (layout, LIMIT_VARIABLES.values())
            key = self._layouts.get(found)
            entry = None if key is None else self._entries.get(key)
            if entry is None:
                return None
            self._layouts.move_to_end(found)
            self._hits += 1
            self._entries.move_to_end(key)
            return entry.run(arrays)

    def _keep(self, key: CacheKey, entry: OneCallEntry) -> None:
        if entry.nbytes > ONE_CALL_CACHE_BYTES:
            return
        self._entries[key] = entry
        total = sum(e.nbytes for e in self._entries.values())
        while len(self._entries) > ONE_CALL_CACHE_ENTRIES or total > ONE_CALL_CACHE_BYTES:
            _, old = self._entries.popitem(last=False)
            total -= old.nbytes
            old.close()
        live = set(self._entries)
        self._layouts = collections.OrderedDict(
            (k, v) for k, v in self._layouts.items() if v in live)

    def entries(self) -> List[OneCallEntry]:
        """The cached problems, least recently used first."""
        return list(self._entries.values())

    def info(self) -> CacheInfo:
        """Hits, misses, entries and bytes held, and the limits (`Device.cache_info`)."""
        with self._context.lock:
            return CacheInfo(self._hits, self._misses, len(self._entries),
                             sum(e.nbytes for e in self._entries.values()),
                             ONE_CALL_CACHE_ENTRIES, ONE_CALL_CACHE_BYTES)

    def clear(self, counts: bool = True) -> None:
        """Close every cached problem (its operator, tensors and recording), so their memory
        goes back now; with `counts`, restart the hits and misses at 0."""
        with self._context.lock, interrupts_deferred():
            entries = list(self._entries.values())
            self._entries.clear()
            self._layouts.clear()
            if counts:
                self._hits = self._misses = 0
            for entry in entries:
                entry.close()
