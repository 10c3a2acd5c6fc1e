#!/usr/bin/env python3
"""Whether the device's fma rounds once (fused) or twice (a multiply, then an add), as seen
through ResampleGrad's linear gather: one resampled axis of 4097 elements, so each dX element is
an fma chain h = fma(dY, w, h), compared with both emulations of tests/test_resample_grad.py.
Vulkan allows either; docs/semantics.md §6.15 says which devices do which.

    python3 benchmarks/investigations/fma_probe.py
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
import pyvkgrad  # noqa: E402
from pyvkgrad import DataType, TensorDesc  # noqa: E402
from test_resample_grad import documented_linear_sum, fma32, mul_add32  # noqa: E402

rng = np.random.default_rng(11)
n, m = 1537, 4097
dy = rng.standard_normal(m).astype(np.float32)
kw = dict(scales=(m / n,), input_pixel_offsets=(0.3,), output_pixel_offsets=(-0.2,))
desc = pyvkgrad.ResampleGradDesc(TensorDesc(DataType.FLOAT32, (m,)),
                                 TensorDesc(DataType.FLOAT32, (n,)), "linear", kw["scales"],
                                 kw["input_pixel_offsets"], kw["output_pixel_offsets"])
got = pyvkgrad.resample_grad(dy, (n,), interpolation_mode="linear", **kw)
fused, unfused = (documented_linear_sum(dy, desc, f) for f in (fma32, mul_add32))
print(f"{pyvkgrad.default_device().info.name}: {np.sum(got == fused)} of {n} elements equal "
      f"the single-rounding fma, {np.sum(got == unfused)} the multiply-then-add "
      f"(the two emulations differ in {np.sum(fused != unfused)})")
