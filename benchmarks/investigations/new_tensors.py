"""What a kernel over new buffers costs since patch part 15 (a Manager's programs of one kernel
and specialization share a pipeline), for ReLU grad and ADAM_OPTIMIZER, float32:

- `compile_ms`: a program on a second runtime (a new Vulkan device, so nothing shared; the
  driver's own caches warm from the first runtime's compilation). Before part 15 every program
  over new buffers cost this;
- `shared_ms`: the same runtime's next program of the kernel over other buffers (median);
- `call_new_tensors_ms`: a compiled operator called on new device tensors every time (upload,
  call, read back; median), the pattern of a training loop that allocates its tensors anew.

Run from the project root on any device (medians of --repeat):

    python3 benchmarks/investigations/new_tensors.py [--repeat 20] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import pyvkgrad
from pyvkgrad import DataType, TensorDesc, kernels
from pyvkgrad.runtime import Runtime

N = 1 << 16


def descriptors():
    d = TensorDesc(DataType.FLOAT32, (N,))
    s = TensorDesc(DataType.FLOAT32, (1,))
    step = TensorDesc(DataType.UINT32, (1,))
    return {"activation_relu_grad": pyvkgrad.ActivationReluGradDesc(d, d, d),
            "adam_optimizer": pyvkgrad.AdamOptimizerDesc(d, d, d, d, step, d, d, d,
                                                         1e-3, 0.9, 0.999, 1e-8)}


def program_ms(runtime: Runtime, spirv: bytes, spec: np.ndarray, buffers: int, push: int
               ) -> float:
    bound = [runtime.buffer(16) for _ in range(buffers)]
    t0 = time.perf_counter()
    runtime.program(bound, spirv, 1, spec, push)
    return 1e3 * (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out")
    args = ap.parse_args()
    device = pyvkgrad.default_device()
    rng = np.random.default_rng(0)
    rows = []
    for name, desc in descriptors().items():
        op = device.compile(desc)
        dispatch = op.plan.dispatches[0]
        spirv = kernels.spirv(dispatch.kernel)
        spec = kernels.specialization(dispatch.kernel, dispatch.constants)
        nbuf = len(kernels.interface(dispatch.kernel).bindings)
        push = len(dispatch.push_constants)
        first = Runtime(0)
        program_ms(first, spirv, spec, nbuf, push)  # the driver's caches see it once
        second = Runtime(0)
        compile_ms = program_ms(second, spirv, spec, nbuf, push)
        shared = [program_ms(second, spirv, spec, nbuf, push) for _ in range(args.repeat)]
        first.close()
        second.close()
        fields = list(desc.tensor_fields())
        arrays = {n: rng.standard_normal(d.sizes).astype(np.float32)
                  if d.data_type == DataType.FLOAT32 else np.ones(d.sizes, np.uint32)
                  for n, (d, access) in fields if access == "read"}
        calls = []
        for _ in range(args.repeat + 1):
            t0 = time.perf_counter()
            tensors = {n: device.upload(a) for n, a in arrays.items()}
            tensors.update({n: device.empty(d) for n, (d, _) in fields if n not in arrays})
            op(**tensors)
            [tensors[n].numpy() for n, _ in fields if n not in arrays]
            calls.append(1e3 * (time.perf_counter() - t0))
        row = dict(operator=name, elements=N, compile_ms=round(compile_ms, 3),
                   shared_ms=round(statistics.median(shared), 4),
                   call_new_tensors_ms=round(statistics.median(calls[1:]), 3))
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:  # the rows, as printed, and the device
        Path(args.out).write_text(json.dumps(dict(device=device.name, rows=rows), indent=1))


if __name__ == "__main__":
    main()
