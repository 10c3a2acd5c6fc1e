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

Every figure is a median (kernel times over replays, wall times over calls each timed on its
own). pyvkgrad is timed in a process that has not imported torch (asserted); PyTorch's side
(its kernel times, its copy roofline, its round trips) runs afterwards in a process of its
own (--torch-side), which never opens the Vulkan device. With --isolate every case runs in a
fresh process, pyvkgrad's and PyTorch's each in their own. The wait strategy (the fence
polling budget, PYVKGRAD_WAIT_SPIN_US) is printed and stored. --ops iree adds IREE as a peer
(bench_iree.py), where iree.runtime is importable.

This file is the command line, the orchestration and the report; the cases are in
bench_cases.py, the timing helpers (also used by investigations/) in bench_timing.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

# `python -m pyvkgrad bench` runs this file with runpy, which puts neither its folder nor the
# project root on sys.path. The project root only where no pyvkgrad is importable otherwise:
# an installed pyvkgrad (the installed-wheel passes) is the one to measure.
if importlib.util.find_spec("pyvkgrad") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pyvkgrad  # noqa: E402
from pyvkgrad import operators  # noqa: E402
from bench_cases import (ALIASES, GROUPS, benchmark_cases, chain, host_overhead,  # noqa: E402
                         roundtrip)
import bench_timing  # noqa: E402
from bench_timing import (MiB, Torch, copy_roofline, gpu_clocks, progress,  # noqa: E402
                          vulkan_time, wait_strategy, write_roofline)


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

CUDA_FIRST = False  # --cuda-first: this process started CUDA before timing

