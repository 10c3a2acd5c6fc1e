"""pyvkgrad._copy without a GPU: host copies split over threads are exact for every length and
dtype, never leave a worker writing after they return or raise, and survive fork()."""

import os
import threading
import time

import numpy as np
import pytest

from pyvkgrad import _copy


@pytest.fixture
def small_parts(monkeypatch):
    """Split copies of a few hundred bytes, so that small arrays exercise the threads."""
    monkeypatch.setattr(_copy, "BYTES_PER_THREAD", 64)


@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1021, 4099])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint32])
def test_split_copies_are_exact(small_parts, rng, n, dtype):
    """Every length around the thread split (parts of 64 bytes, at most COPY_THREADS), primes
    among them: each element lands once, in place, bit for bit."""
    src = rng.integers(0, 256, n * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)
    dst = np.full_like(src, 7)
    _copy.copy_into(dst, src)
    assert dst.tobytes() == src.tobytes()
    out = _copy.copy_of(src)
    assert out.tobytes() == src.tobytes() and out is not src and not np.shares_memory(out, src)


def test_real_sizes_split(rng):
    """At the real threshold: 8 MiB is copied by several threads, exactly."""
    src = rng.standard_normal(2 << 20).astype(np.float32)
    assert _copy._threads(src.nbytes) == min(_copy.COPY_THREADS, _copy._CPUS)
    dst = np.zeros_like(src)
    _copy.copy_into(dst, src)
    np.testing.assert_array_equal(dst, src)
    np.testing.assert_array_equal(_copy.copy_of(src), src)


def test_strided_source(small_parts, rng):
    """A 1-D view with a stride (what a broadcast or sliced input gives) copies its elements."""
    base = rng.standard_normal(3000).astype(np.float32)
    src = base[::3]
    dst = np.empty_like(src)
    _copy.copy_into(dst, src)
    np.testing.assert_array_equal(dst, base[::3])


def test_interrupt_waits_for_every_part(small_parts, monkeypatch, rng):
    """Ctrl-C in the calling thread's part: the interrupt propagates only after every worker's
    part is written, so no worker writes into the destination after copy_into returns."""
    real = np.copyto

    def slow_or_interrupted(dst, src, casting="same_kind"):
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        time.sleep(0.05)  # still writing when the interrupt arrives
        real(dst, src, casting=casting)
    monkeypatch.setattr(np, "copyto", slow_or_interrupted)
    src = rng.standard_normal(1024).astype(np.float32)
    dst = np.zeros_like(src)
    with pytest.raises(KeyboardInterrupt):
        _copy.copy_into(dst, src)
    step = -(-src.size // _copy._threads(src.nbytes))
    np.testing.assert_array_equal(dst[step:], src[step:])  # the workers' parts, all done


def test_worker_error_propagates(small_parts):
    """A part that fails raises in the caller (after the others are done)."""
    src = np.ones(1024, np.float32)
    dst = np.zeros_like(src)
    dst.flags.writeable = False
    with pytest.raises(ValueError):
        _copy.copy_into(dst, src)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_pool_works_after_fork(small_parts):
    """A child forked after the pool started gets a pool of its own (an inherited one has no
    threads and would hang)."""
    src = np.arange(4096, dtype=np.float32)
    _copy.copy_of(src)  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if a threaded copy completes and is exact
        try:
            ok = np.array_equal(_copy.copy_of(src), src)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
