"""What the device layer must remember between calls, kept free of Vulkan so it is tested like
the plans: which copy of a tensor is current, what is still open, and which dispatches of a
recording need a barrier.

A device tensor has two copies: host-visible staging memory (what `write` fills and `numpy`
reads) and the device buffer kernels bind. `TensorState` says which is current; every path
(upload, write, empty, operator calls, recordings, replays, numpy, the one-call functions)
asks it what to copy and tells it what ran, through `Submission`.

`Lifetime` makes closing an object (a tensor, a compiled operator, a recording, a device's
session) visible to everything that depends on it, so using it afterwards raises ClosedError
instead of touching freed Vulkan memory.
"""

from __future__ import annotations

import enum
from typing import Dict, Hashable, Iterable, List, Optional, Set


class ClosedError(ValueError):
    """An object was used after it, or something it depends on, was closed."""


class Current(enum.Enum):
    """Which copy of a device tensor holds its contents."""

    HOST = "host"  # staging is newer: upload before a kernel uses it
    DEVICE = "device"  # a kernel wrote it since: download before the host reads it
    BOTH = "both"  # the two agree


class TensorState:
    """Which copy of one device tensor is current."""

    __slots__ = ("current",)

    def __init__(self, current: Current = Current.HOST) -> None:
        self.current = current

    @property
    def needs_upload(self) -> bool:
        return self.current is Current.HOST

    @property
    def needs_download(self) -> bool:
        return self.current is Current.DEVICE

    def host_written(self) -> None:
        """The staging copy was changed (`write`, `upload`, `empty`'s zeros)."""
        self.current = Current.HOST

    def downloaded(self) -> None:
        """The device copy was copied back to staging."""
        self.current: Current = Current.BOTH

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.current.value})"


class OneCopy(TensorState):
    """The state of a tensor in mapped memory, which the host writes and kernels bind
    directly: one copy, always current, so nothing is ever uploaded or downloaded. Only for
    tensors kernels read: the host may read a kernel's writes only after a barrier that a
    download records, so a written tensor is staged (the device layer makes sure)."""

    __slots__ = ()

    @property  # type: ignore[override]
    def current(self) -> Current:
        return Current.BOTH

    @current.setter
    def current(self, value: Current) -> None:
        pass  # one copy: whatever a submission says, it is current


class Submission:
    """One submission's effect on tensor states: uploads first, then kernels, then downloads.

    `bind` every tensor a recording uses; `uploads` lists the ones to copy to the device first
    (a tensor a kernel only writes is uploaded too when staging is newer, so the elements its
    descriptor does not cover keep their values). `commit` applies the result once the
    submission has completed; a submission that failed or was interrupted is never committed,
    so staging stays current and the next one uploads again.
    """

    def __init__(self) -> None:
        self._bound: Dict[int, TensorState] = {}
        self._written: Dict[int, TensorState] = {}
        self._downloads: Dict[int, TensorState] = {}

    def bind(self, state: TensorState, written: bool) -> None:
        self._bound[id(state)] = state
        if written:
            self._written[id(state)] = state

    def download(self, state: TensorState) -> None:
        self._downloads[id(state)] = state

    def uploads(self) -> List[TensorState]:
        return [s for s in self._bound.values() if s.needs_upload]

    def begin(self) -> None:
        """Just before the submission: a tensor it writes whose two copies agreed keeps only
        staging's as current. Ctrl-C waits for the commit, but a signal handler that raises
        (SIGALRM's, as pytest-timeout's) may interrupt after the kernels ran and before the
        commit; the next use then uploads staging again, as if the call had not run, where
        the device copy would have disagreed with a read of staging."""
        for s in self._written.values():
            if s.current is Current.BOTH:
                s.current = Current.HOST

    def commit(self, uploaded: Iterable[TensorState]) -> None:
        for s in uploaded:
            s.current = Current.BOTH
        for s in self._written.values():
            s.current = Current.DEVICE
        for s in self._downloads.values():
            s.current = Current.BOTH


class Lifetime:
    """Whether an object may still be used. Closing a parent (a device's session) closes the
    use of every child, and the error names what was closed."""

    __slots__ = ("what", "parent", "closed", "__weakref__")

    def __init__(self, what: str, parent: Optional["Lifetime"] = None) -> None:
        self.what: str = what
        self.parent: Optional[Lifetime] = parent
        self.closed = False

    def close(self) -> None:
        self.closed: bool = True

    @property
    def alive(self) -> bool:
        node: Optional[Lifetime] = self
        while node is not None:
            if node.closed:
                return False
            node = node.parent
        return True

    def check(self, action: str) -> None:
        """Raise ClosedError naming what was closed when this or an ancestor is closed."""
        closed: Optional[Lifetime] = None
        node: Optional[Lifetime] = self
        while node is not None:  # the outermost closed one says why
            if node.closed:
                closed = node
            node = node.parent
        if closed is self:
            raise ClosedError(f"{action}: {self.what} is closed")
        if closed is not None:
            raise ClosedError(f"{action}: {self.what} belongs to {closed.what}, which was "
                              f"closed")


class Hazards:
    """Which buffers a dispatch must wait for, within one recording.

    A dispatch that reads or writes a buffer written earlier (read-after-write,
    write-after-write), or writes a buffer read earlier (write-after-read), gets a
    compute-to-compute barrier on exactly those buffers; independent dispatches get none.
    A barrier orders every earlier dispatch (execution) but makes only its listed buffers'
    writes visible (memory), so other written buffers stay pending.
    """

    def __init__(self) -> None:
        self._read: Set[Hashable] = set()
        self._written: Set[Hashable] = set()

    def dispatch(self, reads: Iterable[Hashable], writes: Iterable[Hashable]) -> Set[Hashable]:
        """Record a dispatch; return the buffers it needs a barrier on (before it runs)."""
        reads, writes = set(reads), set(writes)
        hazards = ((reads | writes) & self._written) | (writes & self._read)
        if hazards:
            self._written -= hazards
            self._read.clear()
        self._read |= reads
        self._written |= writes
        return hazards
