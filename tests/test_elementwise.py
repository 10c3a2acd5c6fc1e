"""The element-wise base from outside: the worked example of docs/adding-an-operator.md (a
LeakyReLU grad with one scalar parameter, Alpha; not part of pyvkgrad) is built from the page's
own code blocks, its kernels compiled, and the operator table's generic tests run on its
record, so the recipe and the line counts the page gives stay true."""

import importlib.util
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
import test_operators as generic
from cases import VIEWS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs/adding-an-operator.md"
NAME = "activation_leaky_relu_grad"
KERNELS = (NAME, f"{NAME}_packed")


def doc_files():
    """path -> contents of the page's code blocks marked `file=path`."""
    return {path: body for path, body in
            re.findall(r"^```\w+ file=(\S+)\n(.*?)^```", DOC.read_text(), re.M | re.S)}


def test_the_page_counts_its_lines():
    """The page's table of files gives each block's length."""
    table = dict(re.findall(r"^\| `([^`]+)` \| \+?(\d+) \|", DOC.read_text(), re.M))
    files = doc_files()
    assert set(files) <= set(table) and len(files) == 7
    for path, body in files.items():
        assert int(table[path]) == len(body.splitlines()), path


def build_tool():
    spec = importlib.util.spec_from_file_location("build_shaders", ROOT / "tools/build_shaders.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def leaky_relu(monkeypatch, tmp_path):
    """The example's record, its kernels served from a temporary build."""
    if shutil.which("glslangValidator") is None:
        from conftest import IN_CI
        if IN_CI:
            pytest.fail("CI=true but glslangValidator is missing")
        pytest.skip("glslangValidator is not installed")
    files = doc_files()
    tool = build_tool()
    formula = f"shaders/include/{NAME}.glsl"
    (tmp_path / Path(formula).name).write_text(files[formula])  # found beside the kernels
    real_spirv, real_interface = kernels.spirv, kernels.interface
    built = {}
    for name in KERNELS:
        comp, spv = tmp_path / f"{name}.comp", tmp_path / f"{name}.spv"
        comp.write_text(files[f"shaders/{name}.comp"])
        res = subprocess.run([tool.COMPILER, *tool.FLAGS, "-o", str(spv), str(comp)], cwd=ROOT,
                             capture_output=True, text=True)
        assert res.returncode == 0 and "WARNING" not in res.stdout + res.stderr, \
            res.stdout + res.stderr
        data = spv.read_bytes()
        built[name] = (data, kernels.interface_of(name, tool.read_interface(data, name)))
    monkeypatch.setattr(kernels, "spirv",
                        lambda n: built[n][0] if n in built else real_spirv(n))
    monkeypatch.setattr(kernels, "interface",
                        lambda n: built[n][1] if n in built else real_interface(n))

    module = types.ModuleType(f"pyvkgrad.ops.{NAME}")
    module.__package__ = "pyvkgrad.ops"
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(files[f"pyvkgrad/ops/{NAME}.py"], f"pyvkgrad/ops/{NAME}.py", "exec"),
         vars(module))
    oracle_namespace = dict(vars(reference))
    exec(files["pyvkgrad/reference.py"], oracle_namespace)
    record = eval(files["pyvkgrad/operators.py"].strip().rstrip(","), dict(
        vars(operators), ActivationLeakyReluGradDesc=module.ActivationLeakyReluGradDesc,
        activation_leaky_relu_grad=module.activation_leaky_relu_grad,
        reference=types.SimpleNamespace(activation_leaky_relu_grad=oracle_namespace[NAME])))
    monkeypatch.setattr(pyvkgrad, NAME, module.activation_leaky_relu_grad, raising=False)
    monkeypatch.setattr(pyvkgrad, "ActivationLeakyReluGradDesc",
                        module.ActivationLeakyReluGradDesc, raising=False)
    return record


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
