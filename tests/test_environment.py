"""The test environment proves itself: a real Vulkan device, lavapipe in CI, kernels current."""

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IN_CI, SUBPROCESS_CWD
from pyvkgrad import operators

ROOT = Path(__file__).resolve().parent.parent

def build_tool(test):
    """A test of tools/build_shaders.py on the checkout or a copy of it: it makes no Vulkan
    call and tests no installed package, so tools/test's main pass runs it and the validation
    and installed-wheel passes leave it out (`-m "not build_tool"`). It needs glslangValidator,
    which a machine that only runs the shipped SPIR-V (a lent GPU box) may lack; CI has it
    (tools/test installs it), so CI never skips these."""
    needs_compiler = pytest.mark.skipif(
        not IN_CI and shutil.which("glslangValidator") is None,
        reason="glslangValidator is not installed (apt-get install glslang-tools spirv-tools)")
    return pytest.mark.build_tool(needs_compiler(test))


def test_canary_vulkan_device(device):
    """Fails (never skips) in CI when the suite does not run on a Vulkan device."""
    assert device.info.name
    assert device.info.subgroup_size >= 1


@pytest.mark.skipif(not IN_CI, reason="only CI must run on lavapipe")
def test_canary_ci_runs_on_lavapipe(device):
    assert "llvmpipe" in device.name, f"CI must test on lavapipe, got {device.name}"
    # The suite's own process takes the kernels' rte16 SPIR-V (tests/test_fingerprints.py
    # checks the integer rounding's bits in another): lavapipe can round float16 under
    # RoundingModeRTE, unless PYVKGRAD_FLOAT16_RTE=0 asks otherwise.
    if os.environ.get("PYVKGRAD_FLOAT16_RTE", "1").strip() != "0":
        assert device.limits.float16_rte, "lavapipe's float16 rounding under RoundingModeRTE"
        import pyvkgrad
        t = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT16, (8,))
        op = device.compile(pyvkgrad.AdamOptimizerDesc(
            t, t, t, t, pyvkgrad.TensorDesc(pyvkgrad.DataType.UINT32, (1,)), t, t, t, 0.001,
            0.9, 0.999, 1e-8))
        try:
            assert op.float16_rte, "a compiled operator on lavapipe runs its rte16 SPIR-V"
        finally:
            op.close()


