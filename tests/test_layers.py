"""The floors of docs/architecture.md hold: every module is listed there, imports at import
time only modules listed before it (upward imports only inside functions, where the page
allows them), and importing the descriptors, plans, kernel interfaces, state model and operator
table loads no Vulkan runtime."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from conftest import SUBPROCESS_CWD

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyvkgrad"
PAGE = ROOT / "docs" / "architecture.md"


def section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else None]


def floors():
    """Module names in import order, floor by floor, from the page's table."""
    order = []
    for row in re.findall(r"^\| \d\. [^|]+\| ([^|]+) \|", section("Floors"), re.M):
        order += re.findall(r"`([\w.]+)`", row)
    return order


def allowed_upward():
    """(module, imported) pairs the page lets reach up inside a function."""
    pairs = set()
    for module, imports in re.findall(r"^\| `([\w.]+)` \| ([^|]+) \|", section("Reaching up"),
                                      re.M):
        pairs |= {(module, name) for name in re.findall(r"`([\w.]+)`", imports)}
    return pairs


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "pyvkgrad"


def imports(path: Path):
    """(imported module name, at import time?) for each pyvkgrad import of the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    package = "" if package == "pyvkgrad" else package  # relative to the package
    tree = ast.parse(path.read_text())
    checking = set()
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` blocks do not run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            checking |= {id(n) for b in node.body for n in ast.walk(b)}
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function |= {id(n) for n in ast.walk(node) if n is not node}
    found = []
    for node in ast.walk(tree):
        if id(node) in checking or not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package.split(".") if package else []
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        target = ".".join(base + ([node.module] if node.module else []))
        names = [target] if node.module else [".".join(base + [a.name]) for a in node.names]
        for n in names:
            # `from . import x` of a submodule (`_kompute`: the compiled runtime), else of a
            # name in the module itself
            path = PACKAGE / n.replace(".", "/")
            if not (path.with_suffix(".py").exists() or path.is_dir() or n == "_kompute"):
                n = n.rpartition(".")[0]
            found.append((n or "pyvkgrad", id(node) not in in_function))
    return found


def sources():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_module_is_on_a_floor():
    order = floors()
    assert len(order) == len(set(order)), "a module is listed twice"
    assert {module_name(p) for p in sources()} - {"__main__"} <= set(order) | {"__main__"}
    assert set(order) == {module_name(p) for p in sources()}, \
        sorted(set(order) ^ {module_name(p) for p in sources()})


def test_imports_go_down_the_floors():
    order = {name: i for i, name in enumerate(floors())}
    upward = allowed_upward()
    used = set()
    for path in sources():
        name = module_name(path)
        for target, at_import in imports(path):
            if target not in order:  # e.g. `_kompute`, the compiled runtime
                assert (name, target) in upward, f"{name} imports {target}, on no floor"
                used.add((name, target))
                continue
            if order[target] < order[name] or target == name:
                continue
            assert not at_import, f"{name} imports {target} (a later module) at import time"
            assert (name, target) in upward, f"{name} reaches up to {target} (not on the page)"
            used.add((name, target))
    assert used == upward, f"the page allows reaches nobody makes: {sorted(upward - used)}"


def test_descriptors_plans_and_the_table_load_no_vulkan():
    """Importing the descriptor, plan, kernel-interface, state and operator-table modules (and
    building a plan) loads neither the compiled runtime, nor the Vulkan loader, nor the device
    layer."""
    code = """
import sys
import pyvkgrad, pyvkgrad._state, pyvkgrad.tensor, pyvkgrad.plan, pyvkgrad.kernels
import pyvkgrad.operators, pyvkgrad.reference
from pyvkgrad.plan import Limits
d = pyvkgrad.TensorDesc(pyvkgrad.DataType.FLOAT32, (3, 5))
pyvkgrad.ActivationReluGradDesc(d, d, d).plan(Limits())
loaded = sorted(m for m in sys.modules if m.startswith("pyvkgrad.") and m.split(".")[1] in (
    "_kompute", "runtime", "_vulkan_structs", "_vulkan_info", "_context", "device_tensor",
    "recording", "compiled_operator", "one_call_cache", "device"))
maps = open("/proc/self/maps").read() if sys.platform.startswith("linux") else ""
print(loaded, "libvulkan" in maps)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=SUBPROCESS_CWD)
    assert out.stdout.strip() == "[] False", out.stdout + out.stderr
