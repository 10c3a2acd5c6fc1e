"""Dependency-free probe of Vulkan physical devices (ctypes + stdlib only).

Why this exists: pyvkgrad runs its compute through Kompute (``kp``), but kp
only exposes a device's name, its compute work-group limits and timestamp
support.  The device layer also needs the vendor, device type, API/driver
versions, subgroup size, buffer/shared-memory limits and whether float32
buffer atomics are available, so we ask the Vulkan loader directly.

Everything here is valid Vulkan usage (pyvkgrad's test suite runs under
VK_LAYER_KHRONOS_validation): a throw-away instance is created, queried and
destroyed on every call.  Nothing is cached except the loader handle; the
caller decides what to cache.
"""
from __future__ import annotations

import ctypes
import sys
from ctypes import POINTER, byref, c_char_p, c_int32, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Optional

from ._environment import LAVAPIPE_HINT
from ._vulkan_structs import (VkApplicationInfo, VkExtensionProperties, VkInstanceCreateInfo,
                              VkPhysicalDeviceDriverProperties, VkPhysicalDeviceFeatures2,
                              VkPhysicalDeviceFloatControlsProperties,
                              VkPhysicalDeviceMemoryBudgetPropertiesEXT,
                              VkPhysicalDeviceMemoryProperties2, VkPhysicalDeviceProperties,
                              VkPhysicalDeviceProperties2,
                              VkPhysicalDeviceShaderAtomicFloatFeaturesEXT,
                              VkPhysicalDeviceShaderFloat16Int8Features,
                              VkPhysicalDeviceSubgroupProperties)

__all__ = ["LOADER_NAMES", "NoDevice", "NoDriver", "NoLoader", "PhysicalDeviceInfo",
           "VulkanUnavailable", "device_memory_in_use", "physical_devices",
           "subgroup_feature_names"]


class VulkanUnavailable(RuntimeError):
    """No usable Vulkan: one of the three below, whose message says what to install."""


class NoLoader(VulkanUnavailable):
    """The Vulkan loader library (LOADER_NAMES) cannot be opened."""


class NoDriver(VulkanUnavailable):
    """The loader opened, but vkCreateInstance failed: no usable driver (ICD)."""


class NoDevice(VulkanUnavailable):
    """A driver answered, but reports no physical device."""


# The Vulkan loader's file names on this platform, tried in order: what the runtime opens too
# (tools/kp-0.9.0.patch, part 14), so neither links it and both say the same when it is missing.
if sys.platform == "win32":
    LOADER_NAMES = ("vulkan-1.dll",)
    _LOADER_INSTALL = "install your GPU's driver, which brings the Vulkan loader"
elif sys.platform == "darwin":
    LOADER_NAMES = ("libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib")
    _LOADER_INSTALL = ("install the Vulkan SDK (LunarG), or with Homebrew: brew install "
                       "vulkan-loader molten-vk")
else:
    LOADER_NAMES = ("libvulkan.so.1",)
    _LOADER_INSTALL = ("install the Vulkan loader (Debian/Ubuntu: apt-get install libvulkan1; "
                       "Fedora: dnf install vulkan-loader) and a Vulkan driver (your GPU's, or "
                       "Mesa's CPU driver lavapipe: apt-get install mesa-vulkan-drivers)")
NO_DRIVER_HINT = f"no Vulkan driver (ICD) is installed or usable: {LAVAPIPE_HINT}"


