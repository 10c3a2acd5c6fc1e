"""Test environment: a real Vulkan device, seeded randomness, and a CI that cannot skip.

In CI (CI=true) a missing Vulkan device fails every device test instead of skipping it; the
canary in test_environment.py also fails when CI is not running on lavapipe.
"""

import os

import numpy as np
import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def device():
    """The default pyvkgrad device (lavapipe under tools/test)."""
    import pyvkgrad
    try:
        return pyvkgrad.default_device()
    except Exception as e:  # no loader, no device
        if IN_CI:
            pytest.fail(f"CI=true but no Vulkan device: {e}")
        pytest.skip(f"no Vulkan device: {e}")


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: fresh data per test, reproducible per run."""
    seed = int.from_bytes(request.node.nodeid.encode()[-8:].rjust(8, b"\0"), "little")
    return np.random.default_rng(seed ^ int(os.environ.get("PYVKGRAD_TEST_SEED", "0")))


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
