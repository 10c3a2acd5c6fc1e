"""BATCH_NORMALIZATION_GRAD (and with --one-pass the training grad too): what its time is made
of, and whether other plan settings help.

For each benchmark shape and dtype, and for workgroup widths and vectors per invocation per
chunk (`ITERS_MAX_VECTORS`, patched in this process only): the time of each recorded step
(partial sums with dX, barrier, finalize) from Vulkan timestamps (median of replays), the
total, and % of the best copy of the same bytes in the same run (as benchmarks/run.py).
--one-pass: instead, both operators with the one-pass plan (stage 1 finishes each channel,
FINISH) off, on (ONE_PASS_MIN_GROUPS, patched) and forced, at workgroup widths 256-1024 (each
width exact: the plan's widening is held to it).
--l2-order: instead, the training grad with and without its L2 order (`L2_ORDER`, patched:
stage 1 over chunks of all channels at once, dX last vector first); --ahead: both operators
with stage 1 loading 1-8 vectors ahead (AHEAD, the plan's `ahead` patched); --masked: both
operators with MASKED off, by its rule, and with narrower vectors; --span: both operators
with SPAN off, by its rule, and at each vector width; --span-plan: SPAN's one-pass plan
at other widths, vectors and loads ahead; --plan: both operators as
planned, in two stages, and with wider one-pass workgroups. Each timed warm
(replays back to back, as benchmarks/run.py) and cold (L2 flushed before each replay), with outputs
checked bitwise against the operator's first setting.

    python3 benchmarks/investigations/bn_grad_parts.py --out DIR [--quick]
        [--one-pass | --l2-order | --ahead | --masked | --span | --span-plan | --plan]
        [--shapes NxCxHxW,...]  (not with --one-pass)
    python3 benchmarks/investigations/bn_grad_parts.py --summary FILE
        (its printed JSON lines as text)
"""
import argparse
import dataclasses
import json
import os
import statistics
import sys

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root
import pyvkgrad  # noqa: E402
from pyvkgrad.ops import _batch_normalization_plan as bn  # noqa: E402
from bench_cases import _bn  # noqa: E402
from bench_timing import (Torch, diagnostic_args, replay_steps_ns,  # noqa: E402
                          same_bytes_roofline, step_medians_us)

ONE_PASS = {"off": 2**62, "default": bn.ONE_PASS_MIN_GROUPS, "forced": 1}


def settings(one_pass):
    """(training, one-pass setting, workgroup width, ITERS_MAX_VECTORS) to time per case."""
    if not one_pass:
        return [(False, "default", wg, iters) for wg in (128, 256, 512, 1024)
                for iters in (2, 4, 8, 16)]
    return [(training, mode, wg, bn.ITERS_MAX_VECTORS) for training in (False, True)
            for mode, wg in (("off", 256), ("default", 256), ("forced", 256),
                             ("forced", 512), ("forced", 1024))]


def close(rec, op, tensors):
    """Release one setting's recording, operator and tensors before the next is built."""
    rec.close()
    op.close()
    for t in tensors.values():
        t.close()


MASKED_WIDTH = bn.masked_width
SPAN_WIDTH = bn.span_width


def _patch(name, value):
    """A setting as the module attribute it patches: AHEAD, stage 1's loads ahead whatever the
    load's size (the plan's `ahead` replaced); SPAN_WIDTH, SPAN's vector width (`span_width`
    offered only that width; 0: SPAN off); MASKED_WIDTH, MASKED's widest vector
    (`masked_width` offered only the widths up to it); else the attribute itself."""
    if name == "AHEAD":
        return "ahead", lambda load_bytes: value
    if name == "SPAN_WIDTH":  # SPAN at exactly this width where it fits, any dtype (0: off)
        return "span_width", lambda widths, wg, f16_dx, *a: SPAN_WIDTH(
            tuple(w for w in widths if w == value), wg, True, *a) if value else (1, 0)
    if name == "MASKED_WIDTH":
        return "masked_width", lambda widths, *a: MASKED_WIDTH(
            tuple(w for w in widths if w <= value), *a)
    return name, value


