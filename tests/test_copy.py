"""pyvkgrad._copy without a GPU: host copies split over threads are exact for every length and
dtype, never leave a worker writing after they return or raise, and survive fork()."""

import os
import threading
import time

import numpy as np
import pytest

from conftest import SUBPROCESS_CWD
from pyvkgrad import _copy


@pytest.fixture
def small_parts(monkeypatch):
    """Split copies of a few hundred bytes into COPY_THREADS parts, so that small arrays
    exercise the threads (on any number of cores)."""
    monkeypatch.setattr(_copy, "BYTES_PER_THREAD", 64)
    monkeypatch.setattr(_copy, "_CPUS", _copy.COPY_THREADS)


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


def _whole_or_untouched(dst, src, step):
    """Each part of `dst` is either all of `src`'s part or still zeros."""
    for i in range(0, src.size, step):
        got = dst[i:i + step]
        assert np.array_equal(got, src[i:i + step]) or not got.any(), f"part at {i} is torn"


def test_interrupt_waits_for_every_part(small_parts, monkeypatch, rng):
    """Ctrl-C in the calling thread's part: when the interrupt propagates, no worker writes
    any more, and each worker's part is whole or untouched."""
    real = np.copyto

    def slow_or_interrupted(dst, src, casting="same_kind"):
        if threading.current_thread() is threading.main_thread():
            time.sleep(0.01)  # let the workers start
            raise KeyboardInterrupt
        time.sleep(0.05)  # still writing when the interrupt arrives
        real(dst, src, casting=casting)
    monkeypatch.setattr(np, "copyto", slow_or_interrupted)
    src = rng.standard_normal(1024).astype(np.float32)
    dst = np.zeros_like(src)
    with pytest.raises(KeyboardInterrupt):
        _copy.copy_into(dst, src)
    after = dst.copy()
    time.sleep(0.2)
    np.testing.assert_array_equal(dst, after)  # nothing wrote after the return
    step = -(-src.size // _copy._threads(src.nbytes))
    _whole_or_untouched(dst[step:], src[step:], step)


def test_worker_error_propagates(small_parts):
    """A part that fails raises in the caller (after the others are done)."""
    src = np.ones(1024, np.float32)
    dst = np.zeros_like(src)
    dst.flags.writeable = False
    with pytest.raises(ValueError):
        _copy.copy_into(dst, src)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
# Python 3.12+ warns on every fork() with threads alive; this test forks with them on purpose.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
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


class _Interrupting:
    """A pool whose second `submit` hands the work over and then raises KeyboardInterrupt,
    as a Ctrl-C arriving right after a submission would; its workers are slow."""

    def __init__(self, pool):
        self.pool, self.calls = pool, 0

    def submit(self, fn, *args, **kwargs):
        def slow(*a, **k):
            time.sleep(0.05)
            return fn(*a, **k)
        future = self.pool.submit(slow, *args, **kwargs)
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return future


def test_interrupt_between_submissions_waits_for_submitted_parts(small_parts, monkeypatch, rng):
    """Ctrl-C while the parts are being handed out, after the pool took one but before its
    future came back: when the interrupt propagates no worker writes any more (one writing on
    into mapped memory that the caller then unmapped crashed the interpreter)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        fake = _Interrupting(pool)
        monkeypatch.setattr(_copy, "_executor", lambda: fake)
        src = rng.standard_normal(1024).astype(np.float32)
        dst = np.zeros_like(src)
        with pytest.raises(KeyboardInterrupt):
            _copy.copy_into(dst, src)
        after = dst.copy()
        time.sleep(0.2)  # the slow workers would be done by now
        np.testing.assert_array_equal(dst, after)
        _whole_or_untouched(dst, src, -(-src.size // _copy._threads(src.nbytes)))


def test_a_shut_down_pool_copies_on_the_calling_thread(small_parts, monkeypatch, rng):
    """At interpreter exit the pool refuses work (RuntimeError): the copy is done anyway, on
    the calling thread (an atexit handler's one-call function raised before)."""
    class ShutDown:
        def submit(self, *args, **kwargs):
            raise RuntimeError("cannot schedule new futures after shutdown")
    monkeypatch.setattr(_copy, "_executor", lambda: ShutDown())
    src = rng.standard_normal(1021).astype(np.float16)
    dst = np.zeros_like(src)
    _copy.copy_into(dst, src)
    assert dst.tobytes() == src.tobytes()


def test_one_call_at_interpreter_exit():
    """A large one-call copy inside an atexit handler (after concurrent.futures has shut its
    pools down) completes and is exact. GPU-free: the copy module alone."""
    import subprocess
    import sys
    code = ("import atexit, numpy as np\n"
            "from pyvkgrad import _copy\n"
            "def late():\n"
            "    a = np.arange(3 << 20, dtype=np.float32)\n"
            "    _copy.copy_of(a)\n"  # start the pool before exit
            "    assert np.array_equal(_copy.copy_of(a), a)\n"
            "    print('late copy ok')\n"
            "atexit.register(late)\n"
            "_copy.copy_of(np.arange(3 << 20, dtype=np.float32))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=SUBPROCESS_CWD)
    assert out.returncode == 0 and "late copy ok" in out.stdout, out.stderr
