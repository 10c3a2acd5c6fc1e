#!/usr/bin/env python3
"""Every field of each Vulkan device's VkPhysicalDeviceFloatControlsProperties (shader float
controls: which rounding modes, subnormal and signed-zero/Inf/NaN behaviours a kernel may ask
for, per width), as pyvkgrad's device query reads them. pyvkgrad keeps only some of them
(PhysicalDeviceInfo); this prints the rest, e.g. whether a device could keep float16
subnormals and signed zeros under RoundingModeRTE.

    python3 benchmarks/investigations/float_controls.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from pyvkgrad import _vulkan_info as vi  # noqa: E402

read = []


class Recorded(vi.VkPhysicalDeviceFloatControlsProperties):
    """The struct, each instance kept so that its fields can be printed after the query."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        read.append(self)


vi.VkPhysicalDeviceFloatControlsProperties = Recorded
for info, controls in zip(vi.physical_devices(), read):
    print(f"{info.index}: {info.name} ({info.driver_name} {info.driver_info})")
    for name, _ in controls._fields_:
        if name not in ("sType", "pNext"):
            print(f"    {name} = {getattr(controls, name)}")
