"""The package and its runtime: pyvkgrad's own Kompute build (pyvkgrad._kompute), the import
check, kp's managed-object lists that no longer grow, the metadata, the command line, and a
repository that refers only to itself.

tools/test_wheel runs the suite against the built wheel installed in a fresh venv with
PYVKGRAD_EXPECT_INSTALLED=1; the tests marked for it check that this is what was imported.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyvkgrad
from pyvkgrad._kompute_check import PATCH_LEVEL

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(pyvkgrad.__file__).resolve().parent
EXPECT_INSTALLED = os.environ.get("PYVKGRAD_EXPECT_INSTALLED") == "1"


# -- the runtime -----------------------------------------------------------------------------

def test_runtime_is_pyvkgrads_own_build():
    from pyvkgrad import _kompute
    from pyvkgrad.runtime import kp
    assert kp is _kompute
    assert kp.__name__ == "pyvkgrad._kompute"
    assert kp.pyvkgrad_patch == PATCH_LEVEL
    assert hasattr(kp, "OpMemoryBarrier") and hasattr(kp.Sequence, "set_wait_spin")
    assert "kp" not in sys.modules, "a stock kp was imported"


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_runtime_opens_the_vulkan_loader_only_for_a_device(device):
    """The runtime links no libvulkan (patch part 14: the wheel installs and imports without a
    Vulkan loader); the loader is opened when a device is."""
    code = ("import pyvkgrad._kompute, pyvkgrad.runtime\n"
            "loaded = lambda: 'libvulkan' in open('/proc/self/maps').read()\n"
            "print(loaded())\n"
            "pyvkgrad.runtime.Runtime(0).close()\n"
            "print(loaded())\n")
    res = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, "
                          f"{str(PACKAGE.parent)!r})\n" + code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True"], res.stdout


def _tree_without_runtime(tmp_path: Path) -> Path:
    """A copy of the package with no compiled runtime: a checkout nobody built."""
    shutil.copytree(PACKAGE, tmp_path / "pyvkgrad",
                    ignore=shutil.ignore_patterns("_kompute*", ".kompute-key", "__pycache__"))
    return tmp_path


def test_checkout_without_its_runtime_refuses_to_import(tmp_path):
    tree = _tree_without_runtime(tmp_path)
    res = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tree)!r})"
                          "\nimport pyvkgrad"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert f"ImportError: pyvkgrad at {tree / 'pyvkgrad'} has no compiled runtime" in res.stderr
    for advice in ("./tools/test or ./tools/demo", "pip install"):
        assert advice in res.stderr, res.stderr


def test_tests_fail_rather_than_skip_without_the_runtime(tmp_path):
    """pytest in a checkout without its runtime fails: nothing skips as if no device were
    there."""
    tree = _tree_without_runtime(tmp_path)
    (tree / "tests").mkdir()
    for name in ("conftest.py", "test_device.py"):
        shutil.copy(ROOT / "tests" / name, tree / "tests" / name)
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("CI", None)  # outside CI, where a missing device skips
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "tests"], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0, res.stdout
    assert "has no compiled runtime" in res.stdout and "skipped" not in res.stdout, res.stdout


def test_round_trip_is_exact_under_this_numpy():
    from pyvkgrad import _kompute
    from pyvkgrad._kompute_check import compare
    sent = np.arange(1000, dtype=np.uint32) * np.uint32(2654435761)
    back = _kompute._round_trip_u32(sent)
    assert compare(sent, back) == ""
    with pytest.raises(RuntimeError, match="uint32"):
        _kompute._round_trip_u32(np.zeros(3, dtype=np.float32))


class _FakeRuntime:
    """A runtime whose round trip misbehaves the way a too-old pybind11 does under numpy 2."""
    __file__ = "fake_kompute.so"
    pyvkgrad_patch = PATCH_LEVEL

    def __init__(self, mangle):
        self._mangle = mangle

    def _round_trip_u32(self, data):
        return self._mangle(np.array(data))


@pytest.mark.parametrize("mangle, message", [
    (lambda a: np.lib.stride_tricks.as_strided(a, strides=(0,)), "strides"),
    (lambda a: a[::-1].copy(), "values"),
    (lambda a: a.astype(np.int64), "dtype"),
    (lambda a: a.reshape(2, -1), "shape"),
    (lambda a: a.tolist(), "not a numpy array"),
])
def test_import_check_refuses_a_runtime_that_returns_wrong_arrays(mangle, message):
    from pyvkgrad._kompute_check import check
    with pytest.raises(ImportError, match=message) as info:
        check(_FakeRuntime(mangle))
    assert "pybind11" in str(info.value) and np.__version__ in str(info.value)


def test_import_check_refuses_an_older_patch_level():
    from pyvkgrad._kompute_check import check

    class Stock:
        pass

    with pytest.raises(ImportError, match="patch level 0"):
        check(Stock())
    broken = _FakeRuntime(lambda a: a)
    broken._round_trip_u32 = lambda data: (_ for _ in ()).throw(ValueError("boom"))
    with pytest.raises(ImportError, match="boom"):
        check(broken)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
@pytest.mark.skipif("VK_LAYER_KHRONOS_validation" in os.environ.get("VK_INSTANCE_LAYERS", ""),
                    reason="the validation layer keeps memory of its own per object")
def test_managed_objects_do_not_leak(device):
    """kp's Manager kept a weak_ptr to every tensor, algorithm and sequence it ever made (about
    0.5 KB per create/destroy cycle, for good); the patch prunes them. Algorithms here get no
    SPIR-V, so no pipeline is built: what is measured is kp's own bookkeeping. (Building and
    destroying a compute pipeline on lavapipe, Mesa 22.3, keeps about 120 KB in the driver,
    with raw Vulkan too; pyvkgrad caches its pipelines.)"""
    from pyvkgrad import _kompute as kp
    mgr = kp.Manager(device.index)
    words = np.zeros(4, dtype=np.uint32)
    spec = np.array([64], dtype=np.uint32)
    push = np.array([4, 0], dtype=np.uint32)

    def cycles(n):
        for _ in range(n):
            t = mgr.tensor_t(words)
            a = mgr.algorithm([t], b"", [1, 1, 1], spec, push)
            s = mgr.sequence()
            s.destroy()
            a.destroy()
            t.destroy()

    cycles(1000)  # warm-up: allocator pools, pybind11 type caches
    counts, rss = [], []
    for i in range(6):
        cycles(1000)
        counts.append((i + 1) * 1000)
        rss.append(_rss_bytes())
    slope = np.polyfit(counts, rss, 1)[0]
    mgr.destroy()
    # Unpruned lists grow by several hundred bytes per cycle; allow noise well below that.
    assert slope < 64, f"RSS grows {slope:.0f} bytes per tensor+algorithm+sequence cycle: {rss}"


# -- what was imported ------------------------------------------------------------------------

@pytest.mark.skipif(not EXPECT_INSTALLED, reason="tools/test_wheel's installed-wheel passes")
def test_installed_package_is_the_one_under_test():
    assert ROOT not in PACKAGE.parents, f"pyvkgrad was imported from the checkout: {PACKAGE}"
    assert "site-packages" in PACKAGE.parts
    from importlib.metadata import files, version
    assert version("pyvkgrad") == pyvkgrad.__version__
    shipped = {str(f) for f in files("pyvkgrad")}
    assert "pyvkgrad/py.typed" in shipped
    assert "pyvkgrad/spirv/manifest.json" in shipped
    assert "pyvkgrad/KOMPUTE-LICENSE" in shipped
    assert any(re.fullmatch(r"pyvkgrad/_kompute\..*\.so", f) for f in shipped)
    kernels = json.loads((PACKAGE / "spirv" / "manifest.json").read_text())["kernels"]
    assert kernels
    for name, entry in kernels.items():
        assert f"pyvkgrad/spirv/{name}.spv" in shipped, name
        if "rte16_spirv_sha256" in entry:  # its second SPIR-V (float16 rounded by the device)
            assert f"pyvkgrad/spirv/{name}.rte16.spv" in shipped, name


def test_package_ships_its_typing_marker_and_kernels():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "spirv" / "manifest.json").is_file()
    assert list((PACKAGE / "spirv").glob("*.spv"))


def test_public_functions_are_annotated():
    """py.typed promises types: every one-call function of the operator table, and
    get_device, annotates every parameter and its result, and the names resolve."""
    import inspect
    import typing

    from pyvkgrad import device, operators
    for fn in [record.function for record in operators.OPERATORS] + [pyvkgrad.get_device]:
        sig = inspect.signature(fn)
        missing = [n for n, p in sig.parameters.items() if p.annotation is inspect.Parameter.empty]
        assert not missing, f"{fn.__name__}: unannotated {missing}"
        assert sig.return_annotation is not inspect.Signature.empty, fn.__name__
        module = sys.modules[fn.__module__]
        hints = typing.get_type_hints(fn, {**vars(module), "DeviceLike": device.DeviceLike,
                                           "Device": device.Device})
        assert set(hints) == set(sig.parameters) | {"return"}, fn.__name__


# -- the command line ---------------------------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pyvkgrad", *args], cwd=cwd or PACKAGE.parent,
                          check=False,
                          capture_output=True, text=True, timeout=300)


def test_cli_version():
    res = _cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"pyvkgrad {pyvkgrad.__version__}"


@pytest.mark.parametrize("args", [("--bogus",), ("info", "--bogus"), ("demo", "--fast"),
                                  ("nonsense",)])
def test_cli_unknown_arguments_are_errors(args):
    res = _cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "error" in res.stderr


def test_cli_info_prints_versions_and_the_fast_runtime(device):
    res = _cli("info")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"pyvkgrad {pyvkgrad.__version__} ({PACKAGE})" in out
    assert f"runtime: kp 0.9.0 with pyvkgrad's patch, level {PATCH_LEVEL}" in out
    assert "fast runtime: yes" in out
    assert f"numpy {np.__version__}" in out
    assert "Python %d.%d.%d" % sys.version_info[:3] in out


def test_cli_bench_outside_a_repository_says_it_needs_one(tmp_path):
    if (PACKAGE.parent / "benchmarks" / "run.py").is_file():
        pytest.skip("pyvkgrad runs from its repository here")
    res = _cli("bench", "--quick", cwd=tmp_path)
    assert res.returncode == 1
    assert "needs pyvkgrad's source repository" in res.stderr


# -- the metadata and the repository --------------------------------------------------------------

def _pyproject() -> str:
    return (ROOT / "pyproject.toml").read_text()


def test_metadata_version_in_one_place():
    text = _pyproject()
    assert 'dynamic = ["version"]' in text and "\nversion =" not in text
    assert re.search(r'^__version__ = "[^"]+"$', (PACKAGE / "__init__.py").read_text(), re.M)


def test_dependencies_allow_numpy_2_and_no_stock_kp():
    text = _pyproject()
    deps = re.search(r"^dependencies = \[(.*?)\]", text, re.M | re.S).group(1)
    assert '"numpy>=1.22"' in deps
    assert "<2" not in deps and "kp" not in deps
    assert re.search(r'"pybind11>=2\.1[2-9]', text)
    assert "Programming Language :: Python :: 3.13" in text
    assert "[project.urls]" in text and "[project.optional-dependencies]" in text


_OUTSIDE = re.compile(r"\.\./shared|shared/spec|spec/dml-semantics|spec/DECISIONS|"
                      r"(?<![\w/])DECISIONS\.md|kompute\.md|/work/")


_PENDING = set()  # (file, line) pairs allowed to point outside, while they are reworked


def test_references_stay_inside_the_repository():
    """Docstrings, comments, scripts and documents point into the repository (docs/)."""
    roots = ["pyvkgrad", "shaders", "tools", "docs", "benchmarks", "README.md", "CHANGELOG.md",
             "CMakeLists.txt", "pyproject.toml"]
    found = []
    for name in roots:
        path = ROOT / name
        if not path.exists():
            pytest.skip("runs in a checkout")
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for f in files:
            if f.suffix in (".spv", ".so", ".png", ".json", ".pyc") or f == Path(__file__):
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if _OUTSIDE.search(line) and (str(f.relative_to(ROOT)),
                                              line.strip()) not in _PENDING:
                    found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_repository_documents_exist():
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("runs in a checkout")
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    semantics = (ROOT / "docs" / "semantics.md").read_text()
    for heading in ("ACTIVATION_RELU_GRAD", "RESAMPLE_GRAD", "BATCH_NORMALIZATION_GRAD",
                    "BATCH_NORMALIZATION_TRAINING_GRAD", "Choices where DirectML is silent",
                    "Aliasing"):
        assert re.search(rf"^## (\d+\. )?{heading}$", semantics, re.M), heading
