"""SLICE_GRAD's and LOCAL_RESPONSE_NORMALIZATION_GRAD's outputs on fixed random problems, as one
SHA-256 each: the same digests on every device and workgroup width are the same bits (the
H200 and lavapipe gave the same, benchmarks/RESULTS.md, 2026-11-27).

    python3 benchmarks/investigations/same_bits_slice_lrn.py      # PYVKGRAD_LOCAL_SIZE=64 too
"""
import hashlib

import numpy as np

import pyvkgrad
from pyvkgrad._cases_slice import slice_grad_values

rng = np.random.default_rng(1234)
digest = hashlib.sha256()
for dtype in (np.float32, np.float16, np.int8, np.uint16):
    dy = slice_grad_values(rng, (4, 33, 37), dtype)
    for window in (((4, 70, 80), (0, 2, 1), (4, 65, 73), (1, -2, 2)),
                   ((4, 40, 45), (0, 3, 5), (4, 33, 37), (1, 1, 1))):
        digest.update(pyvkgrad.slice_grad(dy, *window).tobytes())
print("slice", digest.hexdigest())
digest = hashlib.sha256()
for dtype in (np.float32, np.float16):
    for cross_channel, size, shape in ((True, 5, (4, 64, 14, 14)), (True, 4, (2, 31, 9, 9)),
                                       (False, 3, (2, 5, 17, 19))):
        x = rng.standard_normal(shape).astype(dtype) * 3
        dy = rng.standard_normal(shape).astype(dtype)
        for beta in (0.75, 0.5, 1.3):
            digest.update(pyvkgrad.local_response_normalization_grad(
                x, dy, cross_channel, size, 1e-2, beta, 2.0).tobytes())
print("lrn", digest.hexdigest())
