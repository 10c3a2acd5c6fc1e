#!/usr/bin/env python3
"""pyvkgrad benchmark: kernel time from Vulkan timestamps, GB/s, fraction of a copy roofline
measured in the same run, and PyTorch's time for the same operation on the same device.

    python -m pyvkgrad bench [--out DIR] [--ops NAMES] [--quick] [--repeat N]

--ops: operators of the table (pyvkgrad/operators.py) by name, or relu, resample, bn (both
BatchNorm grads); and the groups overhead, chain, roundtrip. Default: all of them.

Bytes are the minimum traffic of the operation (every input read once, every output written
once). The copy roofline is a device-to-device buffer copy (vkCmdCopyBuffer through kp), read
plus written, timed with timestamps the same way. PyTorch runs on CUDA when available (CUDA
events), else on the CPU (wall clock); the ratio is PyTorch time / pyvkgrad time (> 1: faster).
Also measured: host overhead per call (one-call function, compiled operator, recording replay)
and a recorded chain of three dependent operators against the sum of its parts.
Writes results.json and, when matplotlib is importable, results.png into --out.

This file is the command line, the orchestration and the report; the cases are in
bench_cases.py, the timing helpers (also used by investigations/) in bench_timing.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

# `python -m pyvkgrad bench` runs this file with runpy, which puts neither its folder nor the
# project root on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyvkgrad  # noqa: E402
from pyvkgrad import operators  # noqa: E402
from bench_cases import (ALIASES, GROUPS, benchmark_cases, chain, host_overhead,  # noqa: E402
                         roundtrip)
from bench_timing import (MiB, Torch, copy_roofline, progress,  # noqa: E402
                          same_bytes_roofline, same_bytes_write_roofline, vulkan_time)


# ---- results -----------------------------------------------------------------------------------

@dataclass
class Result:
    operator: str
    case: str
    dtype: str
    bytes: int
    vk_ns: float
    vk_gbps: float
    roofline_fraction: float
    torch_ns: float = None
    torch_gbps: float = None
    speedup_vs_torch: float = None
    extra: dict = field(default_factory=dict)


# ---- one case ---------------------------------------------------------------------------------

def run_case(dev, T, entry, repeat, seed):
    """Time one catalogue entry on the device and in PyTorch; None when it cannot run."""
    name, case, dt, build = entry
    try:
        # A fifth value, "write", marks a kernel that only writes: its roofline is a fill.
        op, tensors, nbytes, torch_fn, *kind = build(dev, np.random.default_rng(seed))
    except (ValueError, NotImplementedError) as e:
        progress(f"    skipped: {e}")
        return None
    ns, _ = vulkan_time(dev, op, tensors, repeat)
    write_only = kind == ["write"]
    size_roof = (same_bytes_write_roofline if write_only else same_bytes_roofline)(
        dev, T, nbytes, repeat)
    r = Result(name, case, dt, nbytes, ns, nbytes / ns, nbytes / ns / (size_roof / 1e9))
    r.extra["write_roofline_gbps_same_bytes" if write_only
            else "copy_roofline_gbps_same_bytes"] = size_roof / 1e9
    if T.torch and torch_fn is not None:
        try:
            tns = T.time_ns(torch_fn(T), repeat)
            r.torch_ns, r.torch_gbps, r.speedup_vs_torch = tns, nbytes / tns, tns / ns
        except Exception as e:  # an op PyTorch lacks for this dtype on this device
            r.extra["torch_error"] = str(e).splitlines()[0][:120]
    for t in tensors.values():
        t.close()
    op.close()
    return r


def run_isolated(index, argv):
    """Run case `index` in a fresh process. Several large cases in one process were measured
    up to 2x slower after the first few on the H100 (both pyvkgrad and PyTorch), so each case
    gets a clean driver and allocator state."""
    import subprocess
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--isolate"]
    res = subprocess.run([sys.executable, __file__, *args, "--case", str(index)],
                         capture_output=True, text=True)
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            data = json.loads(line[len("RESULT "):])
            return Result(**data) if data else None
    progress(f"    failed: {(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    return None


# ---- main --------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--ops", default=",".join([r.name for r in operators.OPERATORS] + list(GROUPS)),
                    help="operators of pyvkgrad/operators.py by name, or relu, resample, bn; "
                         "and the groups " + ", ".join(GROUPS))
    ap.add_argument("--quick", action="store_true", help="small shapes (default on a CPU device)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--isolate", action="store_true",
                    help="run every case in its own process (recommended on a GPU)")
    ap.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    dev = pyvkgrad.get_device(args.device)
    quick = args.quick or dev.info.device_type == "cpu"
    repeat = args.repeat if not quick else min(args.repeat, 5)
    T = Torch() if not args.no_torch else Torch.__new__(Torch)
    if args.no_torch:
        T.torch = None
    ops = [name for op in args.ops.split(",") for name in ALIASES.get(op, [op])]
    unknown = set(ops) - set(operators.BY_NAME) - set(GROUPS)
    if unknown:
        ap.error(f"--ops: unknown {sorted(unknown)}; known: "
                 f"{', '.join(list(operators.BY_NAME) + list(ALIASES) + list(GROUPS))}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.case is None:
        progress(f"device: {dev.name} ({dev.info.driver_name} {dev.info.driver_info}); "
                 f"PyTorch: {T.torch.__version__ + ' on ' + T.device if T.torch else 'not available'}")

    roof_bytes = min(64 * MiB if quick else 1024 * MiB, dev.info.max_storage_buffer_range // 2)
    roof = torch_roof = None
    roof_by_method = {}
    if args.case is None:
        roof = copy_roofline(dev, roof_bytes, repeat, roof_by_method)
        torch_roof = T.copy_roofline(roof_bytes, repeat) if T.torch else None
    if roof:
        progress(f"copy roofline ({roof_bytes // MiB} MiB): Vulkan {roof / 1e9:.0f} GB/s ("
                 + ", ".join(f"{m} {r / 1e9:.1f}" for m, r in roof_by_method.items()) + ")"
                 + (f", PyTorch {torch_roof / 1e9:.0f} GB/s" if torch_roof else ""))

    catalogue = []
    for record in operators.OPERATORS:  # the table's order
        if record.name in ops:
            catalogue += list(benchmark_cases(record)(quick))
    if args.case is not None:  # a child of --isolate: one case, one JSON line
        r = run_case(dev, T, catalogue[args.case], repeat, args.case)
        print("RESULT " + json.dumps(asdict(r) if r else None), flush=True)
        return 0
    results = []
    for i, entry in enumerate(catalogue):
        name, case, dt, _ = entry
        progress(f"[{i + 1}/{len(catalogue)}] {name} {case} {dt}")
        if args.isolate:
            r = run_isolated(i, argv)
        else:
            r = run_case(dev, T, entry, repeat, i)
        if r is None:
            continue
        results.append(r)
        progress(f"    {r.vk_ns / 1e3:9.1f} us  {r.vk_gbps:7.1f} GB/s  "
                 f"{100 * r.roofline_fraction:5.1f}% of "
                 f"{'fill' if 'write_roofline_gbps_same_bytes' in r.extra else 'copy'}"
                 + (f"   torch {r.torch_ns / 1e3:9.1f} us  x{r.speedup_vs_torch:.2f}"
                    if r.torch_ns else ""))
    extra = {}
    if "overhead" in ops:
        progress("host overhead")
        extra["host_overhead"] = host_overhead(dev, 200 if not quick else 50)
        progress(f"    {extra['host_overhead']}")
    if "roundtrip" in ops:
        progress("numpy round trips")
        extra["roundtrip"] = roundtrip(dev, T, quick, 50 if not quick else 10)
    if "chain" in ops:
        progress("recorded chain")
        try:
            extra["chain"] = chain(dev, quick, repeat)
            progress(f"    {extra['chain']}")
        except (NotImplementedError, ValueError) as e:
            progress(f"    skipped: {e}")

    print_table(dev, roof, torch_roof, results)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": dev.name,
              "driver": f"{dev.info.driver_name} {dev.info.driver_info}",
              "torch": (f"{T.torch.__version__} ({T.device}: {T.name})" if T.torch else None),
              "command": " ".join(["python -m pyvkgrad bench", *(argv or sys.argv[1:])]),
              "copy_roofline_gbps": roof / 1e9,
              "torch_copy_roofline_gbps": torch_roof / 1e9 if torch_roof else None,
              "copy_roofline_by_method_gbps": {m: r / 1e9 for m, r in roof_by_method.items()},
              "results": [asdict(r) for r in results], **extra}
    (out / "results.json").write_text(json.dumps(report, indent=2))
    plot(results, max(roof, torch_roof or 0), out / "results.png")
    progress(f"wrote {out / 'results.json'}")
    return 0


def print_table(dev, roof, torch_roof, results):
    print(f"\n{dev.name}: copy roofline {roof / 1e9:.0f} GB/s (Vulkan)"
          + (f", {torch_roof / 1e9:.0f} GB/s (PyTorch)" if torch_roof else "")
          + "; %copy compares with the best copy of the same bytes, measured in this run")
    head = (f"{'operator':<34}{'case':<50}{'dtype':<8}{'pyvkgrad us':>12}{'GB/s':>8}"
            f"{'%copy':>7}{'torch us':>11}{'x torch':>9}")
    print(head)
    print("-" * len(head))
    for r in results:
        t = (f"{r.torch_ns / 1e3:>11.1f}{r.speedup_vs_torch:>9.2f}" if r.torch_ns
             else f"{'-':>11}{'-':>9}")
        print(f"{r.operator:<34}{r.case[:49]:<50}{r.dtype:<8}{r.vk_ns / 1e3:>12.1f}"
              f"{r.vk_gbps:>8.0f}{100 * r.roofline_fraction:>7.1f}{t}")


def plot(results, roof, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress("matplotlib not importable: no plot")
        return
    labels = [f"{r.operator.replace('BATCH_NORMALIZATION', 'BN')}\n{r.case[:40]} {r.dtype}"
              for r in results]
    y = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(11, 0.35 * len(results) + 1.5))
    ax.barh(y - 0.2, [r.vk_gbps for r in results], 0.4, label="pyvkgrad (Vulkan)")
    ax.barh(y + 0.2, [r.torch_gbps or 0 for r in results], 0.4, label="PyTorch")
    ax.axvline(roof / 1e9, color="k", ls="--", label="copy roofline (best of Vulkan, PyTorch)")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (minimum bytes read + written / kernel time)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    progress(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
