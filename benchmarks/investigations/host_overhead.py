#!/usr/bin/env python3
"""Where a small call's host time goes (issue 33: about 30 us more per submission on one
H100 machine than on another).

For a 1024-element float32 ReLU grad, medians of: the one-call function, the compiled operator
call, a recording's replay, a replay of a recording of ten (bench_cases.overhead_calls, as the
benchmark times them), and their parts: the Python work before the submission, the submission
(kp's evalAsync: vkQueueSubmit), the fence wait (kp's evalAwait: polling for up to the wait
spin, then vkWaitForFences), and, for the one-call function, copying the inputs in and reading
the outputs back (roundtrip_parts.parts); plus a bare submission of a command buffer holding
one barrier and no dispatch, and one holding a 4-element dispatch.

Each configuration runs in a fresh process: PYVKGRAD_WAIT_SPIN_US = 0, 2000, 20000, each
without torch and with torch imported and CUDA started first (where torch and CUDA exist).
One JSON line per configuration on stdout; all of them in --out/host_overhead.json.

    python3 benchmarks/investigations/host_overhead.py --out DIR [--quick] [--repeat N]
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # roundtrip_parts

SPINS_US = (0, 2000, 20000)


class Split:
    """Times the two halves of every runtime.Commands.submit while installed: kp's
    eval_async (preEval of each op, vkQueueSubmit) and eval_await (the fence wait, postEval)."""

    def __init__(self):
        from pyvkgrad import runtime
        self.runtime, self.original = runtime, runtime.Commands.submit
        self.submit_ns, self.wait_ns = [], []
        split = self

        def submit(commands, what=""):
            timings = []
            split.original(commands, what, timings)
            for submit_ns, wait_ns in timings:
                split.submit_ns.append(submit_ns)
                split.wait_ns.append(wait_ns)
        runtime.Commands.submit = submit

    def close(self):
        self.runtime.Commands.submit = self.original


def call_parts(fn, repeat):
    """Median wall, submit, wait and the rest (Python) of `fn`, in us, each call timed whole
    and split (Split) in the same call; the rest is the per-call difference."""
    fn()
    split = Split()
    try:
        walls = []
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            fn()
            walls.append(time.perf_counter_ns() - t0)
    finally:
        split.close()
    per = max(1, len(split.submit_ns) // (repeat + 1))  # submissions per call
    sub = [sum(split.submit_ns[i * per:(i + 1) * per]) for i in range(1, repeat + 1)]
    wait = [sum(split.wait_ns[i * per:(i + 1) * per]) for i in range(1, repeat + 1)]
    rest = [w - s - t for w, s, t in zip(walls, sub, wait)]
    med = statistics.median
    return {"wall_us": med(walls) / 1e3, "submit_us": med(sub) / 1e3, "wait_us": med(wait) / 1e3,
            "python_us": med(rest) / 1e3, "submissions_per_call": per}


def bare_submissions(dev, repeat):
    """A command buffer with one barrier and no dispatch, and one with a 4-element dispatch,
    submitted through the runtime seam with the device's wait spin: median parts (us)."""
    import numpy as np
    from bench_cases import tiny_recording
    runtime = dev.runtime()
    buf = runtime.buffer(16, words=np.ones(4, np.uint32))
    barrier = runtime.commands(0, dev.wait_spin_us * 1000)
    barrier.barrier([buf])
    rec = tiny_recording(dev)
    out = {"barrier_only": call_parts(lambda: barrier.submit("barrier"), repeat),
           "dispatch_4_elements": call_parts(rec.replay, repeat)}
    barrier.destroy()
    buf.destroy()
    return out


def child(spin, with_torch, repeat):
    """One configuration, in this (fresh) process: one JSON line."""
    row = {"PYVKGRAD_WAIT_SPIN_US": spin, "torch": None}
    if with_torch:
        import torch
        row["torch"] = torch.__version__
        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            row["torch"] += " (CUDA started)"
    import numpy as np
    import pyvkgrad
    from bench_cases import overhead_calls
    from bench_timing import median_wall_ns, wait_strategy
    from roundtrip_parts import parts
    dev = pyvkgrad.default_device()
    row["device"] = dev.name
    row["wait"] = wait_strategy(dev)
    calls = overhead_calls(dev)
    row["medians_us"] = {k: median_wall_ns(fn, repeat) / 1e3 for k, fn in calls.items()}
    row["parts"] = {k: call_parts(fn, repeat) for k, fn in calls.items()}
    x = np.random.default_rng(1).standard_normal(1024).astype(np.float32)
    row["one_call_copies"] = parts(dev, calls["one_call_function_us"], (x, x), repeat)
    row["bare"] = bare_submissions(dev, repeat)
    print("ROW " + json.dumps(row), flush=True)


def machine():
    """What may explain a machine's difference: the CPU, its frequency governor, the cores."""
    info = {"cpu": platform.processor(), "cores": len(os.sched_getaffinity(0))}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for name in ("scaling_governor", "scaling_cur_freq", "scaling_driver"):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cpufreq/{name}") as f:
                info[name] = f.read().strip()
        except OSError:
            info[name] = None
    return info


def main():
    from bench_timing import child_row, diagnostic_args
    if sys.argv[1:2] == ["--child"]:
        return child(int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]))
    args = diagnostic_args(repeat=500)
    repeat = 30 if args.quick else args.repeat
    os.makedirs(args.out, exist_ok=True)
    import importlib.util
    torch_variants = (False, True) if importlib.util.find_spec("torch") else (False,)
    result = {"machine": machine(), "repeat": repeat, "rows": []}
    print(json.dumps(result["machine"]), flush=True)
    for with_torch in torch_variants:
        for spin in SPINS_US:
            env = dict(os.environ, PYVKGRAD_WAIT_SPIN_US=str(spin))
            row = child_row([sys.executable, __file__, "--child", str(spin),
                             "1" if with_torch else "0", str(repeat)],
                            {"PYVKGRAD_WAIT_SPIN_US": spin, "torch": with_torch}, env)
            print(json.dumps(row), flush=True)
            result["rows"].append(row)
    with open(os.path.join(args.out, "host_overhead.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
