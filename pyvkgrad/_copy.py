"""Host copies of large arrays, split over a few threads.

A numpy round trip through a one-call function is mostly host copying: the inputs into memory
the device reads, the outputs into new arrays. One thread copies about 11 GB/s on the lent H100's
host, and numpy releases the GIL while it copies, so four threads copy a 4-50 MB array about
twice as fast (`benchmarks/roundtrip_parts.py`: more threads were slower there). Small arrays
are copied on the calling thread: a thread hand-off costs more than it saves below 1 MiB.
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

_pool: Optional[ThreadPoolExecutor] = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    # A pool inherited through fork() has no threads in the child: make a new one there.
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(min(COPY_THREADS, _CPUS),
                                       thread_name_prefix="pyvkgrad-copy")
            _pool_pid = os.getpid()
        return _pool


_CPUS = os.cpu_count() or 1  # read once: os.cpu_count() costs microseconds per call


def _threads(nbytes: int) -> int:
    return min(COPY_THREADS, _CPUS, nbytes // BYTES_PER_THREAD)


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src for 1-D arrays of one length; every part is done when this returns, even
    when it is interrupted (the parts are waited for before the interrupt propagates)."""
    if dst.nbytes < 2 * BYTES_PER_THREAD:
        dst[...] = src  # the one-call hot path: the cheapest copy numpy has
        return
    threads = _threads(dst.nbytes)
    step = -(-dst.shape[0] // threads)
    parts = [(dst[i:i + step], src[i:i + step]) for i in range(0, dst.shape[0], step)]
    pool = _executor()
    futures = [pool.submit(np.copyto, d, s, casting="no") for d, s in parts[1:]]
    interrupted = None
    try:
        np.copyto(parts[0][0], parts[0][1], casting="no")
    finally:
        # Never return or raise while a worker still writes into dst: an interrupt during the
        # wait is held until every part is done.
        while True:
            try:
                wait(futures)
                break
            except KeyboardInterrupt as e:
                interrupted = e
    for f in futures:
        f.result()  # a worker's exception
    if interrupted is not None:
        raise interrupted


def copy_of(src: np.ndarray) -> np.ndarray:
    """A new array equal to the 1-D array `src` (large ones copied by several threads)."""
    if src.nbytes < 2 * BYTES_PER_THREAD:
        return src.copy()
    out = np.empty_like(src)
    copy_into(out, src)
    return out
