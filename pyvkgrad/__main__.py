"""Command line: `python -m pyvkgrad info | demo | bench [args]`."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def info() -> int:
    """Print every Vulkan device pyvkgrad sees, and which one is the default."""
    from .device import default_device, devices

    found = devices()
    if not found:
        default_device()  # raises with the lavapipe hint
    default = default_device()
    for d in found:
        i = d.info
        mark = "  (default)" if d is default else ""
        print(f"device {i.index}: {i.name}{mark}")
        rows = [
            ("vendor", f"{i.vendor} (0x{i.vendor_id:04x}), {i.device_type}"),
            ("driver", f"{i.driver_name} {i.driver_info}".strip() or str(i.driver_version)),
            ("vulkan", i.api_version),
            ("subgroup size", i.subgroup_size),
            ("max storage buffer range", f"{i.max_storage_buffer_range} bytes "
                                         f"({i.max_storage_buffer_range / 2**20:.0f} MiB)"),
            ("max workgroup count", i.max_compute_work_group_count),
            ("max workgroup size", f"{i.max_compute_work_group_size}, "
                                   f"{i.max_compute_work_group_invocations} invocations"),
            ("shared memory", f"{i.max_compute_shared_memory_size} bytes"),
            ("timestamps", f"{i.timestamp_compute_and_graphics}, {i.timestamp_period} ns/tick"),
            ("float atomic add", _float_atomics(d)),
            ("loop limit", f"{d.max_loop_iterations} iterations per invocation"
                           if d.max_loop_iterations else "none"),
            ("submission wait", _wait_policy(d)),
        ]
        for key, value in rows:
            print(f"  {key:<26}{value}")
    return 0


def _float_atomics(device) -> str:
    if device.float_atomic_add:
        return "native (VK_EXT_shader_atomic_float, enabled by pyvkgrad's kp patch)"
    if not device.info.shader_buffer_float32_atomic_add:
        return "compare-and-swap (the device has no shaderBufferFloat32AtomicAdd)"
    return "compare-and-swap (PYVKGRAD_FLOAT_ATOMICS=0)"


def _wait_policy(device) -> str:
    spin = device.wait_spin_us
    return (f"polls the fence up to {spin} us, then blocks (PYVKGRAD_WAIT_SPIN_US)" if spin
            else "blocks at once (PYVKGRAD_WAIT_SPIN_US=0 or a CPU device)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyvkgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the Vulkan devices and their limits")
    demo_p = sub.add_parser("demo", help="run every operator against the float64 oracle")
    demo_p.add_argument("--device", default=None, help="index or part of a device name")
    sub.add_parser("bench", help="benchmarks (benchmarks/run.py; arguments pass through)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "info":
        return info()
    if args.command == "demo":
        from .demo import run
        return run(args.device)
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
    if not bench.exists():
        print("benchmarks/ ships with the source tree, not the package", file=sys.stderr)
        return 1
    sys.argv = [str(bench), *rest]
    runpy.run_path(str(bench), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
