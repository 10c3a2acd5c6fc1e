#!/usr/bin/env python3
"""What the driver made of each kernel: VK_KHR_pipeline_executable_properties' statistics
(NVIDIA reports the registers per invocation, which bound how many invocations an SM holds
and so how many loads are in flight) for the pipelines of the benchmark's cases, specialised
as the plan specialises them on this device, and for text-patched variants of a kernel.

    python3 benchmarks/investigations/pipeline_stats.py [--ops avg,max,...] [--quick]
        [--spirv DIR] [--ir DIR] [--out FILE]

--ops: bench_cases' benchmark_cases of these operators (table names, or the aliases of
`python -m pyvkgrad bench`); --spirv DIR: also every DIR/<kernel>/<variant>.spv (an
ablation's `--build DIR`) under each dispatch's specialization; --ir DIR: write the driver's
internal representations, where it gives any, under DIR.

The pipelines are made on a VkDevice of our own (ctypes), the same SPIR-V (the rte16 one where
the operator runs it), the same specialization words and push-constant size as the runtime's
(kp: SpecIds 0, 1, ... in order, bindings 0..n-1 storage buffers, set 0).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from ctypes import (POINTER, Structure, byref, c_char, c_char_p, c_float, c_int32, c_size_t,
                    c_uint32, c_uint64, c_void_p)
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad import _vulkan_info as vi, kernels, operators  # noqa: E402
from pyvkgrad._vulkan_structs import (VkPhysicalDeviceShaderAtomicFloatFeaturesEXT,  # noqa: E402
                                      VkPhysicalDeviceShaderFloat16Int8Features)
import bench_cases  # noqa: E402

EXTENSION = "VK_KHR_pipeline_executable_properties"
ATOMIC_FLOAT = "VK_EXT_shader_atomic_float"
CAPTURE_STATISTICS, CAPTURE_INTERNAL = 0x40, 0x80
STORAGE_BUFFER, COMPUTE = 7, 0x20


class QueueInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32),
                ("queueFamilyIndex", c_uint32), ("queueCount", c_uint32),
                ("pQueuePriorities", POINTER(c_float))]


class DeviceInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32),
                ("queueCreateInfoCount", c_uint32), ("pQueueCreateInfos", POINTER(QueueInfo)),
                ("enabledLayerCount", c_uint32), ("ppEnabledLayerNames", c_void_p),
                ("enabledExtensionCount", c_uint32), ("ppEnabledExtensionNames", POINTER(c_char_p)),
                ("pEnabledFeatures", c_void_p)]


class ExecutableFeatures(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("pipelineExecutableInfo", c_uint32)]


class ModuleInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32),
                ("codeSize", c_size_t), ("pCode", c_void_p)]


class SetBinding(Structure):
    _fields_ = [("binding", c_uint32), ("descriptorType", c_int32), ("descriptorCount", c_uint32),
                ("stageFlags", c_uint32), ("pImmutableSamplers", c_void_p)]


class SetLayoutInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32),
                ("bindingCount", c_uint32), ("pBindings", POINTER(SetBinding))]


class PushRange(Structure):
    _fields_ = [("stageFlags", c_uint32), ("offset", c_uint32), ("size", c_uint32)]


class LayoutInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32),
                ("setLayoutCount", c_uint32), ("pSetLayouts", POINTER(c_void_p)),
                ("pushConstantRangeCount", c_uint32), ("pPushConstantRanges", POINTER(PushRange))]


class MapEntry(Structure):
    _fields_ = [("constantID", c_uint32), ("offset", c_uint32), ("size", c_size_t)]


class SpecInfo(Structure):
    _fields_ = [("mapEntryCount", c_uint32), ("pMapEntries", POINTER(MapEntry)),
                ("dataSize", c_size_t), ("pData", c_void_p)]


class StageInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32), ("stage", c_uint32),
                ("module", c_void_p), ("pName", c_char_p),
                ("pSpecializationInfo", POINTER(SpecInfo))]


class ComputeInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("flags", c_uint32), ("stage", StageInfo),
                ("layout", c_void_p), ("basePipelineHandle", c_void_p),
                ("basePipelineIndex", c_int32)]


class PipelineInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("pipeline", c_void_p)]


class ExecutableProperties(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("stages", c_uint32),
                ("name", c_char * 256), ("description", c_char * 256), ("subgroupSize", c_uint32)]


class ExecutableInfo(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("pipeline", c_void_p),
                ("executableIndex", c_uint32)]


class Statistic(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("name", c_char * 256),
                ("description", c_char * 256), ("format", c_int32), ("value", c_uint64)]


class Representation(Structure):
    _fields_ = [("sType", c_int32), ("pNext", c_void_p), ("name", c_char * 256),
                ("description", c_char * 256), ("isText", c_uint32), ("dataSize", c_size_t),
                ("pData", c_void_p)]


ST = dict(queue=2, device=3, module=16, stage=18, compute=29, layout=30, set_layout=32,
          features=1000269000, pipeline_info=1000269001, properties=1000269002,
          executable_info=1000269003, statistic=1000269004, representation=1000269005,
          float16=1000082000, atomic_float=1000260000)


def statistic_value(s: Statistic):
    raw = ctypes.c_uint64(s.value)
    if s.format == 0:
        return bool(raw.value & 0xFFFFFFFF)
    if s.format == 1:
        return ctypes.c_int64(raw.value).value
    if s.format == 3:
        return ctypes.cast(ctypes.pointer(raw), POINTER(ctypes.c_double)).contents.value
    return raw.value


class Driver:
    """A VkDevice of our own on physical device `index`, with the extension where offered."""

    def __init__(self, lib, instance, index: int, rte16: bool):
        self.lib, self.instance = lib, instance
        phys = vi._physical_device_handles(lib, instance)[index]
        enum_exts = vi._proc(lib, instance, "vkEnumerateDeviceExtensionProperties", vi._VkResult,
                             c_void_p, c_char_p, POINTER(c_uint32),
                             POINTER(vi.VkExtensionProperties))
        offered = vi._device_extensions(enum_exts, phys)
        self.capture = EXTENSION in offered
        names = [EXTENSION] if self.capture else []
        chain = None
        self._keep = []
        if self.capture:
            feats = ExecutableFeatures(sType=ST["features"], pipelineExecutableInfo=1)
            self._keep.append(feats)
            chain = ctypes.addressof(feats)
        if ATOMIC_FLOAT in offered:  # as the runtime enables it (ResampleGrad's atomic kernel)
            names.append(ATOMIC_FLOAT)
            atomic = VkPhysicalDeviceShaderAtomicFloatFeaturesEXT(
                sType=ST["atomic_float"], shaderBufferFloat32AtomicAdd=1, pNext=chain)
            self._keep.append(atomic)
            chain = ctypes.addressof(atomic)
        if rte16 and all(e in offered for e in vi.RTE16_EXTENSIONS):
            names += list(vi.RTE16_EXTENSIONS)
            f16 = VkPhysicalDeviceShaderFloat16Int8Features(sType=ST["float16"], shaderFloat16=1,
                                                            pNext=chain)
            self._keep.append(f16)
            chain = ctypes.addressof(f16)
        priority = c_float(1.0)
        queue = QueueInfo(sType=ST["queue"], queueFamilyIndex=0, queueCount=1,
                          pQueuePriorities=ctypes.pointer(priority))
        ext_array = (c_char_p * max(1, len(names)))(*[n.encode() for n in names])
        info = DeviceInfo(sType=ST["device"], pNext=chain, queueCreateInfoCount=1,
                          pQueueCreateInfos=ctypes.pointer(queue),
                          enabledExtensionCount=len(names), ppEnabledExtensionNames=ext_array)
        create = vi._proc(lib, instance, "vkCreateDevice", vi._VkResult, c_void_p,
                          POINTER(DeviceInfo), c_void_p, POINTER(c_void_p))
        self.device = c_void_p()
        vi._check(create(phys, byref(info), None, byref(self.device)), "vkCreateDevice")
        lib.vkGetDeviceProcAddr.restype = c_void_p
        lib.vkGetDeviceProcAddr.argtypes = [c_void_p, c_char_p]

    def destroy(self, name, handle):
        """vkDestroy<name>(device, handle, NULL): a handle the device made."""
        addr = self.lib.vkGetDeviceProcAddr(self.device, name.encode())
        ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_void_p)(addr)(self.device, handle, None)

    def fn(self, name, *argtypes):
        addr = self.lib.vkGetDeviceProcAddr(self.device, name.encode())
        if not addr:
            raise RuntimeError(f"no {name}")
        return ctypes.CFUNCTYPE(vi._VkResult, *argtypes)(addr)

    def stats(self, spirv: bytes, specialization: np.ndarray, bindings: int, push_words: int,
              ir_prefix=None):
        """{statistic name: value} of each executable of a compute pipeline made of `spirv`."""
        dev = self.device
        code = ctypes.create_string_buffer(spirv, len(spirv))
        module, set_layout, layout, pipeline = c_void_p(), c_void_p(), c_void_p(), c_void_p()
        try:
            vi._check(self.fn("vkCreateShaderModule", c_void_p, POINTER(ModuleInfo), c_void_p,
                              POINTER(c_void_p))(
                dev, byref(ModuleInfo(sType=ST["module"], codeSize=len(spirv),
                                      pCode=ctypes.addressof(code))), None, byref(module)),
                "vkCreateShaderModule")
            binds = (SetBinding * bindings)(*[SetBinding(i, STORAGE_BUFFER, 1, COMPUTE, None)
                                              for i in range(bindings)])
            vi._check(self.fn("vkCreateDescriptorSetLayout", c_void_p, POINTER(SetLayoutInfo),
                              c_void_p, POINTER(c_void_p))(
                dev, byref(SetLayoutInfo(sType=ST["set_layout"], bindingCount=bindings,
                                         pBindings=binds)), None, byref(set_layout)),
                "vkCreateDescriptorSetLayout")
            push = PushRange(COMPUTE, 0, 4 * max(1, push_words))
            vi._check(self.fn("vkCreatePipelineLayout", c_void_p, POINTER(LayoutInfo), c_void_p,
                              POINTER(c_void_p))(
                dev, byref(LayoutInfo(sType=ST["layout"], setLayoutCount=1,
                                      pSetLayouts=ctypes.pointer(set_layout),
                                      pushConstantRangeCount=1,
                                      pPushConstantRanges=ctypes.pointer(push))),
                None, byref(layout)), "vkCreatePipelineLayout")
            words = np.ascontiguousarray(specialization, dtype=np.uint32)
            entries = (MapEntry * len(words))(*[MapEntry(i, 4 * i, 4) for i in range(len(words))])
            spec = SpecInfo(len(words), entries, words.nbytes, words.ctypes.data)
            flags = ((CAPTURE_STATISTICS | (CAPTURE_INTERNAL if ir_prefix else 0))
                     if self.capture else 0)
            info = ComputeInfo(sType=ST["compute"], flags=flags,
                               stage=StageInfo(sType=ST["stage"], stage=COMPUTE, module=module,
                                               pName=b"main",
                                               pSpecializationInfo=ctypes.pointer(spec)),
                               layout=layout, basePipelineIndex=-1)
            vi._check(self.fn("vkCreateComputePipelines", c_void_p, c_void_p, c_uint32,
                              POINTER(ComputeInfo), c_void_p, POINTER(c_void_p))(
                                  dev, None, 1, byref(info), None, byref(pipeline)),
                      "vkCreateComputePipelines")
            return self._executables(pipeline, ir_prefix) if self.capture else []
        finally:  # what was made, in reverse (a null handle is ignored)
            for name, handle in (("vkDestroyPipeline", pipeline),
                                 ("vkDestroyPipelineLayout", layout),
                                 ("vkDestroyDescriptorSetLayout", set_layout),
                                 ("vkDestroyShaderModule", module)):
                if handle.value:
                    self.destroy(name, handle)

    def _executables(self, pipeline, ir_prefix):
        get_props = self.fn("vkGetPipelineExecutablePropertiesKHR", c_void_p,
                            POINTER(PipelineInfo), POINTER(c_uint32),
                            POINTER(ExecutableProperties))
        get_stats = self.fn("vkGetPipelineExecutableStatisticsKHR", c_void_p,
                            POINTER(ExecutableInfo), POINTER(c_uint32), POINTER(Statistic))
        get_ir = self.fn("vkGetPipelineExecutableInternalRepresentationsKHR", c_void_p,
                         POINTER(ExecutableInfo), POINTER(c_uint32), POINTER(Representation))
        props = self.listed(get_props, PipelineInfo(sType=ST["pipeline_info"], pipeline=pipeline),
                            ExecutableProperties, ST["properties"])
        out = []
        for i, p in enumerate(props):
            einfo = ExecutableInfo(sType=ST["executable_info"], pipeline=pipeline,
                                   executableIndex=i)
            stats = self.listed(get_stats, einfo, Statistic, ST["statistic"])
            row = dict(executable=p.name.decode(errors="replace"),
                       subgroup_size=p.subgroupSize,
                       statistics={s.name.decode(errors="replace"): statistic_value(s)
                                   for s in stats})
            if ir_prefix:
                row["ir"] = self._ir(get_ir, einfo, f"{ir_prefix}.{i}")
            out.append(row)
        return out

    def _ir(self, get_ir, einfo, prefix):
        reps = self.listed(get_ir, einfo, Representation, ST["representation"])  # sizes
        buffers = [ctypes.create_string_buffer(r.dataSize) for r in reps]
        for r, b in zip(reps, buffers):
            r.pData = ctypes.addressof(b)
        n = c_uint32(len(reps))
        vi._check(get_ir(self.device, byref(einfo), byref(n), reps), "the internal representations")
        files = []
        for j, (r, b) in enumerate(zip(reps, buffers)):
            path = Path(f"{prefix}.{j}.{'txt' if r.isText else 'bin'}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b.raw[:r.dataSize])
            files.append(dict(name=r.name.decode(errors="replace"), file=str(path),
                              bytes=r.dataSize))
        return files

    def close(self):
        addr = self.lib.vkGetDeviceProcAddr(self.device, b"vkDestroyDevice")
        ctypes.CFUNCTYPE(None, c_void_p, c_void_p)(addr)(self.device, None)

    def listed(self, get, info, struct, s_type):
        """Vulkan's two-call enumeration: get(device, info, &count, NULL), then the array of
        `struct` (each with sType `s_type`) filled."""
        n = c_uint32()
        vi._check(get(self.device, byref(info), byref(n), None), "a pipeline executable query")
        items = (struct * n.value)(*[struct(sType=s_type) for _ in range(n.value)])
        vi._check(get(self.device, byref(info), byref(n), items), "a pipeline executable query")
        return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="average_pooling_grad,max_pooling_grad")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--spirv", metavar="DIR")
    ap.add_argument("--ir", metavar="DIR")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = pyvkgrad.default_device()
    wanted = []
    for name in args.ops.split(","):
        wanted += bench_cases.ALIASES.get(name, [{"avg": "average_pooling_grad",
                                                   "max": "max_pooling_grad"}.get(name, name)])
    records = {r.name: r for r in operators.OPERATORS}
    rows = []
    lib = vi.loader()

    def probe(lib, instance, version):
        drivers = {}
        try:
            for name in wanted:
                for operator, label, dt, build in bench_cases.benchmark_cases(records[name])(
                        args.quick):
                    op, tensors = build(dev, np.random.default_rng(1))[:2]  # (op, tensors, ...)
                    try:
                        rte16 = op.float16_rte
                        driver = drivers.get(rte16)
                        if driver is None:
                            driver = drivers[rte16] = Driver(lib, instance, dev.index, rte16)
                            if not driver.capture:
                                print(f"{dev.name}: no {EXTENSION}: pipelines made, no statistics")
                        for i, d in enumerate(op.plan.dispatches):
                            iface = kernels.interface(d.kernel)
                            spec = kernels.specialization(d.kernel, d.constants)  # the runtime's
                            variants = {"shipped": kernels.spirv(d.kernel, rte16)}
                            folder = Path(args.spirv or "/nonexistent") / d.kernel
                            if folder.is_dir():
                                variants.update({p.stem: p.read_bytes()
                                                 for p in sorted(folder.glob("*.spv"))})
                            for variant, data in variants.items():
                                prefix = (f"{args.ir}/{d.kernel}.{variant}.{dt}.{i}"
                                          if args.ir else None)
                                ex = driver.stats(data, spec, len(iface.bindings),
                                                  len(d.push_constants), prefix)
                                row = dict(operator=operator, case=label, dtype=dt, dispatch=i,
                                           kernel=d.kernel, variant=variant, rte16=rte16,
                                           workgroups=d.workgroups, executables=ex)
                                rows.append(row)
                                brief = "; ".join(", ".join(
                                    [f"subgroup_size={e['subgroup_size']}"]
                                    + [f"{k}={v}" for k, v in e["statistics"].items()]) for e in ex)
                                print(f"{operator} {label} {dt} #{i} {d.kernel} {variant}: "
                                      f"{brief or 'made'}", flush=True)
                    finally:
                        op.close()
                        del tensors
        finally:
            for driver in drivers.values():
                driver.close()

    vi._with_instance(probe)
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
