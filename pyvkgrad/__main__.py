"""Command line: `python -m pyvkgrad [--version] info | demo | bench [args] | fingerprint [args]`."""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import runpy
import sys
from pathlib import Path
from typing import Optional, Sequence

from . import __version__, _vulkan_info


def versions() -> int:
    """Print pyvkgrad's, the runtime's, numpy's and Python's versions, and whether pyvkgrad's
    fast runtime is in use; 1 when the runtime cannot be loaded (the reason is printed)."""
    import numpy

    print(f"pyvkgrad {__version__} ({Path(__file__).resolve().parent})")
    status = 0
    try:
        from .runtime import kp
    except ImportError as e:
        print(f"runtime: cannot be loaded: {e}")
        status = 1
    else:
        # runtime.py refuses a runtime without pyvkgrad's patch, so a loaded one is the fast one.
        print(f"runtime: kp 0.9.0 with pyvkgrad's patch, level {kp.pyvkgrad_patch} "
              f"({Path(kp.__file__).name})")
        print("fast runtime: yes (compute barriers, one polled fence per sequence, native "
              "float atomics where the device has them)")
    print(f"numpy {numpy.__version__}")
    print(f"Python {platform.python_version()} ({sys.executable})")
    return status


def info() -> int:
    """Print the versions, then every Vulkan device pyvkgrad sees and which one is the default,
    and the operators; without a usable Vulkan, one line saying what is missing (the loader, a
    driver or a device), and 1."""
    if versions():
        return 1
    from . import operators
    from .device import DeviceError, default_device, devices

    try:
        found = devices()
        default = default_device()  # with no device, raises with the lavapipe hint
    except DeviceError as e:  # one line: what is missing (the loader, a driver or a device)
        print(f"vulkan: {e}")
        return 1
    except ValueError as e:  # PYVKGRAD_DEVICE names no device (the message says so)
        print(e)
        return 1
    for d in found:
        i = d.info
        mark = "  (default)" if d is default else ""
        print(f"device {i.index}: {i.name}{mark}")
        rows = [
            ("vendor", f"{i.vendor} (0x{i.vendor_id:04x}), {i.device_type}"),
            ("driver", f"{i.driver_name} {i.driver_info}".strip() or str(i.driver_version)),
            ("vulkan", i.api_version),
            ("subgroup size", i.subgroup_size),
            ("subgroup operations", _subgroup_operations(i)),
            ("max storage buffer range", f"{i.max_storage_buffer_range} bytes "
                                         f"({i.max_storage_buffer_range / 2**20:.0f} MiB)"),
            ("storage buffers a shader", i.max_per_stage_descriptor_storage_buffers),
            ("max workgroup count", i.max_compute_work_group_count),
            ("max workgroup size", f"{i.max_compute_work_group_size}, "
                                   f"{i.max_compute_work_group_invocations} invocations"),
            ("shared memory", f"{i.max_compute_shared_memory_size} bytes"),
            ("timestamps", f"{i.timestamp_compute_and_graphics}, {i.timestamp_period} ns/tick"),
            ("float atomic add", _float_atomics(d)),
            ("float16 rounding", _float16_rounding(d)),
            ("loop limit", f"{d.max_loop_iterations} iterations per invocation"
                           if d.max_loop_iterations else "none"),
            ("submission wait", _wait_policy(d)),
            ("same bits", _same_bits(i)),
        ]
        for key, value in rows:
            print(f"  {key:<26}{value}")
    print("operators:")
    for record in operators.OPERATORS:
        signature = inspect.signature(record.function).replace(
            return_annotation=inspect.Signature.empty)
        print(f"  pyvkgrad.{record.name}{signature}")
        print(f"      DML_OPERATOR_{record.OPERATOR}, {record.descriptor.__name__}, "
              f"{', '.join(d.__name__ for d in record.dtypes)}, {record.min_rank} to "
              f"{record.max_rank} dimensions; a one-call problem beyond the buffer limit is "
              f"cut along {record.independent_axes}")
    return 0


def _same_bits(info) -> str:
    """What the same-bits contract (docs/semantics.md §17) needs of a device: nothing beyond
    conforming Vulkan 1.1; where it may differ: subnormal intermediates (but in
    ADAM_OPTIMIZER, which keeps them by integer arithmetic) and zero signs, which float controls
    could pin where a device offers them (pyvkgrad's kernels do not request them)."""
    def can(flag: bool) -> str:
        return "available" if flag else "not available"
    return (f"yes, for the operators of docs/semantics.md §17 (a conforming Vulkan 1.1 device "
            f"is all they need); float controls other than float16 rounding, not requested: "
            f"subnormal preservation {can(info.denorm_preserve_float32)}, signed zero/Inf/NaN "
            f"preservation {can(info.signed_zero_inf_nan_preserve_float32)}")


def _subgroup_operations(info) -> str:
    names = ", ".join(_vulkan_info.subgroup_feature_names(info.subgroup_operations)) or "none"
    compute = info.subgroup_stages & _vulkan_info.SHADER_STAGE_COMPUTE
    return f"{names} ({'in' if compute else 'not in'} compute shaders)"


def _float16_rounding(device) -> str:
    if device.limits.float16_rte:
        return ("to nearest even by the device (OpFConvert under RoundingModeRTE for 16 bits: "
                "the kernels' rte16 SPIR-V; " + ", ".join(_vulkan_info.RTE16_EXTENSIONS)
                + " enabled)")
    if not device.info.rounding_mode_rte_float16:
        return ("to nearest even by integer arithmetic (the device has no "
                "shaderRoundingModeRTEFloat16)")
    return "to nearest even by integer arithmetic (PYVKGRAD_FLOAT16_RTE=0)"


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


def bench(args: Sequence[str]) -> int:
    """benchmarks/run.py with `args`. The benchmarks ship with the source repository, not with
    the package: they are looked for next to the package (a checkout) and in the current
    directory."""
    here = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"
    for script in (here, Path.cwd() / "benchmarks" / "run.py"):
        if script.is_file():
            sys.argv = [str(script), *args]
            runpy.run_path(str(script), run_name="__main__")
            return 0
    print("python -m pyvkgrad bench needs pyvkgrad's source repository: the benchmarks "
          "(benchmarks/run.py) are not part of the installed package. Run it from the "
          "repository's root directory.", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pyvkgrad", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pyvkgrad {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the versions, the Vulkan devices and their limits, "
                                "and the operators")
    demo_p = sub.add_parser("demo", help="run every operator against the float64 oracle")
    demo_p.add_argument("--device", default=None, help="index or part of a device name")
    sub.add_parser("fingerprint", add_help=False,
                   help="sha256 of every operator's outputs on fixed cases: the same bits as "
                        "another device? (fingerprint --help)")
    sub.add_parser("bench", add_help=False,
                   help="benchmarks (benchmarks/run.py of the repository; arguments pass "
                        "through: bench --help lists them)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # everything after `bench` belongs to benchmarks/run.py
        return bench(argv[1:])
    if argv[:1] == ["fingerprint"]:
        from .fingerprint import main as fingerprint
        return fingerprint(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)  # anything unknown is an error
    if args.command == "info":
        return info()
    from .demo import run
    from .device import get_device
    try:
        device = get_device(args.device)  # a device that is not there: one line and 2
    except ValueError as e:
        parser.error(f"demo --device: {e}" if args.device is not None else str(e))
    return run(device)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m pyvkgrad info | head`: the reader left; not an error
        # Python flushes stdout again at exit; point it at /dev/null so that is silent.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
