"""Tests for pyvkgrad._vulkan_info (and the structures of pyvkgrad._vulkan_structs) against
Mesa's lavapipe (llvmpipe) CPU driver."""
import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pyvkgrad import _vulkan_info as vi
from pyvkgrad import _vulkan_structs as vs

# The directory holding the pyvkgrad these tests import, for the probe's subprocess.
_PACKAGE_PARENT = Path(vi.__file__).resolve().parents[1]

LVP_ICD = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"


def _require_lavapipe():
    # These tests pin lavapipe's reported limits: they need it installed (tools/test installs
    # it, and CI must have it), and skip on a machine that has only a GPU driver.
    if not os.path.exists(LVP_ICD):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but lavapipe is missing ({LVP_ICD})")
        pytest.skip("lavapipe is not installed")


@pytest.fixture
def lavapipe(monkeypatch):
    _require_lavapipe()
    # The loader reads these at vkCreateInstance time, i.e. inside physical_devices().
    monkeypatch.setenv("VK_DRIVER_FILES", LVP_ICD)
    monkeypatch.setenv("VK_ICD_FILENAMES", LVP_ICD)


def _lavapipe_device():
    devices = vi.physical_devices()
    assert len(devices) == 1
    return devices[0]


def test_struct_layout_matches_c_abi():
    # Offsets/sizes as computed by a C compiler from vulkan_core.h (x86-64).
    L = vs.VkPhysicalDeviceLimits
    assert L.maxStorageBufferRange.offset == 28
    assert L.maxPushConstantsSize.offset == 32
    assert L.maxComputeSharedMemorySize.offset == 216
    assert L.maxComputeWorkGroupCount.offset == 220
    assert L.maxComputeWorkGroupInvocations.offset == 232
    assert L.maxComputeWorkGroupSize.offset == 236
    assert L.timestampComputeAndGraphics.offset == 420
    assert L.timestampPeriod.offset == 424
    assert ctypes.sizeof(L) == 504
    assert vs.VkPhysicalDeviceProperties.limits.offset == 296
    assert ctypes.sizeof(vs.VkPhysicalDeviceProperties) == 824
    assert ctypes.sizeof(vs.VkPhysicalDeviceProperties2) == 840
    assert ctypes.sizeof(vs.VkPhysicalDeviceSubgroupProperties) == 32
    assert ctypes.sizeof(vs.VkPhysicalDeviceDriverProperties) == 536
    assert ctypes.sizeof(vs.VkPhysicalDeviceFeatures) == 55 * 4
    assert ctypes.sizeof(vs.VkPhysicalDeviceFeatures2) == 240
    assert ctypes.sizeof(vs.VkPhysicalDeviceShaderAtomicFloatFeaturesEXT) == 64
    assert ctypes.sizeof(vs.VkApplicationInfo) == 48
    assert ctypes.sizeof(vs.VkInstanceCreateInfo) == 64
    assert ctypes.sizeof(vs.VkExtensionProperties) == 260
    assert ctypes.sizeof(vs.VkPhysicalDeviceMemoryProperties2) == 16 + 520
    assert vs.VkPhysicalDeviceMemoryProperties2.memoryHeaps.offset == 16 + 264
    assert ctypes.sizeof(vs.VkPhysicalDeviceMemoryBudgetPropertiesEXT) == 272


def test_device_memory_in_use():
    """Device-local bytes in use exactly where the device has VK_EXT_memory_budget, else None;
    an index past the last device is None too."""
    for info in vi.physical_devices():
        used = vi.device_memory_in_use(info.index)
        if info.memory_budget:
            assert isinstance(used, int) and used >= 0, (info.name, used)
        else:
            assert used is None, (info.name, used)
    assert vi.device_memory_in_use(len(vi.physical_devices())) is None


def test_lavapipe_properties(lavapipe):
    d = _lavapipe_device()
    assert d.index == 0
    assert "llvmpipe" in d.name
    assert d.vendor_id == 0x10005 and d.vendor == "Mesa"
    assert d.device_type == "cpu"
    assert d.max_storage_buffer_range == 134217728
    assert d.max_compute_work_group_count == (65535, 65535, 65535)
    assert d.max_compute_shared_memory_size == 32768
    assert d.max_compute_work_group_invocations >= 128
    assert len(d.max_compute_work_group_size) == 3
    assert d.max_push_constants_size >= 128
    assert d.timestamp_period == 1.0
    assert d.timestamp_compute_and_graphics is True
    assert d.subgroup_size == 8
    assert d.subgroup_operations & 0x1  # VK_SUBGROUP_FEATURE_BASIC_BIT
    assert {"basic", "arithmetic"} <= set(vi.subgroup_feature_names(d.subgroup_operations))
    assert d.subgroup_stages & vi.SHADER_STAGE_COMPUTE
    assert d.driver_name == "llvmpipe"
    assert "Mesa" in d.driver_info
    # lavapipe has VK_EXT_shader_atomic_float's float32 buffer atomic add (CI's runs the
    # native atomic kernel: tests/test_resample_grad.py)
    assert d.shader_buffer_float32_atomic_add is True


