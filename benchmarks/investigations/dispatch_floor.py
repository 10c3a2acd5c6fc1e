"""Diagnostic: what one more dispatch costs on the GPU, against the BatchNorm grads' finalize.

Records three dependent 4-element ReLU grads (each reads the previous one's output, so a
barrier lies between them) and reads each step's time from Vulkan timestamps: a dispatch
with next to no work, after a barrier, is the least any second stage of a plan costs. Then
the per-step times of BATCH_NORMALIZATION_GRAD at [32,64,112,112] (partial sums, barrier,
finalize), whose finalize is the step that keeps float16 from 90% of copy. Medians of
--repeat replays, one JSON line per recording.

    python3 benchmarks/investigations/dispatch_floor.py [--repeat N] [--quick]
"""
import json
import os
import sys

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)  # the benchmark's modules
sys.path.insert(0, os.path.dirname(BENCHMARKS))  # the project root
import pyvkgrad  # noqa: E402
from bench_cases import _bn  # noqa: E402
from bench_timing import diagnostic_args, replay_steps_ns, step_medians_us  # noqa: E402


def steps_us(rec, repeat):
    """Median time of each recorded step (us) over `repeat` replays, after one."""
    rec.replay()
    return [round(t, 2) for t in step_medians_us(replay_steps_ns(rec, repeat))]


def main():
    args = diagnostic_args(repeat=200)
    dev = pyvkgrad.default_device()
    desc = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (4,))
    relu = dev.compile(pyvkgrad.ActivationReluGradDesc(desc, desc, desc))
    ones = dev.upload(np.ones(4, np.float32))
    outs = [dev.empty(desc) for _ in range(3)]
    with dev.record(timestamps=True) as rec:
        previous = ones
        for out in outs:
            rec.execute(relu, input_tensor=previous, input_gradient_tensor=ones,
                        output_gradient_tensor=out)
            previous = out
    print(json.dumps({"case": "three dependent 4-element ReLU grads", "labels": rec.labels,
                      "step_us": steps_us(rec, args.repeat)}), flush=True)
    shape = (4, 64, 56, 56) if args.quick else (32, 64, 112, 112)
    for dt in ("float32", "float16"):
        op, tensors, _, _ = _bn(dev, np.random.default_rng(0), shape, False, dt)
        with dev.record(timestamps=True) as brec:
            brec.execute(op, **tensors)
        print(json.dumps({"case": f"BATCH_NORMALIZATION_GRAD {list(shape)} {dt}",
                          "labels": brec.labels, "step_us": steps_us(brec, args.repeat)}),
              flush=True)


if __name__ == "__main__":
    main()