@build_tool
def test_shipped_spirv_is_current():
    """`tools/build_shaders.py --check` passes on the committed SPIR-V."""
    res = subprocess.run([sys.executable, "tools/build_shaders.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def _copy_build_tree(tmp_path):
    """The shaders, the shipped SPIR-V and the build tool, copied into tmp_path/tree."""
    tree = tmp_path / "tree"
    for sub in ("shaders", "pyvkgrad/spirv", "tools"):
        (tree / sub).mkdir(parents=True)
    for f in (ROOT / "shaders").rglob("*"):
        dest = tree / f.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.is_file():
            dest.write_bytes(f.read_bytes())
    for f in (ROOT / "pyvkgrad/spirv").iterdir():
        (tree / "pyvkgrad/spirv" / f.name).write_bytes(f.read_bytes())
    (tree / "tools/build_shaders.py").write_bytes((ROOT / "tools/build_shaders.py").read_bytes())
    return tree


@build_tool
def test_check_reports_stale_and_orphan_spirv(tmp_path):
    """--check writes nothing and names the fixing command when SPIR-V is stale or orphaned."""
    tree = _copy_build_tree(tmp_path)
    check = [sys.executable, "tools/build_shaders.py", "--check"]
    assert subprocess.run(check, cwd=tree, capture_output=True).returncode == 0

    formula = tree / "shaders/elementwise/activation_relu_grad.glsl"  # the ReLU kernels' formula
    assert "0x7F800000u" in formula.read_text()
    formula.write_text(formula.read_text().replace("0x7F800000u", "0x7F800001u"))
    (tree / "pyvkgrad/spirv/orphan.spv").write_bytes(b"\x03\x02\x23\x07")
    before = {p: p.read_bytes() for p in (tree / "pyvkgrad/spirv").iterdir()}
    res = subprocess.run(check, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 1
    assert "activation_relu_grad.spv is stale" in res.stderr
    assert "activation_relu_grad_packed.spv is stale" in res.stderr
    assert "orphan.spv has no source" in res.stderr
    assert "fix: python tools/build_shaders.py" in res.stderr
    assert {p: p.read_bytes() for p in (tree / "pyvkgrad/spirv").iterdir()} == before


@build_tool
def test_a_kernel_that_converts_halves_ships_its_rte16_spirv(tmp_path):
    """A kernel that converts to float16 ships a second SPIR-V, `<kernel>.rte16.spv`, whose
    hash the manifest records: --check finds it stale or missing like the first; a kernel
    that stops converting loses it (the build removes it, --check calls it an orphan); a
    direct packHalf2x16 call, which RoundingModeRTE does not govern, is refused."""
    tree = _copy_build_tree(tmp_path)
    spirv = tree / "pyvkgrad/spirv"
    manifest = json.loads((spirv / "manifest.json").read_text())["kernels"]
    assert "rte16_spirv_sha256" in manifest["adam_optimizer"]
    assert "rte16_spirv_sha256" not in manifest["slice_grad"]  # converts nothing
    check = [sys.executable, "tools/build_shaders.py", "--check"]
    (spirv / "adam_optimizer.rte16.spv").unlink()
    res = subprocess.run(check, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 1
    assert check_problems(res.stderr) == {"pyvkgrad/spirv/adam_optimizer.rte16.spv is missing"}

    build = [sys.executable, "tools/build_shaders.py"]
    assert subprocess.run(build, cwd=tree, capture_output=True).returncode == 0
    # LRN's output kernel converts through half_from_float alone: made to store float32 bits,
    # it converts nothing.
    lrn = tree / "shaders/local_response_normalization_grad_output.comp"
    text = lrn.read_text()
    store = "half_from_float(result)"
    assert store in text
    lrn.write_text(text.replace(store, "floatBitsToUint(result)"))
    res = subprocess.run(build, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert not (spirv / "local_response_normalization_grad_output.rte16.spv").exists()
    assert "removed pyvkgrad/spirv/local_response_normalization_grad_output.rte16.spv" \
        in res.stdout
    (spirv / "local_response_normalization_grad_output.rte16.spv").write_bytes(
        (spirv / "adam_optimizer.rte16.spv").read_bytes())
    res = subprocess.run(check, cwd=tree, capture_output=True, text=True)
    assert "local_response_normalization_grad_output.rte16.spv has no source" in res.stderr

    lrn.write_text(text.replace(store, "(packHalf2x16(vec2(result, 0.0)) & 0xFFFFu)"))
    res = subprocess.run(build, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 2 and "still calls packHalf2x16" in res.stderr, res.stderr


def check_problems(stderr):
    """The problems `build_shaders.py --check` lists, one a line."""
    return {line.strip() for line in stderr.splitlines()[1:] if not line.startswith("fix:")}


@build_tool
def test_a_formula_is_an_operators_only_shader_file(tmp_path):
    """The build generates an element-wise formula's two kernels: --check finds a new
    formula's kernels missing and nothing else stale; the build adds their SPIR-V and their
    manifest entries and changes nothing else. A .comp named as a generated kernel is
    refused."""
    tree = _copy_build_tree(tmp_path)
    relu = (tree / "shaders/elementwise/activation_relu_grad.glsl").read_text()
    (tree / "shaders/elementwise/copy_grad.glsl").write_text(relu)
    check = [sys.executable, "tools/build_shaders.py", "--check"]
    res = subprocess.run(check, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 1
    assert check_problems(res.stderr) == {"pyvkgrad/spirv/copy_grad.spv is missing",
                                          "pyvkgrad/spirv/copy_grad_packed.spv is missing",
                                          "pyvkgrad/spirv/manifest.json is stale"}
    spirv = tree / "pyvkgrad/spirv"
    before = {p.name: p.read_bytes() for p in spirv.iterdir()}
    res = subprocess.run([sys.executable, "tools/build_shaders.py"], cwd=tree,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    after = {p.name: p.read_bytes() for p in spirv.iterdir()}
    assert set(after) - set(before) == {"copy_grad.spv", "copy_grad_packed.spv"}
    assert after["copy_grad.spv"] == before["activation_relu_grad.spv"]  # comments only differ
    assert {k: v for k, v in after.items() if k in before and v != before[k]} \
        == {"manifest.json": after["manifest.json"]}
    old, new = (json.loads(m["manifest.json"]) for m in (before, after))
    added = {k: new["kernels"].pop(k) for k in ("copy_grad", "copy_grad_packed")}
    assert new == old
    assert added["copy_grad_packed"]["source"] == "shaders/elementwise/copy_grad.glsl"
    assert added["copy_grad_packed"]["generated"] == "packed"
    assert subprocess.run(check, cwd=tree, capture_output=True).returncode == 0

    (tree / "shaders/copy_grad_packed.comp").write_text("#version 450\n")
    res = subprocess.run(check, cwd=tree, capture_output=True, text=True)
    assert res.returncode == 2
    assert ("kernel copy_grad_packed has two sources: shaders/copy_grad_packed.comp and "
            "shaders/elementwise/copy_grad.glsl") in res.stderr


@build_tool
def test_check_reports_a_manifest_whose_interface_differs_from_the_spirv(tmp_path):
    """The runtime resolves constant names to ids from the manifest, so --check proves the
    manifest describes the shipped SPIR-V: here two constants' ids swapped by hand."""
    tree = _copy_build_tree(tmp_path)
    manifest = tree / "pyvkgrad/spirv/manifest.json"
    data = json.loads(manifest.read_text())
    constants = data["kernels"]["activation_relu_grad"]["constants"]
    constants[10]["id"], constants[18]["id"] = constants[18]["id"], constants[10]["id"]
    manifest.write_text(json.dumps(data, indent=2) + "\n")
    res = subprocess.run([sys.executable, "tools/build_shaders.py", "--check"], cwd=tree,
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert ("pyvkgrad/spirv/manifest.json: the interface recorded for activation_relu_grad "
            "differs from pyvkgrad/spirv/activation_relu_grad.spv's") in res.stderr


_HEAD = "#version 450\nlayout(local_size_x_id = 0) in;\n"


@build_tool
@pytest.mark.parametrize("body, message", [
    ("layout(constant_id = 2) const uint A = 1;\n"
     "layout(set = 0, binding = 0) buffer B { uint b[]; };\nvoid main() { b[0] = A; }\n",
     "constant ids must run 0..1 without gaps"),
    ("layout(set = 0, binding = 1) buffer B { uint b[]; };\nvoid main() { b[0] = 1u; }\n",
     "bindings must run 0..0 without gaps"),
    ("layout(set = 0, binding = 0) buffer B { uint b[]; };\n"
     "layout(set = 0, binding = 0) buffer C { uvec2 c[]; };\nvoid main() { b[0] = c[0].x; }\n",
     "one must carry the binding's name and the others '<name>_<view>'"),
])
def test_build_refuses_an_interface_plans_cannot_name(tmp_path, body, message):
    """The rules the runtime relies on are checked when the kernel is built."""
    tree = tmp_path / "tree"
    (tree / "shaders/include").mkdir(parents=True)
    (tree / "tools").mkdir()
    (tree / "pyvkgrad/spirv").mkdir(parents=True)
    (tree / "tools/build_shaders.py").write_bytes((ROOT / "tools/build_shaders.py").read_bytes())
    (tree / "shaders/bad.comp").write_text(_HEAD + body)
    res = subprocess.run([sys.executable, "tools/build_shaders.py"], cwd=tree,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "shaders/bad.comp" in res.stderr and message in res.stderr, \
        res.stderr


@build_tool
def test_compile_error_names_file_and_message(tmp_path):
    tree = tmp_path / "tree"
    (tree / "shaders/include").mkdir(parents=True)
    (tree / "tools").mkdir()
    (tree / "pyvkgrad/spirv").mkdir(parents=True)
    (tree / "tools/build_shaders.py").write_bytes((ROOT / "tools/build_shaders.py").read_bytes())
    (tree / "shaders/broken.comp").write_text(
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undefined_name = 1; }\n")
    res = subprocess.run([sys.executable, "tools/build_shaders.py"], cwd=tree,
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert "shaders/broken.comp: compilation failed" in res.stderr
    assert "undefined_name" in res.stderr
    assert not (tree / "pyvkgrad/spirv/broken.spv").exists()


def test_missing_vulkan_device_error_names_lavapipe_package():
    code = ("import pyvkgrad\n"
            "try:\n    pyvkgrad.default_device()\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, VK_DRIVER_FILES="/nonexistent/icd.json",
               VK_ICD_FILENAMES="/nonexistent/icd.json")
    env.pop("VK_INSTANCE_LAYERS", None)
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=SUBPROCESS_CWD,
                         capture_output=True, text=True)
    assert "DeviceError" in res.stdout and "mesa-vulkan-drivers" in res.stdout, res.stdout + res.stderr


# A machine without the Vulkan loader, as pyvkgrad sees it: the loader's name is one no library
# has (the runtime opens the same library, and is asked only after this check).
_HIDE_LOADER = ("from pyvkgrad import _vulkan_info\n"
                "_vulkan_info.LOADER_NAMES = ('libvulkan-hidden-by-the-test.so.1',)\n")


def test_missing_vulkan_loader_is_one_clear_error():
    """Without a loader pyvkgrad and its runtime still import; the first device use raises
    DeviceError naming the loader's library and what to install, on every path to a device."""
    code = _HIDE_LOADER + (
        "import pyvkgrad, pyvkgrad.runtime\n"
        "from pyvkgrad.runtime import Runtime\n"
        "for call in (pyvkgrad.devices, pyvkgrad.default_device, lambda: Runtime(0)):\n"
        "    try:\n        call()\n"
        "    except Exception as e:\n        print(type(e).__name__, e)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=SUBPROCESS_CWD,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 3, res.stdout
    for line in lines:
        assert line.startswith("DeviceError no Vulkan loader (libvulkan-hidden-by-the-test.so.1):"
                               " install the Vulkan loader"), line
        if sys.platform.startswith("linux"):
            assert "apt-get install libvulkan1" in line, line


def _cli_info_last_line(code: str, **env) -> "subprocess.CompletedProcess":
    code += "import sys\nfrom pyvkgrad.__main__ import main\nsys.exit(main(['info']))\n"
    environ = dict(os.environ, **env)
    environ.pop("VK_INSTANCE_LAYERS", None)
    return subprocess.run([sys.executable, "-c", code], env=environ, cwd=SUBPROCESS_CWD,
                          capture_output=True, text=True, timeout=120)


def test_cli_info_without_a_loader_says_so_in_one_line():
    res = _cli_info_last_line(_HIDE_LOADER)
    assert res.returncode == 1 and not res.stderr, res.stdout + res.stderr
    assert "runtime: kp 0.9.0 with pyvkgrad's patch" in res.stdout  # the runtime imports
    last = res.stdout.splitlines()[-1]
    assert last.startswith("vulkan: no Vulkan loader (libvulkan-hidden-by-the-test.so.1): "
                           "install the Vulkan loader"), res.stdout


def test_cli_info_without_a_driver_says_so_in_one_line(tmp_path):
    bogus = str(tmp_path / "nonexistent.json")
    res = _cli_info_last_line("", VK_ICD_FILENAMES=bogus, VK_DRIVER_FILES=bogus)
    assert res.returncode == 1 and not res.stderr, res.stdout + res.stderr
    last = res.stdout.splitlines()[-1]
    assert last.startswith("vulkan: vkCreateInstance failed with VK_ERROR_INCOMPATIBLE_DRIVER: "
                           "no Vulkan driver (ICD) is installed or usable: install Mesa's"), \
        res.stdout


@pytest.mark.skipif("VK_LAYER_KHRONOS_validation" not in os.environ.get("VK_INSTANCE_LAYERS", ""),
                    reason="the validation pass of tools/test sets VK_INSTANCE_LAYERS")
def test_validation_layer_is_loaded_in_the_validation_pass(device):
    """The validation pass really validates this process (not just the canary's)."""
    device.runtime()
    with open("/proc/self/maps") as f:
        assert "libVkLayer_khronos_validation" in f.read()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pyvkgrad", *args], cwd=SUBPROCESS_CWD,
                          capture_output=True, text=True, timeout=300)


def test_cli_info_reports_the_default_device(device):
    """`python -m pyvkgrad info` names the default device and every row of its report, and
    lists every operator of the table with its one-call signature."""
    res = _cli("info")
    assert res.returncode == 0, res.stderr
    assert f"{device.name}  (default)" in res.stdout
    for row in ("vendor", "driver", "vulkan", "subgroup size", "subgroup operations",
                "max storage buffer range",
                "storage buffers a shader", "max workgroup count", "shared memory",
                "timestamps", "float atomic add", "loop limit", "submission wait"):
        assert f"  {row} " in res.stdout, (row, res.stdout)
    for record in operators.OPERATORS:
        signature = str(inspect.signature(record.function)).split(" ->")[0]
        assert f"  pyvkgrad.{record.name}{signature}\n" in res.stdout, res.stdout
        assert f"DML_OPERATOR_{record.OPERATOR}, {record.descriptor.__name__}" in res.stdout
        # the ranks the descriptor takes (pooling 4 to 5, not 1 to 5)
        assert f", {record.min_rank} to {record.max_rank} dimensions;" in res.stdout, record.name


@pytest.mark.parametrize("args", [("demo", "--device", "99"), ("demo", "--device", "no-such"),
                                  ("fingerprint", "--device", "99"),
                                  ("fingerprint", "--check", "/no/such/file.json"),
                                  ("fingerprint", "--write", "/no/such/dir/f.json")])
def test_cli_arguments_naming_nothing_are_one_line_errors(device, args):
    """A device index out of range, a name no device has, a file or directory that is not
    there: argparse's one-line error and 2, before any case runs, not a traceback."""
    res = _cli(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "error: " in res.stderr.splitlines()[-1]
    assert res.stdout == ""


def test_cli_fingerprint_files_and_the_device_variable_are_checked_first(device, tmp_path,
                                                                           monkeypatch):
    """A --check file that is not a fingerprint file, a --write path that is a directory, an
    empty --device, and PYVKGRAD_DEVICE naming nothing (named as the source): one line, 2."""
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "dict.json").write_text('{"x": 1}')
    for args, says in [(("--check", str(tmp_path / "list.json")), "not a fingerprint file"),
                       (("--check", str(tmp_path / "dict.json")), "not a fingerprint file"),
                       (("--write", str(tmp_path)), "not a file that can be written"),
                       (("--device=",), "--device: a device name must not be empty")]:
        res = _cli("fingerprint", *args)
        assert res.returncode == 2 and says in res.stderr.splitlines()[-1], res.stderr
    monkeypatch.setenv("PYVKGRAD_DEVICE", "no-such-device")
    for command in ("demo", "fingerprint"):
        res = _cli(command)
        assert res.returncode == 2, res.stderr
        assert "error: PYVKGRAD_DEVICE: no Vulkan device name" in res.stderr.splitlines()[-1]


def test_cli_info_with_a_device_variable_naming_nothing(device, monkeypatch):
    monkeypatch.setenv("PYVKGRAD_DEVICE", "no-such-device")
    res = _cli("info")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stdout.splitlines()[-1].startswith("PYVKGRAD_DEVICE: no Vulkan device name")



def test_cli_demo_checks_every_operator(device):
    """`python -m pyvkgrad demo` (what tools/demo runs) runs each operator, in each of its data
    types, against the oracle."""
    res = _cli("demo")
    assert res.returncode == 0, res.stderr
    assert device.name in res.stdout
    lines = res.stdout.splitlines()
    for record in operators.OPERATORS:
        rows = [line for line in lines if line.startswith(record.OPERATOR + " ")]
        assert len(rows) == len(record.dtypes), (record.OPERATOR, res.stdout)
        assert not any("FAIL" in row for row in rows), res.stdout
