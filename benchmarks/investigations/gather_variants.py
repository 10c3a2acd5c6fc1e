#!/usr/bin/env python3
"""ResampleGrad gather kernels side by side: today's resample_grad_gather and the walk kernels
(resample_grad_walk, resample_grad_walk_pair) in several settings, on the benchmark's shapes.

    python3 benchmarks/investigations/gather_variants.py --out DIR [--quick] [--repeat 20]
        [--cases 0,3] [--variants gather,walk] [--no-oracle]

For every case (shape, mode, dtype of benchmarks/run.py's ResampleGrad gather cases) and every
variant (a `gather` plan option of ResampleGradDesc.plan, VARIANTS below):
- checks that dX is bitwise equal to today's kernel's (the first variant, "gather") and to
  itself after all timed replays (run to run), on a dX poisoned with NaN before the first run
  (so an element a variant does not write shows); today's result is also checked against the
  float64 oracle with the test suite's tolerances (--no-oracle skips it);
- times it from Vulkan timestamps: the median of `--repeat` replays, taken in interleaved
  rounds over the variants (drift in the machine's state hits every variant alike);
- measures the same-bytes copy roofline in the same process before and after (the best of a
  vkCmdCopyBuffer and a compute copy, as benchmarks/run.py does), and reports % of it, with
  bytes = dY read once + dX written once.
Variants whose plan equals an earlier variant's are not run again (listed as "= name").
Each case runs in a fresh process (several large cases in one process were measured up to 2x
slower on the H100; benchmarks/RESULTS.md). Prints one table; writes gather_variants.json and
gather_variants.txt into --out. Needs only an importable pyvkgrad (and benchmarks/: its
bench_cases.py and bench_timing.py, and spirv/ for the copy roofline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
try:
    import pyvkgrad  # an installed package, or the project on PYTHONPATH
except ImportError:
    sys.path.insert(0, str(HERE.parent.parent))
    import pyvkgrad
from pyvkgrad import DataType, TensorDesc, reference  # noqa: E402
from pyvkgrad.plan import OperatorDesc  # noqa: E402

sys.path.insert(0, str(HERE.parent))  # the benchmark's modules
from bench_cases import resample_shapes  # noqa: E402
from bench_timing import copy_roofline  # noqa: E402

# name -> the `gather` option of ResampleGradDesc.plan (pyvkgrad/ops/resample_grad.py).
VARIANTS = {
    "gather": {"kernel": "gather"},  # today's kernel: the reference
    "walk": {"kernel": "walk"},  # the default plan
    "walk-r2": {"kernel": "walk", "rows": 2},
    "walk-r4": {"kernel": "walk", "rows": 4},
    "walk-r8": {"kernel": "walk", "rows": 8},
    "walk-r16": {"kernel": "walk", "rows": 16},
    "walk-loop": {"kernel": "walk", "switch": False},
    "walk-pred": {"kernel": "walk", "select": False},
    "walk-select": {"kernel": "walk", "select": True},
    "walk-r8-select": {"kernel": "walk", "rows": 8, "select": True},
    "walk-r4-loop": {"kernel": "walk", "rows": 4, "switch": False},
    "walk-cols2": {"kernel": "walk", "cols": 2},
    "walk-cols2-r4": {"kernel": "walk", "cols": 2, "rows": 4},
    "walk-pad": {"kernel": "walk", "pad": True},
    "walk-nopair": {"kernel": "walk", "pair": False},
    "walk-lanesq": {"kernel": "walk", "lanes": "q"},
    "walk-zw": {"kernel": "walk", "zero_weights": True},
    "walk-align": {"kernel": "walk", "align": True},
    "walk-zw-align": {"kernel": "walk", "zero_weights": True, "align": True},
    "walk-zwa-r2": {"kernel": "walk", "zero_weights": True, "align": True, "rows": 2},
    "walk-zwa-r4": {"kernel": "walk", "zero_weights": True, "align": True, "rows": 4},
    "walk-zwa-r8": {"kernel": "walk", "zero_weights": True, "align": True, "rows": 8},
    "walk-zwa-loop": {"kernel": "walk", "zero_weights": True, "align": True, "switch": False},
    "walk-cols2-zw": {"kernel": "walk", "cols": 2, "zero_weights": True},
}


def cases(quick):
    """(n, c, h, w, ratio, nhwc, mode, dtype): benchmarks/run.py's resample cases, gather only."""
    return [(n, c, h, w, ratio, nhwc, mode, dt)
            for n, c, h, w, ratio, nhwc in resample_shapes(quick)
            for mode in ("nearest_neighbor", "linear") for dt in ("float32", "float16")]


