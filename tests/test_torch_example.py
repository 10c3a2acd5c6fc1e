"""examples/train_digits.py, short: the CNN on scikit-learn's digits trained with pyvkgrad's
backward (through `convert`) and with PyTorch's, from the same weights on the same batches.
The losses agree within 1e-4 over the first 20 steps and the final test accuracies are equal
(the gradients differ by float32 roundings, far below what moves a loss by 1e-4)."""

import importlib.util
from pathlib import Path

import pytest

from torch_support import require

require("sklearn", "scikit-learn is not installed: pip install scikit-learn (tools/test installs "
                   "it with torch)")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_digits.py"


def load_example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_digits_losses_and_accuracy_agree(device, channels_last):
    import pyvkgrad.torch as vt

    vt.set_device(device)
    try:
        results = load_example().run(steps=20, channels_last=channels_last)
    finally:
        vt.set_device(None)
    ref, ref_acc, _ = results["pytorch"]
    ours, our_acc, _ = results["pyvkgrad"]
    assert len(ref) == len(ours) == 20
    worst = max(abs(a - b) for a, b in zip(ref, ours))
    assert worst <= 1e-4, f"losses differ by {worst:.3g}"
    assert ref[-1] < ref[0] * 0.5, "the model learns"
    assert our_acc == ref_acc


def test_example_script_runs_and_plots(device, tmp_path, capsys):
    require("matplotlib", "matplotlib is not installed: pip install matplotlib")
    import pyvkgrad.torch as vt

    vt.set_device(device)
    try:
        assert load_example().main(["--steps", "3", "--plot", str(tmp_path / "loss.png")]) == 0
    finally:
        vt.set_device(None)
    out = capsys.readouterr().out
    assert "final test accuracy" in out and (tmp_path / "loss.png").stat().st_size > 1000
