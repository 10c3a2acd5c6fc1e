"""The benchmark (benchmarks/run.py) on the test device, small: its figures are medians, it
reports the wait strategy, and pyvkgrad is timed in a process that never imports torch, with
PyTorch's side in a process of its own (issue 33)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from conftest import SUBPROCESS_CWD

ROOT = Path(__file__).resolve().parent.parent

# Runs the benchmark's main() (its path: argv[1]) in this child and says afterwards whether
# torch was imported.
_CHILD = """
import runpy, sys
path = sys.argv[1]
sys.argv = ["run.py", *sys.argv[2:]]
try:
    runpy.run_path(path, run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("TORCH_IMPORTED", "torch" in sys.modules)
"""


def _bench(tmp_path, *args):
    # Outside the checkout in the installed-wheel passes (conftest.SUBPROCESS_CWD), so that the
    # installed pyvkgrad is the one measured.
    res = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT / "benchmarks" / "run.py"),
                          "--quick", "--repeat", "2", "--out", str(tmp_path), *args],
                         cwd=SUBPROCESS_CWD, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res, json.loads((tmp_path / "results.json").read_text())


def test_benchmark_medians_wait_strategy_and_torch_in_its_own_process(tmp_path):
    res, report = _bench(tmp_path, "--ops", "overhead,roundtrip")
    assert "TORCH_IMPORTED False" in res.stdout
    assert report["statistic"] == "median"
    wait = report["wait"]
    assert isinstance(wait["wait_spin_us"], int) and wait["blocks"]
    assert "fence wait: blocks" in res.stdout
    overhead = report["host_overhead"]
    assert overhead["statistic"].startswith("median")
    for key in ("one_call_function_us", "compiled_operator_us", "recording_replay_us",
                "recording_of_10_replay_us"):
        assert overhead[key] > 0
    rows = report["roundtrip"]
    assert [r["case"] for r in rows][0] == "ReLU grad 1024 float32"
    if importlib.util.find_spec("torch"):  # PyTorch's side, from the other process
        assert report["torch"] and all(r["torch_from_numpy_us"] > 0 for r in rows)


def test_iree_peer_group_runs_beside_pyvkgrad(tmp_path):
    """--ops iree on the test device with the small shapes, from the committed cache (optional:
    skipped where iree.runtime is not importable)."""
    import pytest
    if importlib.util.find_spec("iree") is None or importlib.util.find_spec("iree.runtime") is None:
        pytest.skip("iree.runtime is not importable (pip install .[bench])")
    res, report = _bench(tmp_path, "--ops", "iree", "--no-torch")
    group = report["iree"]
    rows = {(r["computation"], r["dtype"]): r for r in group["rows"]}
    assert len(rows) == 10
    for r in rows.values():
        assert r["pyvkgrad_kernel_us"] > 0 and r["pyvkgrad_per_call_us"] > 0
        assert "iree_per_call_us" in r or r["iree_error"].startswith("not compiled")
    for dtype in ("float32", "float16"):  # compiled, run, and the same result as pyvkgrad's
        assert rows[("relu_grad", dtype)]["max_abs_diff_dx"] == 0
        assert rows[("relu_grad", dtype)]["iree_per_call_us"] > 0
    assert "IREE" in res.stdout
