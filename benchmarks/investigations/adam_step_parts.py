#!/usr/bin/env python3
"""Where `pyvkgrad.torch.optim.Adam`'s step spends its time, on benchmarks/adam_step.py's
parameter sets: the median ms over 20 steps (after 3) of the parts of a pack's step, timed by
wrapping the calls `Pack.step` makes (nothing of it is copied here):
  write     the parameters and gradients copied into the buffers' host memory (the first two
            _copy_all calls);
  submit    vkQueueSubmit of the recording (the uploads, ADAM_OPTIMIZER, the read-back);
  wait      its fence wait;
  back      the new parameters copied into the torch tensors (the third _copy_all);
and the whole optimizer step beside them (its checks and state updates are the rest). Also
says whether the runtime's mapped buffers are device memory.

    python3 benchmarks/investigations/adam_step_parts.py [SET ...]
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import adam_step  # noqa: E402

import pyvkgrad  # noqa: E402
import pyvkgrad.torch as vt  # noqa: E402
from pyvkgrad import runtime  # noqa: E402
from pyvkgrad.torch import _adam_pack  # noqa: E402
from pyvkgrad.torch.optim import Adam  # noqa: E402

PARTS = ("write", "submit", "wait", "back")


def timing(times):
    """Wrap _copy_all and Commands.submit to add each call's seconds to `times` (a step's
    copies: write, write, back)."""
    copy_all, submit = _adam_pack._copy_all, runtime.Commands.submit
    calls = []

    def timed_copy_all(dst, src):
        t = time.perf_counter()
        copy_all(dst, src)
        calls.append(time.perf_counter() - t)
        if len(calls) == 3:  # a step's last copy
            times["write"].append(calls[0] + calls[1])
            times["back"].append(calls[2])
            calls.clear()

    def timed_submit(self, what="", timings=None):
        halves = []
        submit(self, what, halves)
        times["submit"].append(halves[0][0] * 1e-9)
        times["wait"].append(halves[0][1] * 1e-9)

    _adam_pack._copy_all, runtime.Commands.submit = timed_copy_all, timed_submit


def main() -> None:
    dev = pyvkgrad.default_device()
    vt.set_device(dev)
    print("mapped buffers are device memory:", dev.runtime().mapped_device_local)
    times = {k: [] for k in PARTS}
    timing(times)
    for name in sys.argv[1:] or ["digits", "small", "resnet18"]:
        run, setup = adam_step.make_case(adam_step.SETS[name](), lambda p: Adam(p, lr=1e-3))
        whole = []
        for i in range(23):
            setup()
            if i == 3:
                for v in times.values():
                    v.clear()
            t = time.perf_counter()
            run()
            if i >= 3:
                whole.append(time.perf_counter() - t)
        print(f"{name}: whole step {1e3 * statistics.median(whole):.3f} ms; " + ", ".join(
            f"{k} {1e3 * statistics.median(v):.3f}" for k, v in times.items()) + " ms",
            flush=True)


if __name__ == "__main__":
    main()