@dataclass(frozen=True)
class PhysicalDeviceInfo:
    index: int                  # order of vkEnumeratePhysicalDevices (kp's order)
    name: str
    vendor_id: int
    vendor: str
    device_id: int
    device_type: str
    api_version: str            # "major.minor.patch"; variant ignored
    driver_version: int         # raw, vendor-specific encoding
    driver_name: str            # "" unless device and instance are >= 1.2
    driver_info: str
    subgroup_size: int          # 0 unless device and instance are >= 1.1
    subgroup_operations: int    # VkSubgroupFeatureFlags bitmask (SUBGROUP_FEATURES)
    subgroup_stages: int        # VkShaderStageFlags where they work (SHADER_STAGE_COMPUTE)
    max_storage_buffer_range: int
    max_per_stage_descriptor_storage_buffers: int  # storage buffers one shader may bind
    max_push_constants_size: int
    max_compute_shared_memory_size: int
    max_compute_work_group_count: tuple[int, int, int]
    max_compute_work_group_invocations: int
    max_compute_work_group_size: tuple[int, int, int]
    timestamp_compute_and_graphics: bool
    timestamp_period: float     # nanoseconds per timestamp tick
    shader_buffer_float32_atomic_add: bool
    memory_budget: bool         # VK_EXT_memory_budget (device_memory_in_use), device and
                                # instance >= 1.1
    # Shader float controls (Vulkan 1.2): whether a kernel may ask the device to keep float32
    # subnormals and the sign of zeros, Inf and NaN (False where unknown: device < 1.2).
    denorm_preserve_float32: bool = False
    signed_zero_inf_nan_preserve_float32: bool = False
    # Whether a kernel may convert to float16 by OpFConvert under a RoundingModeRTE execution
    # mode for 16 bits, which fixes that conversion's rounding (kernels.spirv's rte16): the
    # device has shaderRoundingModeRTEFloat16, sets each width's rounding mode independently
    # (roundingModeIndependence ALL: the mode is declared for 16 bits alone) and offers
    # VK_KHR_shader_float_controls and VK_KHR_shader_float16_int8 with shaderFloat16 (the
    # Float16 capability), which pyvkgrad then enables.
    rounding_mode_rte_float16: bool = False


# --- constants -------------------------------------------------------------
VK_SUCCESS, VK_INCOMPLETE = 0, 5
_RESULT_NAMES = {-1: "VK_ERROR_OUT_OF_HOST_MEMORY", -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
                 -3: "VK_ERROR_INITIALIZATION_FAILED", -6: "VK_ERROR_LAYER_NOT_PRESENT",
                 -7: "VK_ERROR_EXTENSION_NOT_PRESENT", -9: "VK_ERROR_INCOMPATIBLE_DRIVER"}
_ST_APPLICATION_INFO = 0
_ST_INSTANCE_CREATE_INFO = 1
_ST_PHYSICAL_DEVICE_FEATURES_2 = 1000059000
_ST_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
_ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES = 1000094000
_ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000
_ST_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES = 1000197000
_ST_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT = 1000260000
_ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2 = 1000059006
_ST_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT = 1000237000
_MEMORY_HEAP_DEVICE_LOCAL = 0x1
_ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES = 1000082000
_INDEPENDENCE_ALL = 1  # VK_SHADER_FLOAT_CONTROLS_INDEPENDENCE_ALL
# The device extensions behind rounding_mode_rte_float16, which pyvkgrad enables for it.
FLOAT_CONTROLS_EXTENSION = "VK_KHR_shader_float_controls"
FLOAT16_INT8_EXTENSION = "VK_KHR_shader_float16_int8"
RTE16_EXTENSIONS = (FLOAT_CONTROLS_EXTENSION, FLOAT16_INT8_EXTENSION)

# VkSubgroupFeatureFlagBits, bit i named SUBGROUP_FEATURES[i] (Vulkan 1.1 promises only
# "basic", and only in compute shaders: supportedStages then holds SHADER_STAGE_COMPUTE).
SUBGROUP_FEATURES = ("basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative",
                     "clustered", "quad")
SHADER_STAGE_COMPUTE = 0x20


def subgroup_feature_names(mask: int) -> tuple[str, ...]:
    """The SUBGROUP_FEATURES whose bits `mask` (supportedOperations) sets."""
    return tuple(name for bit, name in enumerate(SUBGROUP_FEATURES) if mask >> bit & 1)


_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x106B: "Apple",
            0x13B5: "ARM", 0x5143: "Qualcomm", 0x10005: "Mesa"}
_DEVICE_TYPES = ("other", "integrated_gpu", "discrete_gpu", "virtual_gpu", "cpu")


def _make_version(major: int, minor: int, patch: int = 0) -> int:
    return (major << 22) | (minor << 12) | patch


def _version_str(v: int) -> str:
    # VK_API_VERSION_MAJOR/MINOR/PATCH; the top 3 variant bits are dropped.
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def _major_minor(v: int) -> int:
    # Compare versions ignoring patch and variant.
    return v & 0x1FFFF000