def _copy_bytes(nbytes, max_range=None):
    """The bytes a copy moves to match a kernel moving `nbytes` (read + written)."""
    half = nbytes // 2 // 16 * 16
    return min(half, max_range // 16 * 16) if max_range else half


def run_case(dev, entry, repeat, seed):
    """Time one catalogue entry on the device (PyTorch's side: torch_case); None when it
    cannot run."""
    assert "torch" not in sys.modules or CUDA_FIRST, \
        "pyvkgrad's kernels are timed in a process without torch (unless --cuda-first)"
    name, case, dt, build = entry
    try:
        # A fifth value, "write", marks a kernel that only writes: its roofline is a fill.
        op, tensors, nbytes, _, *kind = build(dev, np.random.default_rng(seed))
    except (ValueError, NotImplementedError) as e:
        progress(f"    skipped: {e}")
        return None
    ns, _ = vulkan_time(dev, op, tensors, repeat)
    # The same bytes moved by the fastest copy (read + written), or filled by the fastest fill
    # where the kernel only writes; PyTorch's side measures its own (torch_case).
    roof_kind = "write" if kind == ["write"] else "copy"
    max_range = dev.info.max_storage_buffer_range
    size_roof = (write_roofline(dev, min(nbytes, max_range) // 16 * 16, repeat) if kind
                 else copy_roofline(dev, _copy_bytes(nbytes, max_range), repeat))
    r = Result(name, case, dt, nbytes, ns, nbytes / ns, nbytes / ns / (size_roof / 1e9))
    r.extra["roofline"] = roof_kind
    r.extra[f"{roof_kind}_roofline_gbps_same_bytes"] = size_roof / 1e9
    r.extra["vulkan_roofline_gbps_same_bytes"] = size_roof / 1e9
    for t in tensors.values():
        t.close()
    op.close()
    return r


def torch_case(T, entry, repeat, seed):
    """PyTorch's side of a catalogue entry (same inputs: same seed): {"torch_ns",
    "torch_roofline_gbps"} or {"torch_error"}; None when PyTorch has no equivalent."""
    _, _, _, build = entry
    try:
        _, _, nbytes, torch_fn, *kind = build(None, np.random.default_rng(seed))
    except (ValueError, NotImplementedError):
        return None
    if torch_fn is None:
        return None
    roof = (T.fill_roofline(nbytes // 16 * 16, repeat) if kind
            else T.copy_roofline(_copy_bytes(nbytes), repeat))
    out = {"torch_roofline_gbps": (roof or 0) / 1e9}
    try:
        out["torch_ns"] = T.time_ns(torch_fn(T), repeat)
    except Exception as e:  # an op PyTorch lacks for this dtype on this device
        out["torch_error"] = str(e).splitlines()[0][:120]
    return out


def merge_torch(r, side):
    """Fill a Result's PyTorch columns from torch_case's answer; the roofline becomes the
    better of the two processes' copies of the same bytes."""
    if not side:
        return
    if "torch_error" in side:
        r.extra["torch_error"] = side["torch_error"]
    if side.get("torch_ns"):
        tns = side["torch_ns"]
        r.torch_ns, r.torch_gbps, r.speedup_vs_torch = tns, r.bytes / tns, tns / r.vk_ns
    roof = max(r.extra["vulkan_roofline_gbps_same_bytes"], side.get("torch_roofline_gbps") or 0)
    r.extra[f"{r.extra['roofline']}_roofline_gbps_same_bytes"] = roof
    r.roofline_fraction = r.vk_gbps / roof


def torch_side(argv, what, quick):
    """Run `what` (torch_main) in a fresh process with PyTorch; its JSON answer, or None."""
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--isolate"]
    res = subprocess.run([sys.executable, __file__, *args, *(["--quick"] if quick else []),
                          "--torch-side", what], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        if line.startswith("TORCH "):
            return json.loads(line[len("TORCH "):])
    progress(f"    PyTorch's side failed: {(res.stderr or res.stdout).strip().splitlines()[-3:]}")
    return None


def torch_main(what, catalogue, ops, roof_bytes, quick, repeat):
    """A --torch-side process: `what` is "case:I" or a comma list of info, roofline, cases,
    roundtrip. Prints one line "TORCH <json>"."""
    T = Torch()
    out = {}
    if T.torch is None:
        print("TORCH " + json.dumps({"torch": None}), flush=True)
        return 0
    out["torch"] = f"{T.torch.__version__} ({T.device}: {T.name})"
    parts = what.split(",")
    if what.startswith("case:"):
        i = int(what[5:])
        out["cases"] = {str(i): torch_case(T, catalogue[i], repeat, i)}
    if "roofline" in parts:
        out["copy_roofline_gbps"] = (T.copy_roofline(roof_bytes, repeat) or 0) / 1e9 or None
    if "cases" in parts:
        out["cases"] = {str(i): torch_case(T, e, repeat, i) for i, e in enumerate(catalogue)}
    if "roundtrip" in parts and "roundtrip" in ops:
        out["roundtrip"] = roundtrip(None, T, quick, 50 if not quick else 10)
    print("TORCH " + json.dumps(out), flush=True)
    return 0


def run_isolated(index, argv, quick):
    """Run case `index` in a fresh process. Several large cases in one process were measured
    up to 2x slower after the first few on the H100 (both pyvkgrad and PyTorch), so each case
    gets a clean driver and allocator state."""
    args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--isolate"]
    res = subprocess.run([sys.executable, __file__, *args, *(["--quick"] if quick else []),
                          "--case", str(index)], capture_output=True, text=True)
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
                         "and the groups " + ", ".join(GROUPS) + "; iree (IREE as a peer, "
                         "bench_iree.py; not in the default)")
    ap.add_argument("--quick", action="store_true", help="small shapes (default on a CPU device)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--isolate", action="store_true",
                    help="run every case in its own process (recommended on a GPU)")
    ap.add_argument("--iree-cache", default=None,
                    help="folder of IREE's compiled modules (default: benchmarks/iree-cache)")
    ap.add_argument("--cuda-first", action="store_true",
                    help="start CUDA in the timing process first (RESULTS.md's tables before "
                         "2026-11-25 were measured so: NVIDIA's driver then runs Vulkan at full "
                         "speed; a numpy user's process has no CUDA)")
    ap.add_argument("--hold", type=float, default=None, metavar="SECONDS",
                    help="keep the GPU busy this long right before each timed measurement "
                         "(bench_timing.hold_clock), so that it runs at the working clock: "
                         "NVIDIA's driver lowers the SM clock after 2-3 s with little work "
                         "(default 1 on a GPU, 0 on a CPU device)")
    ap.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--torch-side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--roof-bytes", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ops = [name for op in args.ops.split(",") for name in ALIASES.get(op, [op])]
    unknown = set(ops) - set(operators.BY_NAME) - set(GROUPS) - {"iree"}
    if unknown:
        ap.error(f"--ops: unknown {sorted(unknown)}; known: "
                 f"{', '.join(list(operators.BY_NAME) + list(ALIASES) + list(GROUPS))}, iree")

    def catalogue_of(quick):
        cat = []
        for record in operators.OPERATORS:  # the table's order
            if record.name in ops:
                cat += list(benchmark_cases(record)(quick))
        return cat
    if args.torch_side is not None:  # PyTorch's side, in its own process: no Vulkan device
        repeat = args.repeat if not args.quick else min(args.repeat, 5)
        return torch_main(args.torch_side, catalogue_of(args.quick), ops, args.roof_bytes,
                          args.quick, repeat)
    if args.cuda_first:
        global CUDA_FIRST
        CUDA_FIRST = True  # torch is in this process on purpose
        import torch
        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
            progress("CUDA started in the timing process (--cuda-first)")
        else:  # a check of the command on lavapipe, say: nothing to start
            progress("--cuda-first: this PyTorch has no CUDA device; timing without it")
    dev = pyvkgrad.get_device(args.device)
    quick = args.quick or dev.info.device_type == "cpu"
    bench_timing.HOLD_S = bench_timing.hold_seconds(dev) if args.hold is None else args.hold
    repeat = args.repeat if not quick else min(args.repeat, 5)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wait = wait_strategy(dev)
    catalogue = catalogue_of(quick)
    if args.case is not None:  # a child of --isolate: one case, one JSON line
        r = run_case(dev, catalogue[args.case], repeat, args.case)
        print("RESULT " + json.dumps(asdict(r) if r else None), flush=True)
        return 0
    progress(f"device: {dev.name} ({dev.info.driver_name} {dev.info.driver_info}); "
             f"fence wait: blocks {wait['blocks']} (wait_spin_us {wait['wait_spin_us']}, "
             f"PYVKGRAD_WAIT_SPIN_US={wait['PYVKGRAD_WAIT_SPIN_US']}); hold before each timing: "
             f"{bench_timing.HOLD_S} s; PyTorch: "
             + ("off (--no-torch)" if args.no_torch else "timed in a separate process"))

    extra = {"hold_s": bench_timing.HOLD_S}

    def clocks_after(what):
        clocks = gpu_clocks()
        if clocks:
            progress(f"    GPU clocks after {what}: {clocks}")
            extra.setdefault("clocks", {})[what] = clocks

    roof_bytes = min(64 * MiB if quick else 1024 * MiB, dev.info.max_storage_buffer_range // 2)
    roof_by_method = {}
    roof = copy_roofline(dev, roof_bytes, repeat, roof_by_method)
    progress(f"copy roofline ({roof_bytes // MiB} MiB): Vulkan {roof / 1e9:.0f} GB/s ("
             + ", ".join(f"{m} {r / 1e9:.1f}" for m, r in roof_by_method.items()) + ")")
    clocks_after("the copy roofline")
    child_argv = [*(argv if argv is not None else sys.argv[1:]), "--roof-bytes", str(roof_bytes)]

    indexed = []  # (catalogue index, Result)
    for i, entry in enumerate(catalogue):
        name, case, dt, _ = entry
        progress(f"[{i + 1}/{len(catalogue)}] {name} {case} {dt}")
        r = run_isolated(i, argv, quick) if args.isolate else run_case(dev, entry, repeat, i)
        if r is None:
            continue
        if args.isolate and not args.no_torch:
            side = torch_side(child_argv, f"case:{i}", quick) or {}
            merge_torch(r, (side.get("cases") or {}).get(str(i)))
        indexed.append((i, r))
        if not args.isolate:
            clocks_after(f"case {i}")
        progress(f"    {r.vk_ns / 1e3:9.1f} us  {r.vk_gbps:7.1f} GB/s  "
                 f"{100 * r.roofline_fraction:5.1f}% of "
                 f"{'fill' if r.extra.get('roofline') == 'write' else 'copy'}"
                 + (f"   torch {r.torch_ns / 1e3:9.1f} us  x{r.speedup_vs_torch:.2f}"
                    if r.torch_ns else ""))
    extra.update(wait=wait, statistic="median",
                 processes="pyvkgrad without torch; PyTorch in a separate process"
                           + ("; every case in its own process" if args.isolate else ""))
    if "overhead" in ops:
        progress("host overhead (medians)")
        extra["host_overhead"] = host_overhead(dev, 200 if not quick else 50)
        clocks_after("host overhead")
        progress(f"    {extra['host_overhead']}")
    if "roundtrip" in ops:
        progress("numpy round trips (medians; pyvkgrad here, PyTorch in its own process)")
        extra["roundtrip"] = roundtrip(dev, None, quick, 50 if not quick else 10)
        clocks_after("round trips")
    if "chain" in ops:
        progress("recorded chain")
        try:
            extra["chain"] = chain(dev, quick, repeat)
            clocks_after("recorded chain")
            progress(f"    {extra['chain']}")
        except (NotImplementedError, ValueError) as e:
            progress(f"    skipped: {e}")
    if "iree" in ops:
        progress("IREE peer group")
        import bench_iree
        extra["iree"] = bench_iree.run_group(dev, quick, repeat, args.iree_cache)

    peer = {}
    if not args.no_torch:  # after every Vulkan measurement, so the two never overlap
        progress("PyTorch's side (separate process)")
        peer = torch_side(child_argv, "roofline,roundtrip" + ("" if args.isolate else ",cases"),
                          quick) or {}
        for i, r in indexed:
            if str(i) in (peer.get("cases") or {}):
                merge_torch(r, peer["cases"][str(i)])
        for row in extra.get("roundtrip", []):
            theirs = {t["case"]: t for t in peer.get("roundtrip") or []}.get(row["case"])
            if theirs:
                row["torch_from_numpy_us"] = theirs["torch_from_numpy_us"]
                row["torch_over_pyvkgrad"] = row["torch_from_numpy_us"] / row["pyvkgrad_us"]
            progress(f"    {row}")
    results = [r for _, r in indexed]
    torch_roof = (peer.get("copy_roofline_gbps") or 0) * 1e9 or None
    progress(f"device: {dev.name}; PyTorch: {peer.get('torch') or 'not available'}")

    print_table(dev, roof, torch_roof, results)
    print(f"fence wait: blocks {wait['blocks']} (Device.wait_spin_us = {wait['wait_spin_us']}); "
          f"each timing after {bench_timing.HOLD_S} s of steady GPU work (--hold)")
    if "host_overhead" in extra:
        print("host overhead, medians: " + ", ".join(
            f"{k[:-3]} {v:.1f} us" for k, v in extra["host_overhead"].items() if k.endswith("_us")))
    for row in extra.get("roundtrip", []):
        print(f"round trip {row['case']}: pyvkgrad {row['pyvkgrad_us']:.1f} us"
              + (f", PyTorch from numpy {row['torch_from_numpy_us']:.1f} us "
                 f"(x{row['torch_over_pyvkgrad']:.2f})" if "torch_from_numpy_us" in row else ""))
    if "iree" in extra:
        bench_iree.print_rows(extra["iree"])
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": dev.name,
              "driver": f"{dev.info.driver_name} {dev.info.driver_info}",
              "torch": peer.get("torch"),
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