def patched_sweep(dev, T, args, settings, shapes_arg=None):
    """Rows of `settings` (each a (training, {module attribute: value}) pair, patched in this
    process), timed warm (replays back to back, as benchmarks/run.py) and cold (a 192 MB ReLU
    grad replayed between, so L2 holds none of the operator's tensors when it starts), with
    each setting's outputs checked bitwise against the first of its operator."""
    big = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (1 << 24,))
    flush = dev.compile(pyvkgrad.ActivationReluGradDesc(big, big, big))
    ft = dict(input_tensor=dev.empty(big), input_gradient_tensor=dev.empty(big),
              output_gradient_tensor=dev.empty(big))
    with dev.record() as frec:
        frec.execute(flush, **ft)
    shapes = [(4, 64, 56, 56)] if args.quick else [(256, 256, 14, 14), (32, 64, 112, 112),
                                                    (256, 512, 7, 7)]
    if shapes_arg:
        shapes = [tuple(int(n) for n in shape.split("x")) for shape in shapes_arg.split(",")]
    patches = [(training, dict(_patch(name, value) for name, value in setting.items()), setting)
               for training, setting in settings]
    defaults = {name: getattr(bn, name) for _, patch, _ in patches for name in patch}
    rows = []
    for shape in shapes:
        for dt in ("float32", "float16"):
            roof, first = None, {}
            for training, patch, setting in patches:
                for name, value in {**defaults, **patch}.items():
                    setattr(bn, name, value)
                op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), shape, training,
                                             dt)
                if roof is None:
                    roof = same_bytes_roofline(dev, T, nbytes, args.repeat)
                with dev.record(timestamps=True) as rec:
                    rec.execute(op, **tensors)
                warm = replay_steps_ns(rec, args.repeat)
                cold = replay_steps_ns(rec, args.repeat, before=frec.replay)
                outs = [tensors[n].numpy() for n in ("output_gradient_tensor",
                                                     "output_scale_gradient_tensor",
                                                     "output_bias_gradient_tensor")]
                ref = first.setdefault(training, outs)
                same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8))
                           for a, b in zip(outs, ref))
                stage1 = dict(op.plan.dispatches[0].constants)
                row = {"shape": list(shape), "dtype": dt, "training": training,
                       "setting": setting, "labels": rec.labels, "bitwise_equal_to_first": same,
                       "dx_bitwise_equal_to_first": np.array_equal(outs[0].view(np.uint8),
                                                                   ref[0].view(np.uint8)),
                       "stage1": {k: stage1.get(k) for k in ("WG", "VEC", "SPAN", "MASKED",
                                                             "FINISH", "AHEAD", "ITERS")}}
                for name, steps in (("warm", warm), ("cold", cold)):
                    total = statistics.median(sum(s) for s in steps)
                    row[name + "_step_us"] = step_medians_us(steps)
                    row[name + "_us"] = total / 1e3
                    row[name + "_pct_copy"] = 100 * nbytes / (total * 1e-9) / roof
                print(json.dumps(row), flush=True)
                rows.append(row)
                close(rec, op, tensors)
    for name, value in defaults.items():
        setattr(bn, name, value)
    frec.close()
    flush.close()
    return rows


def summary(line):
    """One printed row (a JSON line this script wrote) as a line of text; other lines as they
    are: per setting the step times (us), total and % of copy, warm and cold where both."""
    try:
        r = json.loads(line)
    except ValueError:
        return line.rstrip()
    head = [str(r["shape"]), r["dtype"], "training" if r["training"] else "grad"]
    if "setting" not in r:  # --one-pass and the default sweep
        return " ".join(head + [r["one_pass"], str(r["local_size"]),
                                " ".join(f"{u:.1f}" for u in r["step_us"]),
                                f'{r["us"]:.1f} us', f'{r["pct_copy"]:.1f}%'])
    head += [str(r["setting"]), "bitwise" if r["bitwise_equal_to_first"] else
             "dX bitwise" if r.get("dx_bitwise_equal_to_first") else "DIFFERS"]
    if "stage1" in r:
        head.append(" ".join(f"{k}={v}" for k, v in r["stage1"].items() if v is not None))
    return " ".join(head + [f'| {t} ' + " ".join(f"{u:.1f}" for u in r[t + "_step_us"])
                            + f' = {r[t + "_us"]:.1f} us {r[t + "_pct_copy"]:.1f}%'
                            for t in ("warm", "cold")])