def test_api_version_format(lavapipe):
    d = _lavapipe_device()
    assert re.fullmatch(r"\d+\.\d+\.\d+", d.api_version)
    major, minor, _ = map(int, d.api_version.split("."))
    assert (major, minor) >= (1, 1)
    assert vi._version_str(vi._make_version(1, 3, 230)) == "1.3.230"
    assert vi._version_str((7 << 29) | vi._make_version(1, 2, 3)) == "1.2.3"  # variant ignored


def test_result_is_frozen_and_uncached(lavapipe):
    a, b = vi.physical_devices(), vi.physical_devices()
    assert a == b and a is not b
    with pytest.raises(Exception):
        a[0].name = "x"


@pytest.mark.parametrize("cap", [(1, 1), (1, 0)])
def test_older_instance_versions(lavapipe, monkeypatch, cap):
    # Exercise the fallbacks used with older loaders: 1.1 => no driver
    # properties; 1.0 => basic properties only.
    monkeypatch.setattr(vi, "_MAX_INSTANCE_VERSION", vi._make_version(*cap))
    d = _lavapipe_device()
    assert d.driver_name == "" and d.driver_info == ""
    assert d.max_storage_buffer_range == 134217728
    assert d.timestamp_period == 1.0
    if cap == (1, 1):
        assert d.subgroup_size == 8
    else:
        assert d.subgroup_size == 0 and d.shader_buffer_float32_atomic_add is False
        assert d.memory_budget is False and vi.device_memory_in_use(d.index) is None


_SUBPROCESS_PROBE = f"""
import sys
sys.path.insert(0, {str(_PACKAGE_PARENT)!r})
from pyvkgrad import _vulkan_info as vi
try:
    print("DEVICES", len(vi.physical_devices()))
except vi.VulkanUnavailable as e:
    print("UNAVAILABLE", e)
"""


def _run_probe(**env):
    return subprocess.run([sys.executable, "-c", _SUBPROCESS_PROBE], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


def test_bogus_driver_file_does_not_crash(tmp_path):
    # In a subprocess so that a crash in the loader would fail the test, not pytest.
    bogus = str(tmp_path / "does_not_exist_icd.json")
    proc = _run_probe(VK_DRIVER_FILES=bogus, VK_ICD_FILENAMES=bogus)
    assert proc.returncode == 0, proc.stderr
    # With no driver the loader's vkCreateInstance fails with VK_ERROR_INCOMPATIBLE_DRIVER.
    assert "UNAVAILABLE vkCreateInstance failed with VK_ERROR_INCOMPATIBLE_DRIVER" in \
        proc.stdout, proc.stdout


def test_bogus_driver_file_in_process(monkeypatch, tmp_path):
    bogus = str(tmp_path / "does_not_exist_icd.json")
    monkeypatch.setenv("VK_DRIVER_FILES", bogus)
    monkeypatch.setenv("VK_ICD_FILENAMES", bogus)
    with pytest.raises(vi.VulkanUnavailable,
                       match="vkCreateInstance failed with VK_ERROR_INCOMPATIBLE_DRIVER"):
        vi.physical_devices()


def test_clean_under_validation_layer():
    # The layer prints to stdout by default; any VUID/error/warning fails this.
    _require_lavapipe()
    if not os.path.exists("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but the Khronos validation layer is missing")
        pytest.skip("vulkan-validationlayers is not installed")
    proc = _run_probe(VK_DRIVER_FILES=LVP_ICD, VK_ICD_FILENAMES=LVP_ICD,
                      VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "DEVICES 1" in proc.stdout, out
    assert not re.search(r"VUID|Validation (Error|Warning)|UNASSIGNED", out), out


def test_missing_loader_message(monkeypatch):
    def fail(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(vi, "_lib", None)
    monkeypatch.setattr(vi.ctypes, "CDLL", fail)
    with pytest.raises(vi.VulkanUnavailable, match=r"libvulkan\.so\.1.*libvulkan1"):
        vi.physical_devices()