_V1_1 = _make_version(1, 1)
_V1_2 = _make_version(1, 2)
# Highest instance apiVersion we request: 1.2 is all the structures we pass need.
_MAX_INSTANCE_VERSION = _V1_2


# --- loader access ---------------------------------------------------------
_lib = None  # the only module-level cache: the loaded libvulkan handle


def _no_loader() -> str:
    return f"no Vulkan loader ({', '.join(LOADER_NAMES)}): {_LOADER_INSTALL}"


def loader() -> ctypes.CDLL:
    """The Vulkan loader library, opened once; NoLoader, naming what to install, without one."""
    global _lib
    if _lib is None:
        errors = []
        for name in LOADER_NAMES:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise NoLoader(f"{_no_loader()} ({'; '.join(errors)})")
        lib.vkGetInstanceProcAddr.restype = c_void_p
        lib.vkGetInstanceProcAddr.argtypes = [c_void_p, c_char_p]
        _lib = lib
    return _lib


_VkResult = c_int32


def _proc(lib, instance, name: str, restype, *argtypes):
    """Resolve a function through vkGetInstanceProcAddr (None if absent)."""
    addr = lib.vkGetInstanceProcAddr(instance, name.encode())
    return ctypes.CFUNCTYPE(restype, *argtypes)(addr) if addr else None


def _check(res: int, what: str) -> None:
    if res not in (VK_SUCCESS, VK_INCOMPLETE):
        raise VulkanUnavailable(f"{what} failed with {_RESULT_NAMES.get(res, res)}")


