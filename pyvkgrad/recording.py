"""Recordings: compiled operators recorded into one submission, with the barriers they need.

A recording keeps the storages of the tensors it binds (not the tensors) and its operators;
every run first uploads the bound tensors whose staging copy is newer (`Submission`, _state.py),
so a replay sees the current inputs and a replay with unchanged inputs copies nothing.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import kernels
from ._context import DeviceContext
from ._environment import interrupts_deferred
from ._state import Hazards, Lifetime, Submission
from .device_tensor import DeviceTensor, TensorStorage
from .plan import Dispatch, OperatorDesc
from .runtime import Buffer, Commands, Program

if TYPE_CHECKING:
    from .compiled_operator import CompiledOperator
    from .device import Device


def _push_words(d: Dispatch) -> np.ndarray:
    """A dispatch's push-constant words as recorded (one word where it takes none)."""
    return np.array(d.push_constants or (0,), dtype=np.uint32)


class RecordingStats(NamedTuple):
    """`Recording.stats`: runs so far, tensors uploaded over them, command buffers recorded."""

    runs: int
    uploads: int
    command_buffers: int


class Recording:
    """Compiled operators recorded into one submission, with the barriers they need.

    Submitted when the `with` block ends; `replay()` runs the same commands again. Each run
    first uploads the bound tensors whose staging copy is newer (a `write` since), so a
    replay always sees the current inputs; a replay with unchanged inputs copies nothing.
    """

    _COMMAND_BUFFERS = 8  # command buffers kept per recording, one per set of uploads

    def __init__(self, context: DeviceContext, timestamps: bool = False) -> None:
        self.device: Device = context.device
        self._context = context
        session = context.session()
        self._session = session
        self._lifetime = Lifetime("the recording", session.lifetime)
        self._timestamps = timestamps
        # (program, push words, label, (id of its CompiledOperator, index in its plan)) or
        # (None, [buffers], "barrier", None)
        self._steps: List[Tuple[Optional[Program], Any, str, Optional[Tuple[int, int]]]] = []
        self._storages: Dict[int, Tuple[TensorStorage, bool]] = {}  # id -> (storage, written)
        self._ops: Dict[int, CompiledOperator] = {}  # the CompiledOperators recorded
        self._hazards = Hazards()
        self._downloads: List[TensorStorage] = []
        self._commands: "collections.OrderedDict[tuple, Tuple[Commands, int]]" = \
            collections.OrderedDict()
        self._finished = False
        self._last: Optional[Tuple[Commands, int]] = None  # (commands, first step's timestamp)
        self._runs = self._uploaded = self._built = 0
        # Made once the steps are final, reused by every run: (submission, what it runs).
        self._submission: Optional[Tuple[Submission, str]] = None
        session.own(self)

    @property
    def stats(self) -> RecordingStats:
        """runs so far, tensors uploaded over them, command buffers recorded (one per set of
        tensors that needed an upload)."""
        return RecordingStats(self._runs, self._uploaded, self._built)

    @property
    def labels(self) -> List[str]:
        """What each recorded step is: "OPERATOR:kernel" for a dispatch, or "barrier"."""
        return [label for _, _, label, _ in self._steps]

    def execute(self, op: CompiledOperator, **tensors: DeviceTensor) -> None:
        """Record `op` (a CompiledOperator) on `tensors` (named after its descriptor's
        tensor fields)."""
        with self._context.lock:
            self._lifetime.check("Recording.execute")
            if not callable(getattr(op, "program", None)) or not hasattr(op, "plan"):
                raise TypeError(f"execute() needs a CompiledOperator, got {type(op).__name__}")
            if op.device is not self.device:
                raise ValueError(f"{op.operator}: compiled for another Device object "
                                 f"({op.device.name}) than this recording's "
                                 f"({self.device.name}); each Device has its own Vulkan "
                                 f"device, even for one GPU")
            if self._finished:
                raise RuntimeError("this recording was already submitted; record a new one")
            op.bind(tensors, "Recording.execute")
            self._ops[id(op)] = op
            buffers = {name: t.storage.buffer for name, t in tensors.items()}
            buffers.update(op.scratch)
            for name, t in tensors.items():
                storage = t.storage
                written = op.fields[name][1] != "read"
                was = self._storages.get(id(storage), (storage, False))[1]
                self._storages[id(storage)] = (storage, was or written)
            for index, d in enumerate(op.plan.dispatches):
                bound = [buffers[name] for name in kernels.binding_order(d.kernel, d.bindings)]
                hazards = self._hazards.dispatch([id(buffers[n]) for n in d.reads],
                                                 [id(buffers[n]) for n in d.writes])
                if hazards:
                    need = list({id(b): b for b in bound if id(b) in hazards}.values())
                    self._steps.append((None, need, "barrier", None))
                program = op.program(index, bound)
                self._steps.append((program, _push_words(d), f"{op.operator}:{d.kernel}",
                                    (id(op), index)))

    def update_push_constants(self, op: CompiledOperator, desc: OperatorDesc) -> None:
        """Give `op`'s recorded dispatches the push constants of `desc`: a descriptor that
        differs from op's only in scalars its kernels take as push constants
        (`CompiledOperator.scalar_plan`; anything else is refused with a ValueError). Nothing
        is compiled; the next run records its command buffer again. How the bridge's Adam
        follows a learning-rate schedule without a new operator each step."""
        with self._context.lock:
            self._lifetime.check("Recording.update_push_constants")
            op.check_open("Recording.update_push_constants")
            if self._ops.get(id(op)) is not op:
                raise ValueError(f"{op.operator}: not recorded here")
            plan = op.scalar_plan(desc)
            if plan is None:
                raise ValueError(f"{op.operator}: the new descriptor differs from the recorded "
                                 f"one in more than push-constant scalars; compile and record "
                                 f"it")
            for i, (program, _, label, where) in enumerate(self._steps):
                if where is not None and where[0] == id(op):
                    self._steps[i] = (program, _push_words(plan.dispatches[where[1]]), label,
                                      where)
            # (Recorded again into new command buffers at the next run: kp's command pools
            # do not allow a command buffer to be reset, VUID-vkBeginCommandBuffer-00050.)
            for commands, _ in self._commands.values():
                commands.destroy()
            self._commands.clear()
            self._last = None  # (its timestamps were of the old commands)

    def read_back(self, tensors: Sequence[DeviceTensor]) -> None:
        """Copy `tensors` back to their staging memory at the end of every run, in the same
        submission, so that `numpy()` after a run needs no submission of its own. Each is
        bound as the recording's operators' tensors are: a run first uploads one whose
        staging copy is newer (a tensor no operator writes reads back what it holds)."""
        with self._context.lock:
            self._lifetime.check("Recording.read_back")
            if self._finished:
                raise RuntimeError("this recording was already submitted; record a new one")
            tensors = list(tensors)
            for t in tensors:
                if not isinstance(t, DeviceTensor):
                    raise TypeError(f"Recording.read_back: needs DeviceTensors, got "
                                    f"{type(t).__name__}")
                if t.device is not self.device:
                    raise ValueError(f"Recording.read_back: a tensor of another Device "
                                     f"object ({t.device.name}) than the recording's")
                t.storage.lifetime.check("Recording.read_back")
            for t in tensors:
                storage = t.storage
                was = self._storages.get(id(storage), (storage, False))[1]
                self._storages[id(storage)] = (storage, was)
                self._downloads.append(storage)

    def binds(self, storage: TensorStorage) -> bool:
        """Whether the recording binds `storage` (a tensor's)."""
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
        with self._context.lock:
            self._lifetime.check("Recording.submit")
            if self._runs:
                raise RuntimeError("this recording was already submitted; use replay()")
            self._finish()
            self._run()

    def replay(self) -> None:
        """Run the recorded commands again on the tensors' current contents."""
        with self._context.lock:
            self._lifetime.check("Recording.replay")
            if not self._runs:
                raise RuntimeError("nothing submitted yet: end the `with` block first")
            self._run()

    def check_open(self, action: str) -> None:
        """Raise ClosedError if the recording, an operator or a tensor it binds is closed."""
        self._lifetime.check(action)
        for op in self._ops.values():
            op.check_open(action)
        for storage, _ in self._storages.values():
            storage.lifetime.check(action)

    def _run(self) -> None:
        self._context.collect()
        self.check_open("Recording.replay" if self._runs else "Recording.submit")
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
        with interrupts_deferred():
            submission.begin()
            commands[0].submit(what)
            submission.commit(uploads)
            self._last = commands
            self._runs += 1
            self._uploaded += len(uploads)

    def _build(self, uploads: List[Buffer]) -> Tuple[Commands, int]:
        runtime = self._session.runtime
        count = (2 if uploads else 0) + len(self._steps) + (1 if self._downloads else 0)
        commands = runtime.commands(count + 1 if self._timestamps else 0,
                                    self._context.wait_spin_us * 1000)
        if uploads:
            commands.upload(uploads)
        first = commands.recorded
        for program, arg, _, _ in self._steps:
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
            raise RuntimeError("no run since update_push_constants" if self._runs
                               else "nothing submitted yet")
        if not self._timestamps:
            raise RuntimeError("record with device.record(timestamps=True) to time kernels")
        commands, first = self._last
        stamps = np.array(commands.timestamps(), dtype=np.float64)
        stamps *= self._context.info.timestamp_period
        return list(np.diff(stamps)[first: first + len(self._steps)])

    def close(self) -> None:
        """Release the recorded command buffers; replaying afterwards raises ClosedError."""
        with self._context.lock:
            self._lifetime.close()
            for commands, _ in self._commands.values():
                commands.destroy()
            self._commands.clear()
            self._steps = []
            self._storages = {}
            self._ops = {}
            self._downloads = []

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, exc_type: Optional[type], *exc: object) -> None:
        if exc_type is None:
            self.submit()
