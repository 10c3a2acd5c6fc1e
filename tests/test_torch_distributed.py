"""Data-parallel training through torch.distributed (DistributedDataParallel, gloo) with
pyvkgrad's backward: examples/train_digits_ddp.py, 2 processes on lavapipe (every rank on
device 0), a few steps. The ranks' parameters stay identical (DDP averages the gradients, every
rank steps the same way), and equal a single-process run over the same global batches (one
forward per rank's slice, the mean of the losses, PyTorch's own backward) within 1e-5 of the
largest parameter: four SGD steps of learning rate 0.05 on gradients that differ by float32
roundings (the digits test bounds their effect on the loss at 1e-4 over 20 steps)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from torch_support import require

require("sklearn", "scikit-learn is not installed: pip install scikit-learn (tools/test installs "
                   "it with torch)")

ROOT = Path(__file__).resolve().parent.parent


def test_ddp_two_ranks_on_lavapipe(device, tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    index = next(i for i, d in enumerate(__import__("pyvkgrad").devices()) if d is device)
    res = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_digits_ddp.py"), "--nproc", "2",
         "--steps", "4", "--devices", f"{index},{index}", "--check", "--quiet",
         "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["world"] == 2 and report["devices"] == [device.name, device.name]
    assert report["identical_across_ranks"]
    assert report["max_abs_difference_to_single_process"] <= 1e-5 * max(1.0,
                                                                        report["max_parameter"])
    assert report["rank0_losses"][-1] < report["rank0_losses"][0]
