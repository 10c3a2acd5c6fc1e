"""Host copies of large arrays, split over a few threads.

A numpy round trip through a one-call function is mostly host copying: the inputs into memory
the device reads, the outputs into new arrays. One thread copies about 11 GB/s on the lent H100's
host, and numpy releases the GIL while it copies, so four threads copy a 4-50 MB array about
twice as fast (`benchmarks/investigations/roundtrip_parts.py`: more threads were slower
there). Small arrays are copied on the calling thread: a thread hand-off costs more than it
saves below 1 MiB.

A copy never returns or raises while a worker still writes: the destination may be mapped
device memory that is unmapped right after. Where the pool cannot take work (interpreter
shutdown), the calling thread copies everything.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Optional

import numpy as np

#: Most threads one copy uses (measured best on the H100's 16-core host; see above).
COPY_THREADS = 4
#: Fewest bytes each thread copies; a smaller copy stays on the calling thread.
BYTES_PER_THREAD = 1 << 20

_CPUS = os.cpu_count() or 1  # read once: os.cpu_count() costs microseconds per call
_pool: Optional[ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # In a child after fork(): the parent's pool has no threads here, and its lock may have
    # been held by a thread that does not exist here either.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(min(COPY_THREADS, _CPUS),
                                       thread_name_prefix="pyvkgrad-copy")
        return _pool


def _threads(nbytes: int) -> int:
    return min(COPY_THREADS, _CPUS, nbytes // BYTES_PER_THREAD)


class _Parts:
    """The parts of one copy that workers write. `close` cancels the parts not yet started
    and waits for those running, so that after it no worker touches the arrays (a part
    handed to the pool just before an interrupt may have no future the caller can wait on)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running = 0
        self._cancelled = False

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._running += 1
        try:
            np.copyto(dst, src, casting="no")
        finally:
            with self._lock:
                self._running -= 1
                self._idle.notify_all()

    def close(self) -> None:
        interrupted = None
        with self._lock:
            self._cancelled = True
            while self._running:
                try:
                    self._idle.wait()
                except KeyboardInterrupt as e:  # held until no worker writes
                    interrupted = e
        if interrupted is not None:
            raise interrupted


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for 1-D arrays of one length and dtype. When this returns or raises, no
    worker writes any more (after an interrupt, each part is whole or untouched)."""
    if dst.nbytes < 2 * BYTES_PER_THREAD:
        dst[...] = src  # the one-call hot path: the cheapest copy numpy has
        return
    step = -(-dst.shape[0] // _threads(dst.nbytes))
    parts = [(dst[i:i + step], src[i:i + step]) for i in range(0, dst.shape[0], step)]
    workers = _Parts()
    futures = []
    try:
        pool = _executor()
        for d, s in parts[1:]:
            try:
                futures.append(pool.submit(workers.copy, d, s))
            except RuntimeError:  # the pool is shut down (interpreter exit): copy here
                np.copyto(d, s, casting="no")
        np.copyto(parts[0][0], parts[0][1], casting="no")
        wait(futures)
    finally:
        workers.close()
    for f in futures:
        f.result()  # a worker's exception


def copy_of(src: np.ndarray) -> np.ndarray:
    """A new array equal to the 1-D array `src` (large ones copied by several threads)."""
    if src.nbytes < 2 * BYTES_PER_THREAD:
        return src.copy()
    out = np.empty_like(src)
    copy_into(out, src)
    return out
