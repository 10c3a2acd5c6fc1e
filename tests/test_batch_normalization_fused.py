"""The fused training grad (batch_normalization_training_grad_fused: one dispatch whose
workgroups wait for each other in ticket order) against the float64 oracle.

It is opt-in (PYVKGRAD_CROSS_WORKGROUP_WAITS=1; on the H100 it was no faster than the
three-kernel plan). Lavapipe ends long loops, so its workgroups must never wait there; run
single-threaded (LP_NUM_THREADS=0) it executes workgroups one after another in ticket order,
where no wait is ever needed: that is how CI checks the kernel's arithmetic and job order. The
subprocess has its own Vulkan device with those settings. On a GPU, run the BatchNorm suites
with PYVKGRAD_CROSS_WORKGROUP_WAITS=1 to check it there."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyvkgrad
import pytest
from pyvkgrad import DataType, TensorDesc

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, sys
import numpy as np
import pyvkgrad
from pyvkgrad import DataType, TensorDesc, operators, reference
record = operators.BY_NAME["batch_normalization_training_grad"]
rng = np.random.default_rng(int(sys.argv[1]))
out = []
cases = [((4, 6, 1256), (1, 6, 1)), ((3, 5, 7, 8), (1, 5, 1, 1)), ((2, 3, 14, 14), (1, 3, 1, 1)),
         ((1, 2, 4096), (1, 2, 1)), ((5, 1, 64), (1, 1, 1))]
for dt in (np.float32, np.float16):
    for shape, stat in cases:
        axes = tuple(i for i, s in enumerate(stat) if s == 1)
        x = (rng.standard_normal(shape) * 2 + 3).astype(dt)
        dy = rng.standard_normal(shape).astype(dt)
        m = x.astype(np.float64).mean(axis=axes, keepdims=True).astype(dt)
        v = x.astype(np.float64).var(axis=axes, keepdims=True).astype(dt)
        sc = rng.uniform(0.5, 2, stat).astype(dt)
        X, S = TensorDesc(DataType.from_numpy(dt, "t", "t"), shape), \
            TensorDesc(DataType.from_numpy(dt, "t", "t"), stat)
        desc = pyvkgrad.BatchNormalizationTrainingGradDesc(X, X, S, S, S, X, S, S, 1e-5)
        kernels = [d.kernel for d in desc.plan(pyvkgrad.default_device().limits).dispatches]
        got = pyvkgrad.batch_normalization_training_grad(x, dy, m, v, sc, 1e-5)
        again = pyvkgrad.batch_normalization_training_grad(x, dy, (m + 1000).astype(dt), v, sc,
                                                           1e-5)
        want = reference.batch_normalization_training_grad(x, dy, m, v, sc, 1e-5)
        errs = [float(np.abs(g.astype(np.float64) - w).max() / np.abs(w).max())
                for g, w in zip(got, want)]
        _, problem = operators.compare(record, got, want,
                                       record.magnitudes((x, dy, m, v, sc, 1e-5), {}), dt)
        out.append(dict(dtype=np.dtype(dt).name, shape=shape, kernels=kernels, errors=errs,
                        problem=problem,
                        mean_independent=bool(np.abs(again.output_gradient.astype(np.float64)
                                                     - want.output_gradient).max()
                                              <= 2 * errs[0] * np.abs(want.output_gradient).max()
                                              + 1e-7)))
print("RESULT", json.dumps(out))
"""


def test_fused_training_grad_matches_the_oracle(device, rng):
    if device.info.device_type != "cpu":
        pytest.skip("LP_NUM_THREADS orders workgroups on lavapipe only")
    env = dict(os.environ, LP_NUM_THREADS="0", PYVKGRAD_CROSS_WORKGROUP_WAITS="1",
               PYVKGRAD_LOCAL_SIZE="32")
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(int(rng.integers(2**31)))],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.split("RESULT ", 1)[1])
    fused = [r for r in rows if "batch_normalization_training_grad_fused" in r["kernels"]]
    assert len(fused) >= 7, rows  # every case with 8- or 16-byte vectors takes the fused plan
    for r in rows:
        assert not r["problem"], r  # the operator's tolerance (pyvkgrad/operators.py)
        assert r["mean_independent"], r


def test_fused_plan_is_chosen_only_where_waits_are_safe(device, monkeypatch):
    X, S = TensorDesc(DataType.FLOAT32, (4, 64, 56, 56)), TensorDesc(DataType.FLOAT32, (1, 64, 1, 1))
    desc = pyvkgrad.BatchNormalizationTrainingGradDesc(X, X, S, S, S, X, S, S, 1e-5)
    import dataclasses
    gpu = dataclasses.replace(device.limits, max_loop_iterations=0, cross_workgroup_waits=True)
    plan = desc.plan(gpu)
    assert [d.kernel for d in plan.dispatches] == ["batch_normalization_training_grad_fused"] * 2
    assert [d.constant("RESET") for d in plan.dispatches] == [True, False]
    lavapipe = dataclasses.replace(gpu, max_loop_iterations=65535, cross_workgroup_waits=False)
    assert "batch_normalization_training_grad_fused" not in [
        d.kernel for d in desc.plan(lavapipe).dispatches]
    monkeypatch.setenv("PYVKGRAD_CROSS_WORKGROUP_WAITS", "maybe")
    with pytest.raises(ValueError, match="PYVKGRAD_CROSS_WORKGROUP_WAITS"):
        device.limits