def _cstr(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


# --- the probe -------------------------------------------------------------
def physical_devices() -> list[PhysicalDeviceInfo]:
    """Describe every Vulkan physical device, in vkEnumeratePhysicalDevices order.

    Returns [] when the loader works but reports no device.  Raises NoLoader when the
    loader is missing, NoDriver when vkCreateInstance fails (no usable driver).
    """
    return _with_instance(_probe)


def device_memory_in_use(index: int) -> Optional[int]:
    """Bytes this process holds in device-local heaps of physical device `index`, from
    VK_EXT_memory_budget; None where the device lacks that extension (lavapipe in Mesa 22
    does: its device memory is host memory, which the process's resident size covers)."""
    return _with_instance(lambda lib, instance, version: _heap_usage(lib, instance, version,
                                                                    index))


def _with_instance(fn):
    """fn(lib, instance, instance_version) with a short-lived VkInstance."""
    lib = loader()

    # vkEnumerateInstanceVersion only exists in 1.1+ loaders; absent => 1.0.
    loader_version = _make_version(1, 0)
    enum_version = _proc(lib, None, "vkEnumerateInstanceVersion", _VkResult, POINTER(c_uint32))
    if enum_version is not None:
        v = c_uint32()
        if enum_version(byref(v)) == VK_SUCCESS:
            loader_version = v.value
    instance_version = min(_major_minor(loader_version), _MAX_INSTANCE_VERSION)

    app = VkApplicationInfo(sType=_ST_APPLICATION_INFO, pApplicationName=b"pyvkgrad",
                            pEngineName=b"pyvkgrad", apiVersion=instance_version)
    create_info = VkInstanceCreateInfo(sType=_ST_INSTANCE_CREATE_INFO,
                                       pApplicationInfo=ctypes.pointer(app))
    create_instance = _proc(lib, None, "vkCreateInstance", _VkResult,
                            POINTER(VkInstanceCreateInfo), c_void_p, POINTER(c_void_p))
    if create_instance is None:
        raise NoLoader(f"{_no_loader()} (the library found has no vkCreateInstance)")
    instance = c_void_p()
    res = create_instance(byref(create_info), None, byref(instance))
    if res != VK_SUCCESS or not instance.value:
        raise NoDriver(f"vkCreateInstance failed with {_RESULT_NAMES.get(res, res)}: "
                       f"{NO_DRIVER_HINT}")

    destroy_instance = _proc(lib, instance, "vkDestroyInstance", None, c_void_p, c_void_p)
    try:
        return fn(lib, instance, instance_version)
    finally:
        destroy_instance(instance, None)


def _physical_device_handles(lib, instance) -> list:
    enum_devices = _proc(lib, instance, "vkEnumeratePhysicalDevices", _VkResult,
                         c_void_p, POINTER(c_uint32), POINTER(c_void_p))
    # Two-call idiom; retry if the count changed in between (VK_INCOMPLETE).
    while True:
        count = c_uint32()
        _check(enum_devices(instance, byref(count), None), "vkEnumeratePhysicalDevices")
        handles = (c_void_p * count.value)()
        res = enum_devices(instance, byref(count), handles)
        _check(res, "vkEnumeratePhysicalDevices")
        if res == VK_SUCCESS:
            return handles[:count.value]


def _heap_usage(lib, instance, instance_version, index) -> Optional[int]:
    handles = _physical_device_handles(lib, instance)
    if not 0 <= index < len(handles) or instance_version < _V1_1:
        return None
    phys = handles[index]
    enum_exts = _proc(lib, instance, "vkEnumerateDeviceExtensionProperties", _VkResult,
                      c_void_p, c_char_p, POINTER(c_uint32), POINTER(VkExtensionProperties))
    if "VK_EXT_memory_budget" not in _device_extensions(enum_exts, phys):
        return None
    get_mem2 = _proc(lib, instance, "vkGetPhysicalDeviceMemoryProperties2", None,
                     c_void_p, POINTER(VkPhysicalDeviceMemoryProperties2))
    budget = VkPhysicalDeviceMemoryBudgetPropertiesEXT(
        sType=_ST_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT)
    mem = VkPhysicalDeviceMemoryProperties2(sType=_ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                            pNext=ctypes.addressof(budget))
    get_mem2(phys, byref(mem))
    return sum(budget.heapUsage[i] for i in range(mem.memoryHeapCount)
               if mem.memoryHeaps[i].flags & _MEMORY_HEAP_DEVICE_LOCAL)


def _probe(lib, instance, instance_version: int) -> list[PhysicalDeviceInfo]:
    get_props = _proc(lib, instance, "vkGetPhysicalDeviceProperties", None,
                      c_void_p, POINTER(VkPhysicalDeviceProperties))
    enum_exts = _proc(lib, instance, "vkEnumerateDeviceExtensionProperties", _VkResult,
                      c_void_p, c_char_p, POINTER(c_uint32), POINTER(VkExtensionProperties))
    get_props2 = get_feats2 = None
    if instance_version >= _V1_1:  # core entry points of 1.1 instances
        get_props2 = _proc(lib, instance, "vkGetPhysicalDeviceProperties2", None,
                           c_void_p, POINTER(VkPhysicalDeviceProperties2))
        get_feats2 = _proc(lib, instance, "vkGetPhysicalDeviceFeatures2", None,
                           c_void_p, POINTER(VkPhysicalDeviceFeatures2))

    infos = []
    for index, phys in enumerate(_physical_device_handles(lib, instance)):
        # Basic properties first: the device's own apiVersion decides which
        # pNext structures it may legally be asked to fill.
        props = VkPhysicalDeviceProperties()
        get_props(phys, byref(props))
        usable = min(_major_minor(props.apiVersion), instance_version)

        subgroup = VkPhysicalDeviceSubgroupProperties(sType=_ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES)
        driver = VkPhysicalDeviceDriverProperties(sType=_ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES)
        controls = VkPhysicalDeviceFloatControlsProperties(
            sType=_ST_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES)
        if get_props2 is not None and usable >= _V1_1:
            if usable >= _V1_2:
                subgroup.pNext = ctypes.addressof(driver)
                driver.pNext = ctypes.addressof(controls)
            props2 = VkPhysicalDeviceProperties2(sType=_ST_PHYSICAL_DEVICE_PROPERTIES_2,
                                                 pNext=ctypes.addressof(subgroup))
            get_props2(phys, byref(props2))
            props = props2.properties

        extensions = _device_extensions(enum_exts, phys)
        def feature(extension, struct, s_type, field):
            """The feature `field` of an extension's features struct, False where the device
            lacks the extension (or Vulkan 1.1's vkGetPhysicalDeviceFeatures2)."""
            if get_feats2 is None or usable < _V1_1 or extension not in extensions:
                return False
            features = struct(sType=s_type)
            feats2 = VkPhysicalDeviceFeatures2(sType=_ST_PHYSICAL_DEVICE_FEATURES_2,
                                               pNext=ctypes.addressof(features))
            get_feats2(phys, byref(feats2))
            return bool(getattr(features, field))

        atomic_add = feature("VK_EXT_shader_atomic_float",
                             VkPhysicalDeviceShaderAtomicFloatFeaturesEXT,
                             _ST_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT,
                             "shaderBufferFloat32AtomicAdd")
        float16 = feature(FLOAT16_INT8_EXTENSION, VkPhysicalDeviceShaderFloat16Int8Features,
                          _ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, "shaderFloat16")

        lim = props.limits
        infos.append(PhysicalDeviceInfo(
            index=index,
            name=_cstr(props.deviceName),
            vendor_id=props.vendorID,
            vendor=_VENDORS.get(props.vendorID, hex(props.vendorID)),
            device_id=props.deviceID,
            device_type=(_DEVICE_TYPES[props.deviceType]
                         if props.deviceType < len(_DEVICE_TYPES) else "other"),
            api_version=_version_str(props.apiVersion),
            driver_version=props.driverVersion,
            driver_name=_cstr(driver.driverName),
            driver_info=_cstr(driver.driverInfo),
            subgroup_size=subgroup.subgroupSize,
            subgroup_operations=subgroup.supportedOperations,
            subgroup_stages=subgroup.supportedStages,
            max_storage_buffer_range=lim.maxStorageBufferRange,
            max_per_stage_descriptor_storage_buffers=lim.maxPerStageDescriptorStorageBuffers,
            max_push_constants_size=lim.maxPushConstantsSize,
            max_compute_shared_memory_size=lim.maxComputeSharedMemorySize,
            max_compute_work_group_count=tuple(lim.maxComputeWorkGroupCount),
            max_compute_work_group_invocations=lim.maxComputeWorkGroupInvocations,
            max_compute_work_group_size=tuple(lim.maxComputeWorkGroupSize),
            timestamp_compute_and_graphics=bool(lim.timestampComputeAndGraphics),
            timestamp_period=float(lim.timestampPeriod),
            shader_buffer_float32_atomic_add=atomic_add,
            memory_budget=usable >= _V1_1 and "VK_EXT_memory_budget" in extensions,
            denorm_preserve_float32=bool(controls.shaderDenormPreserveFloat32),
            signed_zero_inf_nan_preserve_float32=bool(
                controls.shaderSignedZeroInfNanPreserveFloat32),
            rounding_mode_rte_float16=bool(controls.shaderRoundingModeRTEFloat16)
            and controls.roundingModeIndependence == _INDEPENDENCE_ALL
            and FLOAT_CONTROLS_EXTENSION in extensions and float16,
        ))
    return infos


def _device_extensions(enum_exts, phys) -> set[str]:
    while True:
        count = c_uint32()
        _check(enum_exts(phys, None, byref(count), None), "vkEnumerateDeviceExtensionProperties")
        exts = (VkExtensionProperties * count.value)()
        res = enum_exts(phys, None, byref(count), exts)
        _check(res, "vkEnumerateDeviceExtensionProperties")
        if res == VK_SUCCESS:
            return {_cstr(e.extensionName) for e in exts[:count.value]}


if __name__ == "__main__":  # quick manual check: python -m pyvkgrad._vulkan_info
    for info in physical_devices():
        print(info)


def memory_types() -> list:
    """Per physical device, its memory types ((propertyFlags, heapIndex), ...) and heaps
    ((size in bytes, flags), ...), for diagnostics (benchmarks/investigations)."""
    def probe(lib, instance, version):
        get_mem2 = _proc(lib, instance, "vkGetPhysicalDeviceMemoryProperties2", None,
                         ctypes.c_void_p, ctypes.POINTER(VkPhysicalDeviceMemoryProperties2))
        out = []
        for h in _physical_device_handles(lib, instance):
            mem = VkPhysicalDeviceMemoryProperties2(sType=_ST_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2)
            get_mem2(h, ctypes.byref(mem))
            out.append({"types (flags, heap)": [(mem.memoryTypes[i].propertyFlags,
                                                 mem.memoryTypes[i].heapIndex)
                                                for i in range(mem.memoryTypeCount)],
                        "heaps (bytes, flags)": [(mem.memoryHeaps[i].size,
                                                  mem.memoryHeaps[i].flags)
                                                 for i in range(mem.memoryHeapCount)]})
        return out
    return _with_instance(probe)
