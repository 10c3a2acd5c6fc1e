"""The element-wise base from outside: the worked example of docs/adding-an-operator.md (a
LeakyReLU grad with one scalar parameter, Alpha; not part of pyvkgrad) is built from the page's
own code blocks, its kernels compiled, and the operator table's generic tests run on its
record, so the recipe and the line counts the page gives stay true."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad import kernels, operators, reference
from pyvkgrad.plan import Limits
from pyvkgrad.tensor import DataType, TensorDesc
import test_environment as env
import test_kernels
import test_operators as generic
from cases import VIEWS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs/adding-an-operator.md"
NAME = "activation_leaky_relu_grad"
KERNELS = (NAME, f"{NAME}_packed")


def doc_blocks():
    """(path, contents) of the page's code blocks marked `file=path`, in page order."""
    return re.findall(r"^```\w+ file=(\S+)\n(.*?)^```", DOC.read_text(), re.M | re.S)


def doc_files():
    """path -> what the page adds to it: its blocks, in order."""
    files = {}
    for path, body in doc_blocks():
        files[path] = files.get(path, "") + body
    return files


def doc_rows():
    """The page's table of files: ([paths], lines), lines "generated" for the build's output."""
    rows = re.findall(r"^\| (`[^|]+`) \| \+?(\d+|generated) \|", DOC.read_text(), re.M)
    return [(re.findall(r"`([^`]+)`", paths), lines) for paths, lines in rows]


def doc_table():
    """path -> its row's lines."""
    return {path: lines for paths, lines in doc_rows() for path in paths}


def test_the_page_counts_its_lines():
    """The page's table of files gives each block's length, and its total the sum of the rows
    and the number of hand-edited files."""
    table, files = doc_table(), doc_files()
    assert set(files) <= set(table) and len(files) == 5 and len(doc_blocks()) == 6
    for path, body in files.items():
        assert int(table[path]) == len(body.splitlines()), path
    edited = [(paths, int(lines)) for paths, lines in doc_rows() if lines != "generated"]
    total = re.search(r"About (\d+) lines in (\d+) hand-edited files", DOC.read_text())
    assert int(total.group(1)) == sum(lines for _, lines in edited)
    assert int(total.group(2)) == sum(len(paths) for paths, _ in edited) <= 8