# --l2-order and --ahead: (training, patch) settings of patched_sweep.
SWEEPS = {
    "--l2-order": [(True, {"L2_ORDER": order}) for order in (False, True)],
    "--ahead": [(training, {"AHEAD": a}) for training in (False, True) for a in (1, 2, 4, 8)],
    # MASKED off (single elements), the rule (MASKED_MAX_SLOTS), then at most 4 or 2 elements
    # per vector with the rule's slot limit lifted.
    "--masked": [(training, setting) for training in (False, True)
                 for setting in ({"MASKED_MAX_SLOTS": 0}, {}, {"MASKED_MAX_SLOTS": 2,
                                 "MASKED_WIDTH": 4}, {"MASKED_MAX_SLOTS": 2, "MASKED_WIDTH": 2})],
    # SPAN off (MASKED), by its rule, then at each vector width (where it fits).
    "--span": [(training, setting) for training in (False, True)
               for setting in ({"SPAN_WIDTH": 0}, {}, {"SPAN_WIDTH": 8}, {"SPAN_WIDTH": 4},
                               {"SPAN_WIDTH": 2})],
    # SPAN's one-pass plan: as chosen, twice as wide, wider vectors with fewer groups in one
    # pass (ONE_PASS_MIN_GROUPS lowered, up to 1024 wide), and other loads ahead.
    "--span-plan": [(training, setting) for training in (False, True)
                    for setting in ({}, {"ONE_PASS_INVOCATIONS": 2**18, "ONE_PASS_MAX_WG": 1024},
                                    {"SPAN_WIDTH": 4, "ONE_PASS_MIN_GROUPS": 128,
                                     "ONE_PASS_MAX_WG": 1024},
                                    {"SPAN_WIDTH": 8, "ONE_PASS_MIN_GROUPS": 64,
                                     "ONE_PASS_MAX_WG": 1024},
                                    {"AHEAD": 2}, {"AHEAD": 8})],
    # The plan: as chosen, two stages instead of one pass, one-pass workgroups twice and four
    # times as wide (up to 1024).
    "--plan": [(training, setting) for training in (False, True)
               for setting in ({}, {"ONE_PASS_MIN_GROUPS": 2**62},
                               {"ONE_PASS_INVOCATIONS": 2**18, "ONE_PASS_MAX_WG": 1024},
                               {"ONE_PASS_INVOCATIONS": 2**19, "ONE_PASS_MAX_WG": 1024})],
}


def main():
    if sys.argv[1:2] == ["--summary"]:
        for line in open(sys.argv[2]):
            print(summary(line))
        return
    sweep = next((flag for flag in SWEEPS if flag in sys.argv), None)
    if sweep:
        ap = argparse.ArgumentParser()
        ap.add_argument("--shapes", help="NxCxHxW,...: other shapes than the benchmark's")
        extra, argv = ap.parse_known_args([a for a in sys.argv[1:] if a != sweep])
        args = diagnostic_args(argv)
        rows = patched_sweep(pyvkgrad.default_device(), Torch(), args, SWEEPS[sweep],
                             extra.shapes)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"bn_{sweep[2:].replace('-', '_')}.json"), "w") as f:
            json.dump({"device": pyvkgrad.default_device().name, "rows": rows}, f, indent=1)
        return
    one_pass = "--one-pass" in sys.argv
    args = diagnostic_args([a for a in sys.argv[1:] if a != "--one-pass"])
    dev = pyvkgrad.default_device()
    T = Torch()
    shapes = [(4, 64, 56, 56)] if args.quick else [(256, 256, 14, 14), (32, 64, 112, 112)]
    if one_pass and not args.quick:
        shapes.append((256, 512, 7, 7))
    default_iters, default_groups = bn.ITERS_MAX_VECTORS, bn.ONE_PASS_MIN_GROUPS
    rows = []
    for shape in shapes:
        for dt in ("float32", "float16"):
            roof = None
            for training, mode, wg, iters in settings(one_pass):
                bn.ITERS_MAX_VECTORS = iters
                bn.ONE_PASS_MIN_GROUPS = ONE_PASS[mode]
                # Exactly this width: the one-pass plan may not widen it.
                limits = dataclasses.replace(dev.limits, local_size=wg, max_local_size=wg)
                op, tensors, nbytes, _ = _bn(dev, np.random.default_rng(0), shape, training,
                                             dt, limits)
                if roof is None:
                    roof = same_bytes_roofline(dev, T, nbytes, args.repeat)
                with dev.record(timestamps=True) as rec:
                    rec.execute(op, **tensors)
                steps = replay_steps_ns(rec, args.repeat)
                per_step = step_medians_us(steps)
                total = statistics.median(sum(s) for s in steps)
                row = {"shape": list(shape), "dtype": dt, "training": training,
                       "one_pass": mode, "local_size": wg, "iters_max_vectors": iters,
                       "labels": rec.labels, "step_us": per_step, "us": total / 1e3,
                       "pct_copy": 100 * nbytes / (total * 1e-9) / roof,
                       "default": wg == 256 and iters == default_iters and mode == "default"}
                print(json.dumps(row), flush=True)
                rows.append(row)
                close(rec, op, tensors)
    bn.ITERS_MAX_VECTORS, bn.ONE_PASS_MIN_GROUPS = default_iters, default_groups
    os.makedirs(args.out, exist_ok=True)
    name = "bn_one_pass.json" if one_pass else "bn_grad_parts.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump({"device": dev.name, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