def _nhwc(sizes):
    n, c, h, w = sizes
    return (h * w * c, 1, w * c, c)


class _Variant(OperatorDesc):
    """A ResampleGradDesc whose plan takes one `gather` option (Device.compile calls plan)."""

    def __init__(self, desc, gather):
        self.desc, self.gather = desc, gather
        self.OPERATOR = desc.OPERATOR

    def plan(self, limits):
        return self.desc.plan(limits, gather=self.gather)

    def tensor_fields(self):
        return self.desc.tensor_fields()


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype == np.float16 else np.uint32)


def run_case(dev, case, names, repeat, oracle):
    n, c, h, w, ratio, nhwc, mode, dt = case
    oh, ow = round(h * ratio), round(w * ratio)
    dtype = DataType.FLOAT32 if dt == "float32" else DataType.FLOAT16
    npdt = dtype.numpy_dtype
    dy_desc = TensorDesc(dtype, (n, c, oh, ow), _nhwc((n, c, oh, ow)) if nhwc else None)
    dx_desc = TensorDesc(dtype, (n, c, h, w), _nhwc((n, c, h, w)) if nhwc else None)
    scales = (1.0, 1.0, oh / h, ow / w)
    desc = pyvkgrad.ResampleGradDesc(dy_desc, dx_desc, mode, scales, (0.5,) * 4, (-0.5,) * 4)
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    dy = rng.standard_normal(dy_desc.sizes, dtype=np.float32).astype(npdt)
    if nhwc:  # the same logical values, channels innermost in memory
        dy = np.ascontiguousarray(dy.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    tdy = dev.upload(dy)
    assert tdy.desc == dy_desc
    nbytes = dy.nbytes + n * c * h * w * dy.itemsize
    label = (f"{mode.split('_')[0]} [{n},{c},{oh},{ow}]->[{n},{c},{h},{w}]"
             + (" NHWC" if nhwc else ""))
    half = min(nbytes // 2 // 16 * 16, dev.info.max_storage_buffer_range // 16 * 16)
    roof = copy_roofline(dev, half, repeat)
    poison = np.full(dx_desc.sizes, np.nan, npdt)
    rows, runs, seen = [], {}, {}
    reference_bits = None
    for name in names:
        row = dict(case=label, dtype=dt, variant=name, options=VARIANTS[name])
        rows.append(row)
        try:
            op = dev.compile(_Variant(desc, VARIANTS[name]))
        except ValueError as e:  # the variant does not apply to this case
            row["skipped"] = str(e)
            continue
        except Exception as e:  # noqa: BLE001 (a broken variant must not hide the others)
            row["error"] = f"{type(e).__name__}: {e}"
            continue
        d = op.plan.dispatches
        key = tuple((x.kernel, x.constants) for x in d)
        row["kernels"] = [x.kernel for x in d]
        row["constants"] = {k: v for k, v in d[0].constants
                            if k in ("ROWS", "COLS", "MAXU", "LANES_ON_B", "PAIR_Q",
                                     "DY_WORDS", "ROW_SWITCH", "SELECT_VALUES", "COL_SLOTS",
                                     "COL_GROUPS", "ZERO_WEIGHTS", "DY_ALIGNED")}
        if key in seen:
            row["same_as"] = seen[key]
            op.close()
            continue
        seen[key] = name
        tdx = dev.empty(dx_desc)
        tdx.write(poison)
        with dev.record(timestamps=True) as rec:
            rec.execute(op, input_gradient_tensor=tdy, output_gradient_tensor=tdx)
        first = tdx.numpy()
        if reference_bits is None:
            reference_bits = _bits(first)
            row["reference"] = True
            if oracle:
                row["oracle"] = _oracle_check(dy, (n, c, h, w), mode, scales, first)
        row["written"] = bool(not np.isnan(first.astype(np.float32)).any())
        row["bitwise_equal_to_gather"] = bool(np.array_equal(_bits(first), reference_bits))
        if oracle and not row["bitwise_equal_to_gather"]:  # then is it still within tolerance?
            row["oracle"] = _oracle_check(dy, (n, c, h, w), mode, scales, first)
        runs[name] = (rec, op, tdx, first, [])
    # Timed replays, in interleaved rounds.
    rounds = 4
    per_round = -(-repeat // rounds)
    for rec, *_ in runs.values():
        rec.replay()  # warm
    for _ in range(rounds):
        for rec, _, _, _, times in runs.values():
            for _ in range(per_round):
                rec.replay()
                times.append(sum(rec.kernel_times_ns()))
    roof = max(roof, copy_roofline(dev, half, repeat))
    for row in rows:
        if row["variant"] not in runs:
            continue
        rec, op, tdx, first, times = runs[row["variant"]]
        last = tdx.numpy()
        row["deterministic"] = bool(np.array_equal(_bits(first), _bits(last)))
        ns = statistics.median(times)
        row.update(us=ns / 1e3, min_us=min(times) / 1e3, replays=len(times),
                   gbps=nbytes / ns, copy_gbps=roof / 1e9,
                   copy_fraction=nbytes / ns / (roof / 1e9), bytes=nbytes)
        rec.close()
        op.close()
        tdx.close()
    tdy.close()
    base = next((r["us"] for r in rows if r.get("reference") and "us" in r), None)
    for row in rows:
        if "us" in row and base:
            row["speedup_vs_gather"] = base / row["us"]
    return rows


def _oracle_check(dy, sizes, mode, scales, out):
    """The test suite's bound: |dX - oracle| <= tol(S), S the oracle on |dY|. The oracle is
    pyvkgrad.reference.resample_grad's, applied along H and W only (N and C are identities)."""
    mats = [reference.axis_weights(sizes[d], dy.shape[d], mode, scales[d], 0.5, -0.5, None)
            for d in (2, 3)]

    def grad(t):
        t = np.einsum("ph,ncpw->nchw", mats[0], t, optimize=True)
        return np.einsum("qw,nchq->nchw", mats[1], t, optimize=True)
    dy64 = np.asarray(dy, np.float64)
    want, mag = grad(dy64), grad(np.abs(dy64))
    tol = (2.0**-10 * mag + 2.0**-24) if out.dtype == np.float16 else 1e-5 * mag
    bad = int(np.count_nonzero(~(np.abs(out.astype(np.float64) - want) <= tol)))
    return "ok" if bad == 0 else f"{bad} elements off"


def _settings(r):
    """A walk plan's settings, short: r<rows> c<cols> u<maxu>, B (lanes along B), q (float16
    column pairs), 2 (the pair kernel), w (dY by words), L (row loop, no switch), P (predicated
    additions), Z (zero weights), A (aligned dY words), pad (padded column slots)."""
    c = r.get("constants") or {}
    if not c:
        return ",".join(r.get("kernels", []))
    flags = ["B" if c.get("LANES_ON_B") else "", "q" if c.get("PAIR_Q") else "",
             "2" if r.get("kernels") == ["resample_grad_walk_pair"] else "",
             "w" if c.get("DY_WORDS") else "", "" if c.get("ROW_SWITCH") else "L",
             "" if c.get("SELECT_VALUES") else "P", "Z" if c.get("ZERO_WEIGHTS") else "",
             "A" if c.get("DY_ALIGNED") else "",
             "pad" if c.get("COL_SLOTS") != c.get("COL_GROUPS") else ""]
    return f"r{c.get('ROWS')} c{c.get('COLS')} u{c.get('MAXU')} " + "".join(flags)


def _ok(r):
    return r["bitwise_equal_to_gather"] and r["deterministic"] and r["written"]


def _line(r):
    return (f"{r['case'][:43]:<44}{r['dtype']:<9}{r['variant']:<15}{r['us']:>9.1f}"
            f"{r['gbps']:>7.0f}{100 * r['copy_fraction']:>7.1f}"
            f"{r.get('speedup_vs_gather', 0):>9.2f}  {'ok' if _ok(r) else 'DIFF':<5}"
            + (f"oracle: {r['oracle']} " if r.get("oracle") not in (None, "ok") else "")
            + _settings(r))


def print_table(header, rows, file=None, summary=False):
    """Every row; or with `summary`, per case today's kernel, the default walk and the fastest
    variant, and whether every variant matched (the full table is in gather_variants.txt)."""
    head = (f"{'case':<44}{'dtype':<9}{'variant':<15}{'us':>9}{'GB/s':>7}{'%copy':>7}"
            f"{'x gather':>9}  {'bits':<5}settings")
    lines = [header, head, "-" * len(head)]
    groups = {}
    for r in rows:
        groups.setdefault((r["case"], r["dtype"]), []).append(r)
    for (case, dt), rs in groups.items():
        timed = [r for r in rs if "us" in r]
        if summary:
            keep = [r for r in timed if r["variant"] in ("gather", "walk")]
            if timed:
                best = min(timed, key=lambda r: r["us"])
                if best not in keep:
                    keep.append(best)
            lines += [_line(r) for r in keep]
            bad = [r["variant"] for r in timed if not _ok(r)]
            bad += [f"{r['variant']} (error)" for r in rs if "error" in r]
            if bad:
                lines.append(f"{'':<44}{dt:<9}PROBLEMS: {', '.join(bad)}")
            continue
        for r in rs:
            if "us" in r:
                lines.append(_line(r))
            elif "same_as" in r:
                lines.append(f"{case[:43]:<44}{dt:<9}{r['variant']:<15}{'= ' + r['same_as']:>9}")
            else:
                lines.append(f"{case[:43]:<44}{dt:<9}{r['variant']:<15}  "
                             + ("n/a" if "skipped" in r else "ERROR: " + r["error"][:80]))
    text = "\n".join(lines)
    print(text, file=file, flush=True)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gather-variants-out")
    ap.add_argument("--quick", action="store_true", help="small shapes (default on a CPU device)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cases", default=None, help="comma-separated case indices")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated, from: " + ", ".join(VARIANTS))
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--in-process", action="store_true",
                    help="run every case in this process (no fresh process per case)")
    ap.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}")
    if names[0] != "gather":
        names.insert(0, "gather")  # the reference comes first
    dev = pyvkgrad.get_device(None)
    quick = args.quick or dev.info.device_type == "cpu"
    repeat = max(args.repeat, 4) if not quick else min(args.repeat, 4)
    all_cases = cases(quick)
    if args.case is not None:  # a child: one case, one JSON line
        rows = run_case(dev, all_cases[args.case], names, repeat, not args.no_oracle)
        print("RESULT " + json.dumps(rows), flush=True)
        return 0
    chosen = (range(len(all_cases)) if args.cases is None
              else [int(i) for i in args.cases.split(",")])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = (f"{dev.name} ({dev.info.driver_name} {dev.info.driver_info}); kernel times: "
              f"median of {repeat} replays (Vulkan timestamps); %copy: of the best copy of the "
              f"same bytes measured in the same process; bits: bitwise equal to gather, run to "
              f"run, every element written")
    print(header, file=sys.stderr, flush=True)
    rows, t0 = [], time.time()
    for i in chosen:
        case = all_cases[i]
        print(f"[{i}] {case} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        if args.in_process:
            got = run_case(dev, case, names, repeat, not args.no_oracle)
        else:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--case", str(i),
                   "--variants", ",".join(names), "--repeat", str(args.repeat)]
            cmd += ["--quick"] if args.quick else []
            cmd += ["--no-oracle"] if args.no_oracle else []
            res = subprocess.run(cmd, capture_output=True, text=True)
            got = None
            for line in res.stdout.splitlines():
                if line.startswith("RESULT "):
                    got = json.loads(line[len("RESULT "):])
            if got is None:
                tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
                print(f"    failed: {tail}", file=sys.stderr, flush=True)
                got = [dict(case=str(case), dtype=case[-1], variant="-", error=" | ".join(tail))]
        for r in got:
            if "us" in r:
                print(f"    {r['variant']:<15}{r['us']:9.1f} us {100 * r['copy_fraction']:6.1f}% "
                      f"bits {'ok' if r['bitwise_equal_to_gather'] else 'DIFF'}",
                      file=sys.stderr, flush=True)
        rows += got
        # Written after every case: a run cut short keeps what it measured.
        report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": dev.name,
                  "driver": f"{dev.info.driver_name} {dev.info.driver_info}",
                  "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
                  "repeat": repeat, "variants": {k: VARIANTS[k] for k in names},
                  "rows": rows, "seconds": time.time() - t0}
        (out / "gather_variants.json").write_text(json.dumps(report, indent=1))
        with open(out / "gather_variants.txt", "w") as f:
            print_table(header, rows, f)
    print()
    print_table(header, rows, summary=True)
    bad = [r for r in rows if "us" in r and not (r["bitwise_equal_to_gather"]
                                                 and r["deterministic"] and r["written"])]
    bad += [r for r in rows if r.get("oracle") not in (None, "ok") or "error" in r]
    print(f"\n{len(bad)} problem rows; wrote {out / 'gather_variants.json'} "
          f"({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
