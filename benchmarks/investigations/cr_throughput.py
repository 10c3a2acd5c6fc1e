#!/usr/bin/env python3
"""ADAM_OPTIMIZER and the correctly rounded cr_div and cr_sqrt, previous against current
(issue 30: Adam ran at 57% of the copy roofline in float32 and 27% in float16 on an H200, the
same ~78 G elements/s in both, so bound by instructions).

"previous" is cr_div and cr_sqrt before their fast paths: today's general paths
(cr_div_general, cr_sqrt_general, the previous code unchanged) for every input. Both are built
into SPIR-V ahead (no shader compiler is needed here):
- ADAM_OPTIMIZER: the benchmark's cases (bench_cases.adam_cases: 16 and 256 MiB per tensor,
  float32 and float16, in place), the operator as compiled, its kernel served from
  benchmarks/spirv/adam_optimizer_previous.spv for "previous"; Vulkan-timestamp medians
  against the same-bytes copy roofline; after timing (the same number of in-place steps) the
  two variants' tensors must hold the same bits.
- cr_ops (benchmarks/shaders/cr_ops.comp): per element of [1, 2) inputs, REPEAT rounds of one
  cr_sqrt and one cr_div in a chain; G operation pairs per second, bits compared too.

    python3 benchmarks/investigations/cr_throughput.py [--quick] [--repeat N] [--out FILE]

--quick: small sizes, a check on lavapipe. --out: the rows as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import pyvkgrad  # noqa: E402
from pyvkgrad import kernels  # noqa: E402
import bench_cases  # noqa: E402
import bench_timing  # noqa: E402

VARIANTS = ("previous", "current")
ADAM_OUTPUTS = ("input_parameters_tensor", "input_first_moment_tensor",
                "input_second_moment_tensor")  # in place: the outputs are these tensors


@contextlib.contextmanager
def adam_kernel(variant):
    """ADAM_OPTIMIZER's kernel for `variant`: the shipped one, or the previous build served in
    its place (the same interface: checked)."""
    if variant == "current":
        yield
        return
    data, iface = bench_timing.benchmark_kernel("adam_optimizer_previous")
    shipped = kernels.interface("adam_optimizer")
    assert (iface.constants, iface.bindings, iface.push_constants) == (
        shipped.constants, shipped.bindings, shipped.push_constants), "interfaces differ"
    with bench_timing.serving("adam_optimizer", data):
        yield


def adam_rows(dev, quick, repeat):
    rows = []
    no_torch = types.SimpleNamespace(torch=None)
    for operator, label, dt, build in bench_cases.adam_cases(quick):
        outputs, roofline = {}, None
        for variant in VARIANTS:
            with adam_kernel(variant):
                try:
                    op, tensors, nbytes, _ = build(dev, np.random.default_rng(1))
                except ValueError as e:  # past the device's storage buffer range (lavapipe)
                    print(f"{operator} {label} {dt}: skipped ({e})")
                    break
                ns, rec = bench_timing.vulkan_time(dev, op, tensors, repeat)
            outputs[variant] = [tensors[k].numpy().view(np.uint8) for k in ADAM_OUTPUTS]
            if roofline is None:
                roofline = bench_timing.same_bytes_roofline(dev, no_torch, nbytes, repeat)
            n = tensors["input_parameters_tensor"].desc.sizes[-1]
            rows.append(dict(kind="ADAM_OPTIMIZER", case=label, dtype=dt, variant=variant,
                             us=ns / 1e3, gbps=nbytes / ns, roofline_gbps=roofline / 1e9,
                             roofline_share=nbytes / ns / (roofline / 1e9),
                             g_elements_per_s=n / ns))
            rec.close()
            op.close()
            del tensors
        if len(outputs) == len(VARIANTS):
            same = all(np.array_equal(a, b) for a, b in zip(*outputs.values()))
            for row in rows[-len(VARIANTS):]:
                row["same_bits"] = same
    return rows


def cr_ops_rows(dev, quick, repeat):
    rows = []
    runtime = dev.runtime()
    n = 1 << 16 if quick else 1 << 24
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(1, 2, n).astype(np.float32).view(np.uint32) for _ in range(2))
    buffers = dict(a=runtime.buffer(4 * n, words=a), b=runtime.buffer(4 * n, words=b),
                   quotient=runtime.buffer(4 * n), root=runtime.buffer(4 * n))
    for rounds in (1, 16):
        results = {}
        for variant in VARIANTS:
            program, push = bench_timing.benchmark_program(
                dev, "cr_ops", buffers, dict(PREVIOUS=variant == "previous", REPEAT=rounds,
                                                SKEW=False), n)
            ns = bench_timing.commands_ns(dev, lambda c: c.dispatch(program, push), repeat,
                                          "cr_ops")
            commands = runtime.commands()
            commands.dispatch(program, push)
            commands.download([buffers["quotient"], buffers["root"]])
            commands.submit("cr_ops")
            results[variant] = [buffers[k].words().copy() for k in ("quotient", "root")]
            commands.destroy()
            program.destroy()
            rows.append(dict(kind="cr_ops", case=f"{n} elements, {rounds} rounds",
                             dtype="float32", variant=variant, us=ns / 1e3,
                             g_pairs_per_s=n * rounds / ns,
                             ns_per_pair_per_element=ns / (n * rounds)))
        same = all(np.array_equal(x, y) for x, y in zip(*results.values()))
        for row in rows[-len(VARIANTS):]:
            row["same_bits"] = same
    for buf in buffers.values():
        buf.destroy()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None, help="a JSON file for the rows")
    args = ap.parse_args()
    dev = pyvkgrad.default_device()
    print(f"device: {dev.name}")
    rows = adam_rows(dev, args.quick, args.repeat) + cr_ops_rows(dev, args.quick, args.repeat)
    print(f"{'kernel':15s} {'case':32s} {'dtype':8s} {'variant':9s} {'us':>10s} "
          f"{'rate':>22s} {'of copy':>8s} same bits")
    for r in rows:
        if r["kind"] == "ADAM_OPTIMIZER":
            rate = f"{r['g_elements_per_s']:7.2f} G elem/s"
            share = f"{100 * r['roofline_share']:7.1f}%"
        else:
            rate, share = f"{r['g_pairs_per_s']:7.2f} G div+sqrt/s", ""
        print(f"{r['kind']:15s} {r['case']:32s} {r['dtype']:8s} {r['variant']:9s} "
              f"{r['us']:10.1f} {rate:>22s} {share:>8s} {r['same_bits']}")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(device=dev.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
