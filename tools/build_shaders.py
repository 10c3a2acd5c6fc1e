#!/usr/bin/env python3
"""Compile shaders/*.comp to pyvkgrad/spirv/<name>.spv and write pyvkgrad/spirv/manifest.json.

    python tools/build_shaders.py           rebuild every kernel
    python tools/build_shaders.py --check   write nothing; exit 1 if any SPIR-V is stale,
                                            missing or has no source, naming the fixing command

Each kernel is compiled with `glslangValidator -V --target-env vulkan1.1` (kp's instance is
Vulkan 1.1, so SPIR-V 1.3 at most), warnings are errors, and the result must pass `spirv-val`.
The SPIR-V is committed and shipped as package data, so users need no compiler.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHADERS = ROOT / "shaders"
INCLUDE = SHADERS / "include"
SPIRV = ROOT / "pyvkgrad" / "spirv"
MANIFEST = SPIRV / "manifest.json"
COMPILER = "glslangValidator"
FLAGS = ["-V", "--target-env", "vulkan1.1", "-I" + "shaders/include"]
FIX = "python tools/build_shaders.py"


class BuildError(Exception):
    pass


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise BuildError(f"{cmd[0]} not found: install Debian's glslang-tools and spirv-tools "
                         f"(apt-get install glslang-tools spirv-tools)") from e


def compiler_version() -> str:
    out = _run([COMPILER, "--version"]).stdout
    return out.splitlines()[0].strip() if out else "unknown"


def source_hash(comp: Path) -> str:
    """Hash of the kernel source and every shared include (an include change rebuilds all)."""
    h = hashlib.sha256(comp.read_bytes())
    for inc in sorted(INCLUDE.glob("*.glsl")):
        h.update(inc.name.encode() + inc.read_bytes())
    return h.hexdigest()


def compile_one(comp: Path, out: Path) -> None:
    rel = comp.relative_to(ROOT)
    res = _run([COMPILER, *FLAGS, "-o", str(out), str(rel)])
    text = (res.stdout + res.stderr).strip()
    # glslangValidator echoes the file name on success; anything else is a diagnostic.
    diagnostics = [line for line in text.splitlines() if line.strip() and line.strip() != str(rel)]
    if res.returncode != 0 or any("WARNING" in d or "ERROR" in d for d in diagnostics):
        raise BuildError(f"{rel}: compilation failed (warnings are errors):\n" + "\n".join(diagnostics))
    val = _run(["spirv-val", "--target-env", "vulkan1.1", str(out)])
    if val.returncode != 0:
        raise BuildError(f"{rel}: spirv-val rejected the SPIR-V:\n{(val.stdout + val.stderr).strip()}")


def build(check: bool) -> int:
    sources = sorted(SHADERS.glob("*.comp"))
    version = compiler_version()
    manifest = {"compiler": version, "flags": FLAGS, "kernels": {}}
    problems = []
    old = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    same_compiler = old.get("compiler") == version and old.get("flags") == FLAGS
    with tempfile.TemporaryDirectory() as tmp:
        for comp in sources:
            name = comp.stem
            spv = Path(tmp) / f"{name}.spv"
            compile_one(comp, spv)
            data = spv.read_bytes()
            manifest["kernels"][name] = {
                "source": str(comp.relative_to(ROOT)),
                "source_sha256": source_hash(comp),
                "spirv_sha256": hashlib.sha256(data).hexdigest(),
            }
            shipped = SPIRV / f"{name}.spv"
            if not check:
                SPIRV.mkdir(parents=True, exist_ok=True)
                if not shipped.exists() or shipped.read_bytes() != data:
                    shipped.write_bytes(data)
                    print(f"wrote {shipped.relative_to(ROOT)} ({len(data)} bytes)")
            elif not shipped.exists():
                problems.append(f"{shipped.relative_to(ROOT)} is missing")
            elif same_compiler and shipped.read_bytes() != data:
                problems.append(f"{shipped.relative_to(ROOT)} is stale (differs from {comp.name})")
            elif not same_compiler and old.get("kernels", {}).get(name, {}).get(
                    "source_sha256") != manifest["kernels"][name]["source_sha256"]:
                # Another compiler version emits other bytes: compare sources instead.
                problems.append(f"{shipped.relative_to(ROOT)} is stale ({comp.name} changed)")
    for spv in sorted(SPIRV.glob("*.spv")):
        if spv.stem not in manifest["kernels"]:
            if check:
                problems.append(f"{spv.relative_to(ROOT)} has no source in shaders/")
            else:
                spv.unlink()
                print(f"removed {spv.relative_to(ROOT)} (no source)")
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    if check:
        if same_compiler and (not MANIFEST.exists() or MANIFEST.read_text() != text):
            problems.append(f"{MANIFEST.relative_to(ROOT)} is stale")
        if problems:
            print("SPIR-V is out of date:\n  " + "\n  ".join(problems) + f"\nfix: {FIX}",
                  file=sys.stderr)
            return 1
        print(f"{len(sources)} kernels up to date ({version})")
        return 0
    if not MANIFEST.exists() or MANIFEST.read_text() != text:
        MANIFEST.write_text(text)
        print(f"wrote {MANIFEST.relative_to(ROOT)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when stale")
    args = parser.parse_args(argv)
    try:
        return build(args.check)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
