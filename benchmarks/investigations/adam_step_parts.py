#!/usr/bin/env python3
"""Where `pyvkgrad.torch.optim.Adam`'s step spends its time, on benchmarks/adam_step.py's
parameter sets: the median ms of each part of a pack's step over 20 steps (after 3), timed
around the parts of `Pack.step` (the same calls, in the same order):
  pieces    the parameters' and gradients' lists gathered;
  write     both written into the buffers' host memory (one torch._foreach_copy_ each);
  submit    vkQueueSubmit of the recording (uploads, ADAM_OPTIMIZER, the read-back);
  wait      its fence wait;
  back      the new parameters copied from staging into the torch tensors;
and the whole optimizer step beside them (its checks and state updates are the rest). Also
says whether the runtime's mapped buffers are device memory.

    python3 benchmarks/investigations/adam_step_parts.py [SET ...]
"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import adam_step  # noqa: E402

import pyvkgrad  # noqa: E402
import pyvkgrad.torch as vt  # noqa: E402
from pyvkgrad.device import context_of  # noqa: E402
from pyvkgrad.torch import _adam_pack  # noqa: E402
from pyvkgrad.torch.optim import Adam  # noqa: E402

PARTS = ("pieces", "write", "submit", "wait", "back")


def timed_step(pack, times):
    """Pack.step with its operator and recording already made, each part timed."""
    x, _, _, g, t = pack.tensors
    lock = context_of(pack.device).lock
    t0 = time.perf_counter()
    pieces = (list(pack.params), [p.grad for p in pack.params])
    t1 = time.perf_counter()
    with lock, torch.no_grad():
        for tensor, views, ps in zip((x, g), pack._views, pieces):
            tensor.storage.overwritten_elements("probe")
            _adam_pack._copy_all(views, ps)
    t.storage.overwritten_elements("probe")[0] = 1
    t2 = time.perf_counter()
    rec = pack._recording
    submission, what = rec._submission
    uploads = submission.uploads()
    commands = rec._commands[tuple(id(s) for s in uploads)][0]
    timings = []
    commands.submit(what, timings)
    submission.commit(uploads)
    t3 = time.perf_counter()
    with lock, torch.no_grad():
        pack.x_out.storage.host_words("probe")
        _adam_pack._copy_all(list(pack.params), pack._out_views)
    t4 = time.perf_counter()
    for name, dt in zip(PARTS, (t1 - t0, t2 - t1, timings[0][0] * 1e-9, timings[0][1] * 1e-9,
                                t4 - t3)):
        times[name].append(dt)


def main() -> None:
    dev = pyvkgrad.default_device()
    vt.set_device(dev)
    print("mapped buffers are device memory:", dev.runtime().mapped_device_local)
    for name in sys.argv[1:] or ["digits", "small", "resnet18"]:
        run, setup = adam_step.make_case(adam_step.SETS[name](), lambda p: Adam(p, lr=1e-3))
        whole = []
        for i in range(23):
            setup()
            t = time.perf_counter()
            run()
            if i >= 3:
                whole.append(time.perf_counter() - t)
        packs = set()
        for cell in run.__closure__:
            if isinstance(cell.cell_contents, Adam):
                packs = set(cell.cell_contents._device.values())
        times = {k: [] for k in PARTS}
        for i in range(23):
            setup()
            for pack in packs:
                timed_step(pack, times if i >= 3 else {k: [] for k in PARTS})
        print(f"{name}: whole step {1e3 * statistics.median(whole):.3f} ms; " + ", ".join(
            f"{k} {1e3 * statistics.median(v):.3f}" for k, v in times.items()) + " ms",
            flush=True)


if __name__ == "__main__":
    main()
