#!/usr/bin/env python3
"""Deliberately make a mistake through the runtime seam (pyvkgrad.runtime), so that tools/test can check the validation layer
reports it: proof that the layer and the checks the test suite relies on are live.

    validation_canary.py hazard    a read-after-write hazard: two dependent dispatches and no
                                   barrier (SYNC-HAZARD-READ-AFTER-WRITE), then a second Vulkan
                                   instance, which must not lose the report
    validation_canary.py atomics   the native float-atomic kernel on a Vulkan device created
                                   without VK_EXT_shader_atomic_float, where its
                                   AtomicFloat32AddEXT capability is illegal; the suite's clean
                                   run then also shows that pyvkgrad enables the feature
                                   wherever it uses that kernel

One mistake per process, each checked in its own log."""

import sys

import numpy as np

from pyvkgrad import _vulkan_info, kernels
from pyvkgrad.device import default_device
from pyvkgrad.runtime import Runtime


def hazard(dev):
    runtime = dev.runtime()
    a, b, c = (runtime.buffer(256, words=np.ones(64, dtype=np.uint32)) for _ in range(3))
    spirv = kernels.spirv("activation_relu_grad_packed")
    spec = kernels.specialization("activation_relu_grad_packed", {"WG": 64, "DATA_TYPE": 1})
    push = np.array(kernels.push_words("activation_relu_grad_packed",
                                       {"count": 16, "elements": 64, "first": 0}),
                    dtype=np.uint32)
    # Bindings x, dy, dx in that order (kernels.binding_order).
    first = runtime.program([a, b, c], spirv, 1, spec, len(push))  # writes c
    second = runtime.program([c, b, a], spirv, 1, spec, len(push))  # reads c: needs a barrier
    commands = runtime.commands()
    commands.upload([a, b, c])
    commands.dispatch(first, push)
    commands.dispatch(second, push)
    commands.submit("hazard canary")
    # A second Vulkan instance after the report: the layer reopens its log for it, and the
    # report above must survive that (tools/test collects the log through a FIFO).
    _vulkan_info.physical_devices()
    print("validation canary: recorded a read-after-write hazard on purpose")


def atomics(dev):
    bare = Runtime(dev.index, extensions=())  # no extension, so no float atomics
    t = [bare.buffer(256) for _ in range(3)]
    spec = kernels.specialization("resample_grad_atomic_native", dict(
        WG=64, IS_F16=False, IS_LINEAR=False, IDENTITY=(False,) * 4, DY_SIZES=(0,) * 4,
        DY_STRIDES=(0,) * 4, ACCUMULATOR_STRIDES=(0,) * 4, FORWARD=(0,) * 4))
    push = np.array([0], dtype=np.uint32)  # count: no element, the pipeline is what matters
    native = bare.program(t, kernels.spirv("resample_grad_atomic_native"), 1, spec, 1)
    commands = bare.commands()
    commands.dispatch(native, push)
    commands.submit("atomics canary")
    print("validation canary: used float atomics without enabling them, on purpose")


if __name__ == "__main__":
    canaries = {"hazard": hazard, "atomics": atomics}
    if len(sys.argv) != 2 or sys.argv[1] not in canaries:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(canaries)}")
    canaries[sys.argv[1]](default_device())
