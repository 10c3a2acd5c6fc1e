#!/usr/bin/env python3
"""Deliberately make two mistakes with raw kp, so that tools/test can check the validation
layer reports both: proof that the layer, its synchronization checks and its shader-capability
checks are live when the test suite runs under them.

1. A read-after-write hazard: two dependent dispatches, no barrier (SYNC-HAZARD-READ-AFTER-WRITE).
2. The native float-atomic kernel on a Vulkan device created without VK_EXT_shader_atomic_float
   (its AtomicFloat32AddEXT capability is then illegal). The test suite's clean run therefore
   also shows that pyvkgrad enables that feature wherever it uses the kernel."""

import numpy as np

from pyvkgrad import kernels
from pyvkgrad.device import default_device, kp

dev = default_device()
mgr = dev._manager()
words = np.ones(64, dtype=np.uint32)
a, b, c = (mgr.tensor_t(words.copy()) for _ in range(3))
spirv = kernels.spirv("activation_relu_grad_packed")
spec = np.array([64, 0], dtype=np.uint32)
push = np.array([16], dtype=np.uint32)
first = mgr.algorithm([a, b, c], spirv, [1, 1, 1], spec, push)  # writes c
second = mgr.algorithm([c, b, a], spirv, [1, 1, 1], spec, push)  # reads c: needs a barrier
seq = mgr.sequence()
seq.record(kp.OpTensorSyncDevice([a, b, c]))
seq.record(kp.OpAlgoDispatch(first, push))
seq.record(kp.OpAlgoDispatch(second, push))
seq.eval()
print("validation canary: recorded a read-after-write hazard on purpose")

bare = kp.Manager(dev.index, [], [])  # no extension, so no float atomics
t = [bare.tensor_t(np.zeros(64, dtype=np.uint32)) for _ in range(3)]
spec = np.array([64] + [0] * 22, dtype=np.uint32)
push = np.array([0], dtype=np.uint32)
native = bare.algorithm(t, kernels.spirv("resample_grad_atomic_native"), [1, 1, 1], spec, push)
seq = bare.sequence()
seq.record(kp.OpAlgoDispatch(native, push))
seq.eval()
print("validation canary: used float atomics without enabling them, on purpose")
