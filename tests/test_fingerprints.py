"""The same bits on every GPU (docs/semantics.md §17): this device's fingerprints against the
committed tests/fingerprints.json, and the same in processes whose lavapipe has subgroups of 4
and 16 lanes (LP_NATIVE_VECTOR_WIDTH 128 and 512; this process has 8 on a 256-bit machine),
another workgroup width and a buffer limit that cuts the one-call problems; and with the
float16 conversions rounded by integers (PYVKGRAD_FLOAT16_RTE=0) where this process lets the
device round them under RoundingModeRTE (the kernels' rte16 SPIR-V, where the device can, as
lavapipe can)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUBPROCESS_CWD
from pyvkgrad import fingerprint

FILE = Path(__file__).resolve().parent / "fingerprints.json"


def _assert_same(inside, outside, inputs):
    assert not inputs, f"these cases drew other inputs (another numpy?): {inputs}"
    assert not inside, f"these cases give other bits than tests/fingerprints.json: {inside}"


def test_this_device_gives_the_stored_bits(device):
    with open(FILE) as f:
        stored = json.load(f)
    mine = fingerprint.fingerprints(device)
    assert set(mine) == set(stored), "the case list changed: rewrite tests/fingerprints.json"
    _assert_same(*fingerprint.compare(mine, stored))


@pytest.mark.parametrize("env", [
    dict(LP_NATIVE_VECTOR_WIDTH="128", PYVKGRAD_LOCAL_SIZE="64"),
    dict(LP_NATIVE_VECTOR_WIDTH="512", PYVKGRAD_MAX_BUFFER_BYTES="2000000",
         PYVKGRAD_FLOAT16_RTE="0"),
], ids=["subgroup4-wg64", "subgroup16-cuts-integer-halves"])
def test_other_subgroups_workgroups_and_cuts_give_the_stored_bits(env):
    result = subprocess.run(
        [sys.executable, "-m", "pyvkgrad", "fingerprint", "--check", str(FILE)],
        env=dict(os.environ, **env), cwd=SUBPROCESS_CWD, capture_output=True, text=True,
        timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " cases give the stored bits" in result.stdout