def build_tool():
    spec = importlib.util.spec_from_file_location("build_shaders", ROOT / "tools/build_shaders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_build(tmp_path_factory):
    """The page's shader files added to a copy of the repository's shaders and shipped
    SPIR-V, and what the build tool's --check, then its build, said and changed there."""
    if shutil.which("glslangValidator") is None:
        from conftest import IN_CI
        if IN_CI:
            pytest.fail("CI=true but glslangValidator is missing")
        pytest.skip("glslangValidator is not installed")
    tree = tmp_path_factory.mktemp("example") / "tree"
    for sub in ("shaders", "pyvkgrad/spirv", "tools"):
        shutil.copytree(ROOT / sub, tree / sub, ignore=shutil.ignore_patterns("__pycache__"))
    added = {path: body for path, body in doc_files().items() if path.startswith("shaders/")}
    for path, body in added.items():
        assert not (tree / path).exists(), path  # a new file
        (tree / path).write_text(body)
    spirv = tree / "pyvkgrad/spirv"
    before = {f.name: f.read_bytes() for f in spirv.iterdir()}
    tool = [sys.executable, "tools/build_shaders.py"]
    check = subprocess.run(tool + ["--check"], cwd=tree, capture_output=True, text=True)
    build = subprocess.run(tool, cwd=tree, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    after = {f.name: f.read_bytes() for f in spirv.iterdir()}
    return types.SimpleNamespace(tree=tree, added=set(added), check=check, before=before,
                                 after=after, manifest=json.loads(after["manifest.json"]))


@pytest.fixture
def leaky_relu(monkeypatch, example_build):
    """The example's record, its kernels served from the example's build."""
    files = doc_files()
    tool = build_tool()
    real_spirv, real_interface, real_entry = (kernels.spirv, kernels.interface,
                                              kernels.manifest_entry)
    built = {}
    for name in KERNELS:
        data = example_build.after[f"{name}.spv"]
        built[name] = (data, kernels.interface_of(name, tool.read_interface(data, name)))
    monkeypatch.setattr(kernels, "spirv",
                        lambda n, *rte16: built[n][0] if n in built else real_spirv(n, *rte16))
    monkeypatch.setattr(kernels, "interface",
                        lambda n: built[n][1] if n in built else real_interface(n))
    monkeypatch.setattr(kernels, "manifest_entry", lambda n: dict(
        example_build.manifest["kernels"][n]) if n in built else real_entry(n))

    module = types.ModuleType(f"pyvkgrad.ops.{NAME}")
    module.__package__ = "pyvkgrad.ops"
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(files[f"pyvkgrad/ops/{NAME}.py"], f"pyvkgrad/ops/{NAME}.py", "exec"),
         vars(module))
    oracle_namespace = dict(vars(reference))
    exec(files["pyvkgrad/reference.py"], oracle_namespace)
    # operators.py's blocks: the import (run as in pyvkgrad/operators.py), then the record.
    (_, import_block), (_, record_block) = [b for b in doc_blocks()
                                            if b[0] == "pyvkgrad/operators.py"]
    oracle = types.SimpleNamespace(activation_leaky_relu_grad=oracle_namespace[NAME])
    namespace = dict(vars(operators), reference=oracle)
    exec(import_block, namespace)
    record = eval(record_block.strip().rstrip(","), namespace)
    # What pyvkgrad/__init__.py's import and __all__ lines do.
    monkeypatch.setattr(pyvkgrad, NAME, module.activation_leaky_relu_grad, raising=False)
    monkeypatch.setattr(pyvkgrad, "ActivationLeakyReluGradDesc",
                        module.ActivationLeakyReluGradDesc, raising=False)
    monkeypatch.setattr(pyvkgrad, "__all__",
                        pyvkgrad.__all__ + ["ActivationLeakyReluGradDesc", NAME])
    return record


def test_the_page_names_every_place_that_changes(example_build, leaky_relu):
    """What the example changes, found by the checks that would fail without it: the build's
    --check (its shader files: new kernels missing, and nothing else stale), the build (the
    generated SPIR-V: its two kernels, the manifest's two new entries, nothing else), the
    table's tests of one name per operator (the exports of pyvkgrad/__init__.py) and the page's
    Python blocks; the tests that enumerate kernels and operators (tests/test_kernels.py)
    cover the new ones unchanged. The page's table names exactly these files, with README.md
    and CHANGELOG.md (a row and a line)."""
    # Each kernel's SPIR-V, and the second the build makes of a kernel that converts to
    # float16 (leaky ReLU's alpha dY does: `<kernel>.rte16.spv`, docs/semantics.md §17).
    files = {f"{name}{suffix}.spv" for name in KERNELS for suffix in ("", ".rte16")}
    assert all("rte16_spirv_sha256" in example_build.manifest["kernels"][n] for n in KERNELS)
    assert example_build.check.returncode == 1
    assert env.check_problems(example_build.check.stderr) == {
        f"pyvkgrad/spirv/{name} is missing" for name in files} | {
        "pyvkgrad/spirv/manifest.json is stale"}
    before, after = example_build.before, example_build.after
    assert set(after) - set(before) == files
    assert {name for name in before if after[name] != before[name]} == {"manifest.json"}
    manifest = dict(example_build.manifest, kernels=dict(example_build.manifest["kernels"]))
    new_entries = {name: manifest["kernels"].pop(name) for name in KERNELS}
    assert manifest == json.loads(before["manifest.json"])
    assert {e["source"] for e in new_entries.values()} == example_build.added

    # Without the exports the one-name test fails; with them (the fixture) it passes.
    generic.test_one_name_per_operator(leaky_relu)
    # The kernel tests' helpers, unchanged, reach the new kernels and find them by name.
    used = test_kernels.plans_by_operator((leaky_relu,))
    assert used == {NAME: set(KERNELS)}
    test_kernels.assert_named_after_their_operators(used, example_build.manifest["kernels"],
                                                    example_build.tree)

    changed = (example_build.added | {"pyvkgrad/spirv/"} | {"pyvkgrad/__init__.py"}
               | set(doc_files()) | {"README.md", "CHANGELOG.md"})
    assert set(doc_table()) == changed


def test_its_interface_and_plans(leaky_relu):
    """Alpha is a float constant after the template's own, in both kernels; the plans pass it
    by name, the packed kernel for packed tensors and the strided one otherwise."""
    for name in KERNELS:
        iface = kernels.interface(name)
        assert [(c.name, c.type) for c in iface.constants][-1] == ("ALPHA", "float")
        assert [b.name for b in iface.bindings] == ["x", "dy", "dx"]
    d = TensorDesc(DataType.FLOAT16, (5, 7))
    packed = leaky_relu.descriptor(d, d, d, alpha=0.25).plan(Limits())
    assert [x.kernel for x in packed.dispatches] == [f"{NAME}_packed"]
    assert packed.dispatches[0].constant("ALPHA") == 0.25
    strided = leaky_relu.descriptor(TensorDesc(DataType.FLOAT16, (5, 7), (1, 5)), d, d)
    assert [x.kernel for x in strided.plan(Limits()).dispatches] == [NAME]
    assert strided.alpha == 0.01 and strided.IN_PLACE == pyvkgrad.ActivationReluGradDesc.IN_PLACE
    with pytest.raises(ValueError, match=r"^ACTIVATION_LEAKY_RELU_GRAD: Alpha must be finite"):
        leaky_relu.descriptor(d, d, d, alpha=float("nan"))
    with pytest.raises(TypeError, match=r"Alpha must be a number: expected float, got str"):
        leaky_relu.descriptor(d, d, d, alpha="0.1")


def test_its_own_tests(device, leaky_relu):
    namespace = {}
    exec(doc_files()[f"tests/test_{NAME}.py"], namespace)
    namespace["test_values"](device)


def test_the_oracle_takes_the_functions_arguments(leaky_relu):
    generic.test_the_oracle_takes_the_functions_arguments(leaky_relu)
    generic.test_every_data_type_has_a_tolerance(leaky_relu)


@pytest.mark.parametrize("dtype", operators.DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_rank_view_and_the_compiled_descriptor(device, rng, leaky_relu, dtype):
    generic.test_every_rank_against_the_oracle(device, rng, leaky_relu, dtype)
    for kind in VIEWS[1:]:
        generic.test_views_against_the_oracle(device, rng, leaky_relu, dtype, kind)
    generic.test_the_compiled_descriptor_against_the_oracle(device, rng, leaky_relu, dtype)


def test_the_one_call_cache(device, rng, leaky_relu):
    generic.test_a_repeat_hits_the_one_call_cache(device, rng, leaky_relu)


def test_beyond_the_buffer_limit(device, rng, leaky_relu, monkeypatch):
    generic.test_beyond_the_buffer_limit(device, rng, leaky_relu, monkeypatch)


def test_errors_before_device_work(device, rng, leaky_relu, monkeypatch):
    generic.test_one_call_errors_before_device_work(device, rng, leaky_relu, monkeypatch)


def test_in_place(device, rng, leaky_relu):
    """dX over dY (IN_PLACE, identical descriptors): each element read before it is written."""
    d = TensorDesc(DataType.FLOAT32, (3, 50))
    op = device.compile(leaky_relu.descriptor(d, d, d, alpha=0.5))
    x, dy = rng.standard_normal((2, 3, 50)).astype(np.float32)
    tx, tdy = device.upload(x), device.upload(dy)
    op(input_tensor=tx, input_gradient_tensor=tdy, output_gradient_tensor=tdy)
    operators.assert_close(leaky_relu, tdy.numpy(), (x, dy), dict(alpha=0.5), np.float32)
