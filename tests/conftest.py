"""Test environment: a real Vulkan device, seeded randomness, and a CI that cannot skip.

In CI (CI=true) a missing Vulkan device fails every device test instead of skipping it; the
canary in test_environment.py also fails when CI is not running on lavapipe.
"""

import hashlib
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ROOT = Path(__file__).resolve().parent.parent
# Where the tests' Python subprocesses start. From the repository root, `python -m` and `-c`
# put the checkout first on sys.path; testing an installed wheel (tools/test_wheel) they start
# elsewhere, since Python 3.9 and 3.10 have no PYTHONSAFEPATH to keep the checkout off it (they
# would test the checkout, which has no runtime for them, not the wheel).
SUBPROCESS_CWD = ("/" if os.environ.get("PYVKGRAD_EXPECT_INSTALLED") == "1" else str(ROOT))


@pytest.fixture(scope="session")
def device():
    """The default pyvkgrad device (lavapipe under tools/test)."""
    import pyvkgrad
    try:
        return pyvkgrad.default_device()
    except ImportError:  # a missing or broken runtime is never "no device": it fails
        raise
    except Exception as e:  # no loader, no device
        if IN_CI:
            pytest.fail(f"CI=true but no Vulkan device: {e}")
        pytest.skip(f"no Vulkan device: {e}")


@pytest.fixture(autouse=True)
def ctrl_c_left_as_found():
    """Every test leaves Ctrl-C as it found it: SIGINT's handler (pyvkgrad's deferral installs
    one for the length of a submission and must put the caller's back) and this thread's
    signal mask (SIGINT not blocked). A handler left behind would swallow every later Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert after == before, f"SIGINT's handler and mask were {before}, now {after}"


def seed_of(nodeid: str) -> int:
    """64 bits of a hash of the whole test id: every test and parameter set its own seed."""
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:8], "little")


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id: fresh data per test, reproducible per run
    (PYVKGRAD_TEST_SEED varies every seed at once)."""
    return np.random.default_rng(seed_of(request.node.nodeid)
                                 ^ int(os.environ.get("PYVKGRAD_TEST_SEED", "0")))


# Property tests: a derandomized profile in CI (the same examples every run), random locally.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("dev", max_examples=40, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("ci" if IN_CI else os.environ.get("HYPOTHESIS_PROFILE", "dev"))
except ImportError:  # hypothesis is a test dependency; tests that need it import it themselves
    pass
