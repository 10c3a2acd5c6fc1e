#!/usr/bin/env python3
"""Deliberately record a read-after-write hazard (two dependent dispatches, no barrier) with
raw kp, so that tools/test can check the validation layer reports it: proof that the layer
and its synchronization checks are live when the test suite runs under them."""

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
