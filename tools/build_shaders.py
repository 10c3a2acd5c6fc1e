#!/usr/bin/env python3
"""Compile the GLSL kernels to SPIR-V and write each target's manifest.json.

    python tools/build_shaders.py           rebuild every kernel
    python tools/build_shaders.py --check   write nothing; exit 1 if any SPIR-V or manifest is
                                            stale, missing or has no source, naming the fixing
                                            command

Targets: shaders/ -> pyvkgrad/spirv/ (shipped as package data, so users need no compiler) and
benchmarks/shaders/ -> benchmarks/spirv/ (kernels only the benchmark runs). A target's kernels
are its `<name>.comp` files and, for each element-wise formula `elementwise/<operator>.glsl`,
two kernels the build generates (`elementwise_source`): `<operator>` (strided) and
`<operator>_packed`, the template shaders/include/elementwise_grad.glsl followed by the
formula, so an element-wise operator's only shader file is its formula. Both targets include
shaders/include/. Each kernel is compiled with `glslangValidator -V --target-env vulkan1.1`
(kp's instance is Vulkan 1.1, so SPIR-V 1.3 at most), warnings are errors, and the result
must pass `spirv-val`.

The manifest records, per kernel, its source file (a formula's kernels also say which form
they are, `generated`), the hashes (the source's covers the files it includes and no other,
`source_hash`, so an include's change restamps only its kernels) and the kernel's interface,
read back from the SPIR-V itself (`read_interface`): the capabilities it declares
(OpCapability: the runtime refuses a kernel whose GroupNonUniform* operations the device
lacks), its specialization constants (OpName and SpecId), its storage-buffer bindings (binding
number, name, access from NonWritable/NonReadable, and the blocks that view it) and its
push-constant members. The runtime (pyvkgrad/kernels.py) resolves the names that plans use
against it. Rules checked here, so that plans can rely on them:
- constant SpecIds run 0..n-1 (kp numbers the constants it is given 0, 1, ...), each named;
  the workgroup width (`local_size_x_id`, which has no OpName) is named `WG`;
- bindings are in descriptor set 0 and run 0..n-1 (kp binds its i-th buffer at binding i);
  each block holds one runtime array, and the binding is named after that array's member;
  several blocks may view one binding with other element types: one member carries the
  binding's name and the others are named `<name>_<view>` (e.g. `x`, `x_uvec2`, `x_uvec4`);
- push constants are 32-bit words at offsets 0, 4, 8, ...
"""

from __future__ import annotations

import argparse
import os
import hashlib
import json
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SHADERS = ROOT / "shaders"
INCLUDE = SHADERS / "include"
# (sources, SPIR-V and manifest): the package's kernels, then the benchmark's.
TARGETS = ((SHADERS, ROOT / "pyvkgrad" / "spirv"),
           (ROOT / "benchmarks" / "shaders", ROOT / "benchmarks" / "spirv"))
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


_INCLUDE_DIRECTIVE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def includes(text: str, where: Path | None, what: str) -> list[Path]:
    """The files `text` includes, directly or through other includes, each once, in path
    order. A name resolves as glslang resolves it: beside the including file (`where`, its
    folder; None for a generated source), then in shaders/include/. Directives in comments
    are not includes; one under an #if counts whether or not it is taken."""
    found: dict[Path, None] = {}

    def visit(text: str, where: Path | None) -> None:
        for name in _INCLUDE_DIRECTIVE.findall(_COMMENT.sub("", text)):
            path = next((d / name for d in (where, INCLUDE) if d and (d / name).is_file()), None)
            if path is None:
                raise BuildError(f"{what}: #include \"{name}\" is not found beside the file or "
                                 f"in {INCLUDE.relative_to(ROOT)}/")
            path = path.resolve()
            if path not in found:
                found[path] = None
                visit(path.read_text(), path.parent)

    visit(text, where)
    return sorted(found, key=lambda p: p.relative_to(ROOT).as_posix())


def source_hash(text: str, where: Path | None, what: str) -> str:
    """Hash of a kernel's source and of the files it includes, each by name and bytes: an
    include changes the hash of exactly the kernels that use it."""
    h = hashlib.sha256(text.encode())
    for inc in includes(text, where, what):
        h.update(inc.relative_to(ROOT).as_posix().encode() + inc.read_bytes())
    return h.hexdigest()


def compile_one(comp: Path, out: Path, what: str, defines: tuple[str, ...] = ()) -> None:
    """Compile the kernel source `comp` (a file, `what` in messages) to `out`, with the
    preprocessor macros `defines` set."""
    res = _run([COMPILER, *FLAGS, *(f"-D{d}" for d in defines), "-o", str(out), str(comp)])
    text = (res.stdout + res.stderr).strip()
    # glslangValidator echoes the file name on success; anything else is a diagnostic.
    diagnostics = [line for line in text.splitlines()
                   if line.strip() and line.strip() != str(comp)]
    if res.returncode != 0 or any("WARNING" in d or "ERROR" in d for d in diagnostics):
        raise BuildError(f"{what}: compilation failed (warnings are errors):\n"
                         + "\n".join(diagnostics))
    out.write_bytes(mark_aliased(out.read_bytes(), what))
    val = _run(["spirv-val", "--target-env", "vulkan1.1", str(out)])
    if val.returncode != 0:
        raise BuildError(f"{what}: spirv-val rejected the SPIR-V:\n"
                         f"{(val.stdout + val.stderr).strip()}")


# ---- the kernels of a target: .comp files, and two generated per element-wise formula ----------

class Kernel(NamedTuple):
    """One kernel to build: its name, the file the manifest names as its source, and the text
    compiled (the file's own, or generated from an element-wise formula: `generated` says
    which form)."""

    name: str
    source: Path
    text: str
    generated: str = ""

    @property
    def folder(self) -> Path | None:
        """Where its includes resolve first: the .comp's folder (a generated one has none)."""
        return None if self.generated else self.source.parent


# The two kernels of an element-wise formula: (name suffix, form, lines before the template).
ELEMENTWISE_FORMS = (("", "strided", ""), ("_packed", "packed", "#define ELEMENTWISE_PACKED\n"))


def elementwise_source(formula: Path, form: str) -> str:
    """The kernel of one form ("strided" or "packed") of an element-wise formula: the template
    shaders/include/elementwise_grad.glsl, then the formula (included by its path from
    shaders/include/, so diagnostics name the formula's own file and lines)."""
    define = dict((f, d) for _, f, d in ELEMENTWISE_FORMS)[form]
    path = Path(os.path.relpath(formula, INCLUDE)).as_posix()
    return (f"// {formula.stem}, {form} form: generated by tools/build_shaders.py from "
            f"{formula.relative_to(ROOT).as_posix()}.\n"
            "#version 450\n"
            "#extension GL_GOOGLE_include_directive : require\n"
            f"{define}"
            '#include "elementwise_grad.glsl"\n'
            f'#include "{path}"\n')


def target_kernels(sources_dir: Path) -> list[Kernel]:
    """A target's kernels by name: each `<name>.comp`, and for each element-wise formula
    `elementwise/<operator>.glsl` its two kernels `<operator>` and `<operator>_packed`."""
    found = [Kernel(comp.stem, comp, comp.read_text())
             for comp in sorted(sources_dir.glob("*.comp"))]
    for formula in sorted((sources_dir / "elementwise").glob("*.glsl")):
        found += [Kernel(formula.stem + suffix, formula, elementwise_source(formula, form), form)
                  for suffix, form, _ in ELEMENTWISE_FORMS]
    names = [k.name for k in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BuildError(f"kernel {twice[0]} has two sources: " + " and ".join(
            str(k.source.relative_to(ROOT)) for k in found if k.name == twice[0]))
    return sorted(found, key=lambda k: k.name)


# ---- the second SPIR-V of a kernel that converts float32 to float16 ---------------------------

# A kernel whose SPIR-V converts to float16 (GLSL.std.450's PackHalf2x16, instruction 58 of
# OpExtInst, opcode 12) is built a second time with this macro set, into `<name>.rte16.spv`:
# shaders/include/load_store.glsl then converts with OpFConvert under RoundingModeRTE for
# 16-bit results and lets the device round the halves (kernels.spirv takes it where the device
# can round so). Its interface is the first's, plus the capabilities Float16 and
# RoundingModeRTE; the manifest records its hash as `rte16_spirv_sha256`.
RTE16_DEFINE = "HALVES_ROUND_TO_NEAREST_EVEN"
RTE16_SUFFIX = ".rte16"
RTE16_CAPABILITIES = ("Float16", "RoundingModeRTE")  # what the second SPIR-V declares more
_OP_EXT_INST_IMPORT, _OP_EXT_INST, _PACK_HALF_2X16 = 11, 12, 58


def converts_halves(data: bytes) -> bool:
    """Whether the SPIR-V module `data` calls GLSL.std.450's PackHalf2x16."""
    words = struct.unpack(f"<{len(data) // 4}I", data)
    glsl, i = None, 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if op == _OP_EXT_INST_IMPORT and _string(words[i + 2:i + count]) == "GLSL.std.450":
            glsl = words[i + 1]
        elif op == _OP_EXT_INST and words[i + 3] == glsl and words[i + 4] == _PACK_HALF_2X16:
            return True
        i += max(count, 1)
    return False


# ---- the kernel's interface, read from its SPIR-V ---------------------------------------------

# Opcodes, decorations and storage classes used below (SPIR-V specification, section 3).
_OP_NAME, _OP_MEMBER_NAME, _OP_CAPABILITY = 5, 6, 17
# Capabilities by number, for the manifest (others are recorded as Capability<number>): the
# runtime checks a kernel's GroupNonUniform* against the device's subgroup operations.
CAPABILITIES = {1: "Shader", 9: "Float16", 11: "Int64", 22: "Int16",
                61: "GroupNonUniform", 62: "GroupNonUniformVote",
                63: "GroupNonUniformArithmetic", 64: "GroupNonUniformBallot",
                65: "GroupNonUniformShuffle", 66: "GroupNonUniformShuffleRelative",
                67: "GroupNonUniformClustered", 68: "GroupNonUniformQuad",
                4467: "RoundingModeRTE", 6033: "AtomicFloat32AddEXT"}
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR = 20, 21, 22, 23
_OP_TYPE_RUNTIME_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER = 29, 30, 32
_OP_SPEC_TRUE, _OP_SPEC_FALSE, _OP_SPEC, _OP_SPEC_COMPOSITE = 48, 49, 50, 51
_OP_VARIABLE, _OP_DECORATE, _OP_MEMBER_DECORATE = 59, 71, 72
_SPEC_ID, _BLOCK, _BUFFER_BLOCK, _BUILTIN = 1, 2, 3, 11
_NON_WRITABLE, _NON_READABLE, _BINDING, _SET, _OFFSET = 24, 25, 33, 34, 35
_WORKGROUP_SIZE = 25  # BuiltIn
_UNIFORM, _PUSH_CONSTANT, _STORAGE_BUFFER = 2, 9, 12  # storage classes
SPIRV_MAGIC = 0x07230203
# The manifest keys read_interface fills.
INTERFACE = ("capabilities", "constants", "bindings", "push_constants")


_ALIASED = 20  # Decoration


def mark_aliased(data: bytes, what: str) -> bytes:
    """Decorate every descriptor-bound variable `Aliased`.

    SPIR-V lets a compiler assume that two variables do not share memory unless they say so,
    and GLSL has no word for it. pyvkgrad binds one buffer to two fields where an operator
    allows it in place (an output over an input with the identical descriptor), and one buffer
    to several views of a binding; without the decoration the H100's compiler moved an input's
    load past the output's store to the same word (float16 in place gave wrong results)."""
    words = list(struct.unpack(f"<{len(data) // 4}I", data))
    if words[0] != SPIRV_MAGIC:
        raise BuildError(f"{what}: not a SPIR-V module")
    bound, aliased, last_annotation = set(), set(), None
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if op in (_OP_DECORATE, _OP_MEMBER_DECORATE):
            last_annotation = i + count
            if op == _OP_DECORATE and words[i + 2] == _BINDING:
                bound.add(words[i + 1])
            if op == _OP_DECORATE and words[i + 2] == _ALIASED:
                aliased.add(words[i + 1])
        i += count
    extra = []
    for target in sorted(bound - aliased):
        extra += [(3 << 16) | _OP_DECORATE, target, _ALIASED]
    if last_annotation is None or not extra:
        return data
    words[last_annotation:last_annotation] = extra
    return struct.pack(f"<{len(words)}I", *words)


def _string(words) -> str:
    raw = b"".join(struct.pack("<I", w) for w in words)
    return raw[: raw.index(b"\0")].decode()


def read_interface(data: bytes, what: str) -> dict:
    """The specialization constants, bindings and push constants of a SPIR-V module.

    A small reader of the instruction stream (word 0 of each instruction: word count << 16 |
    opcode), keeping only names, decorations, types, spec constants and variables."""
    if len(data) % 4 or len(data) < 20:
        raise BuildError(f"{what}: not a SPIR-V module")
    words = struct.unpack(f"<{len(data) // 4}I", data)
    if words[0] != SPIRV_MAGIC:
        raise BuildError(f"{what}: not a SPIR-V module (magic {words[0]:#x})")
    names, member_names, capabilities = {}, {}, []
    decorations, member_decorations = {}, {}
    types, pointers, variables, specs, composites = {}, {}, {}, {}, {}
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            raise BuildError(f"{what}: malformed SPIR-V instruction at word {i}")
        a = words[i + 1: i + count]
        i += count
        if op == _OP_CAPABILITY:
            capabilities.append(CAPABILITIES.get(a[0], f"Capability{a[0]}"))
        elif op == _OP_NAME:
            names[a[0]] = _string(a[1:])
        elif op == _OP_MEMBER_NAME:
            member_names[a[0], a[1]] = _string(a[2:])
        elif op == _OP_DECORATE:
            decorations.setdefault(a[0], {})[a[1]] = tuple(a[2:])
        elif op == _OP_MEMBER_DECORATE:
            member_decorations.setdefault((a[0], a[1]), {})[a[2]] = tuple(a[3:])
        elif op == _OP_TYPE_BOOL:
            types[a[0]] = "bool"
        elif op == _OP_TYPE_INT:
            types[a[0]] = ("uint" if a[2] == 0 else "int") if a[1] == 32 else f"int{a[1]}"
        elif op == _OP_TYPE_FLOAT:
            types[a[0]] = "float" if a[1] == 32 else f"float{a[1]}"
        elif op == _OP_TYPE_VECTOR:
            prefix = {"float": "", "uint": "u", "int": "i", "bool": "b"}.get(types.get(a[1]), "?")
            types[a[0]] = f"{prefix}vec{a[2]}"
        elif op == _OP_TYPE_RUNTIME_ARRAY:
            types[a[0]] = ("runtime_array", a[1])
        elif op == _OP_TYPE_STRUCT:
            types[a[0]] = ("struct", tuple(a[1:]))
        elif op == _OP_TYPE_POINTER:
            pointers[a[0]] = (a[1], a[2])
        elif op == _OP_VARIABLE:
            variables[a[1]] = (pointers[a[0]][1], a[2])  # (pointee type, storage class)
        elif op in (_OP_SPEC_TRUE, _OP_SPEC_FALSE):
            specs[a[1]] = ("bool", op == _OP_SPEC_TRUE)
        elif op == _OP_SPEC:
            kind = types.get(a[0])
            value = struct.unpack("<f", struct.pack("<I", a[2]))[0] if kind == "float" else a[2]
            specs[a[1]] = (kind, value)
        elif op == _OP_SPEC_COMPOSITE:
            composites[a[1]] = tuple(a[2:])

    # Specialization constants, by SpecId; the workgroup size's x is the unnamed `WG`.
    workgroup = {}
    for cid, parts in composites.items():
        if decorations.get(cid, {}).get(_BUILTIN) == (_WORKGROUP_SIZE,):
            for axis, part in enumerate(parts):
                if _SPEC_ID in decorations.get(part, {}):
                    if axis:
                        raise BuildError(f"{what}: only local_size_x_id may be specialized "
                                         f"(kernels are one-dimensional)")
                    workgroup[part] = "WG"
    constants = []
    for sid, (kind, value) in specs.items():
        spec_id = decorations.get(sid, {}).get(_SPEC_ID)
        if spec_id is None:
            continue
        name = workgroup.get(sid) or names.get(sid, "")
        if not name:
            raise BuildError(f"{what}: specialization constant {spec_id[0]} has no name")
        if kind not in ("bool", "uint", "float"):
            raise BuildError(f"{what}: constant {name} has type {kind}; use bool, uint or float")
        constants.append({"id": spec_id[0], "name": name, "type": kind, "default": value})
    constants.sort(key=lambda c: c["id"])
    if [c["id"] for c in constants] != list(range(len(constants))):
        raise BuildError(f"{what}: constant ids must run 0..{len(constants) - 1} without gaps "
                         f"(kp numbers the constants it is given 0, 1, ...); found "
                         f"{[c['id'] for c in constants]}")
    seen = [c["name"] for c in constants]
    if len(set(seen)) != len(seen):
        repeated = sorted({n for n in seen if seen.count(n) > 1})
        raise BuildError(f"{what}: constant names repeat: {repeated}")

    # Storage buffers (one runtime array per block) and the push-constant block.
    views, push = {}, []
    for vid, (type_id, storage) in variables.items():
        block = types.get(type_id)
        dec = decorations.get(type_id, {})
        if storage == _PUSH_CONSTANT:
            for m, member_type in enumerate(block[1]):
                name = member_names.get((type_id, m), "")
                offset = member_decorations.get((type_id, m), {}).get(_OFFSET, (None,))[0]
                if types.get(member_type) != "uint" or offset != 4 * m:
                    raise BuildError(f"{what}: push constant {name} must be a uint at offset "
                                     f"{4 * m}")
                push.append({"name": name, "offset": offset, "type": "uint"})
            continue
        if not (storage == _STORAGE_BUFFER or (storage == _UNIFORM and _BUFFER_BLOCK in dec)):
            if storage == _UNIFORM:
                raise BuildError(f"{what}: uniform blocks are not supported (use buffers)")
            continue
        block_name = names.get(type_id, "")
        members = block[1]
        element = types.get(members[0]) if len(members) == 1 else None
        if not (isinstance(element, tuple) and element[0] == "runtime_array"):
            raise BuildError(f"{what}: buffer block {block_name} must hold exactly one runtime "
                             f"array")
        vdec = decorations.get(vid, {})
        mdec = member_decorations.get((type_id, 0), {})
        where = (vdec.get(_SET, (None,))[0], vdec.get(_BINDING, (None,))[0])
        views.setdefault(where, []).append({
            "block": block_name, "member": member_names.get((type_id, 0), ""),
            "type": types.get(element[1], "?"),
            "readonly": _NON_WRITABLE in mdec or _NON_WRITABLE in vdec,
            "writeonly": _NON_READABLE in mdec or _NON_READABLE in vdec})
    bindings = []
    for (dset, binding), group in sorted(views.items(), key=lambda kv: kv[0][1]):
        if dset != 0:
            raise BuildError(f"{what}: binding {binding} is in descriptor set {dset}; kp binds "
                             f"set 0 only")
        group.sort(key=lambda v: (len(v["member"]), v["member"]))
        name = group[0]["member"]
        odd = [v["member"] for v in group[1:] if not v["member"].startswith(name + "_")]
        if not name or odd:
            raise BuildError(f"{what}: the blocks of binding {binding} name their arrays "
                             f"{[v['member'] for v in group]}; one must carry the binding's "
                             f"name and the others '<name>_<view>'")
        access = ("read" if all(v["readonly"] for v in group) else
                  "write" if all(v["writeonly"] for v in group) else "read_write")
        bindings.append({"binding": binding, "name": name, "access": access,
                         "views": [f"{v['type']} {v['member']}" for v in group]})
    if [b["binding"] for b in bindings] != list(range(len(bindings))):
        raise BuildError(f"{what}: bindings must run 0..{len(bindings) - 1} without gaps (kp "
                         f"binds its i-th buffer at binding i); found "
                         f"{[b['binding'] for b in bindings]}")
    return {"capabilities": capabilities, "constants": constants, "bindings": bindings,
            "push_constants": push}


def _dumps(manifest: dict) -> str:
    """JSON with one line per innermost object (a constant, a binding, a push constant)."""
    text = json.dumps(manifest, indent=2)
    leaf = r"\{(?:[^{}\[\]]|\[[^{}\[\]]*\])*\}"  # an object holding no object
    return re.sub(leaf, lambda m: json.dumps(json.loads(m.group())), text) + "\n"


# ---- build and check ----------------------------------------------------------------------------

def ship(shipped: Path, data: bytes, check: bool, same_compiler: bool, source_changed: bool,
         source: Path, problems: list) -> None:
    """Write `data` to `shipped` where it differs, or (check) append why it is stale: its
    bytes differ from the build's (the same compiler), or its kernel's source changed (another
    compiler version emits other bytes)."""
    rel = shipped.relative_to(ROOT)
    if not check:
        shipped.parent.mkdir(parents=True, exist_ok=True)
        if not shipped.exists() or shipped.read_bytes() != data:
            shipped.write_bytes(data)
            print(f"wrote {rel} ({len(data)} bytes)")
    elif not shipped.exists():
        problems.append(f"{rel} is missing")
    elif same_compiler and shipped.read_bytes() != data:
        problems.append(f"{rel} is stale (differs from {source.name})")
    elif not same_compiler and source_changed:
        problems.append(f"{rel} is stale ({source.name} changed)")


def build_target(sources_dir: Path, spirv_dir: Path, version: str, check: bool,
                 problems: list) -> int:
    """Compile one target's kernels; returns how many. Appends what --check finds stale."""
    manifest_path = spirv_dir / "manifest.json"
    sources = target_kernels(sources_dir)
    manifest = {"compiler": version, "flags": FLAGS, "kernels": {}}
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    same_compiler = old.get("compiler") == version and old.get("flags") == FLAGS
    rel = lambda p: p.relative_to(ROOT)  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in sources:
            name, source = kernel.name, rel(kernel.source)
            what = (f"{source} ({kernel.generated} kernel {name})" if kernel.generated
                    else str(source))
            comp = source  # compiled from the repository root, as named in messages
            if kernel.generated:
                comp = Path(tmp) / f"{name}.comp"
                comp.write_text(kernel.text)
            spv = Path(tmp) / f"{name}.spv"
            compile_one(comp, spv, what)
            data = spv.read_bytes()
            entry = manifest["kernels"][name] = {
                "source": str(source),
                **({"generated": kernel.generated} if kernel.generated else {}),
                "source_sha256": source_hash(kernel.text, kernel.folder, what),
                "spirv_sha256": hashlib.sha256(data).hexdigest(),
                **read_interface(data, what),
            }
            files = {name: data}
            if converts_halves(data):
                spv = Path(tmp) / f"{name}{RTE16_SUFFIX}.spv"
                compile_one(comp, spv, f"{what} with {RTE16_DEFINE}", (RTE16_DEFINE,))
                files[name + RTE16_SUFFIX] = variant = spv.read_bytes()
                if converts_halves(variant):  # a conversion the mode does not govern
                    raise BuildError(f"{what}: with {RTE16_DEFINE} it still calls "
                                     f"packHalf2x16 (convert through load_store.glsl's "
                                     f"DEVICE_PACK_HALVES)")
                iface = read_interface(variant, what)
                added = sorted(set(iface["capabilities"]) - set(entry["capabilities"]))
                iface["capabilities"] = [c for c in iface["capabilities"]
                                         if c not in RTE16_CAPABILITIES]
                if added != sorted(RTE16_CAPABILITIES) or iface != {k: entry[k] for k in INTERFACE}:
                    raise BuildError(f"{what}: with {RTE16_DEFINE}, the interface is not the "
                                     f"first SPIR-V's plus {', '.join(RTE16_CAPABILITIES)} "
                                     f"(added: {', '.join(added) or 'none'})")
                entry["rte16_spirv_sha256"] = hashlib.sha256(variant).hexdigest()
            for file_name, file_data in files.items():
                ship(spirv_dir / f"{file_name}.spv", file_data, check,
                     same_compiler,
                     old.get("kernels", {}).get(name, {}).get("source_sha256")
                     != entry["source_sha256"], source, problems)
            shipped = spirv_dir / f"{name}.spv"
            if check and shipped.exists():
                # What the runtime trusts: the shipped manifest describes the shipped SPIR-V.
                recorded_entry = old.get("kernels", {}).get(name, {})
                recorded = {key: recorded_entry.get(key) for key in INTERFACE}
                if recorded != read_interface(shipped.read_bytes(), str(rel(shipped))):
                    problems.append(f"{rel(manifest_path)}: the interface recorded for {name} "
                                    f"differs from {rel(shipped)}'s")
    variants = {n + RTE16_SUFFIX for n, e in manifest["kernels"].items()
                if "rte16_spirv_sha256" in e}
    for spv in sorted(spirv_dir.glob("*.spv")):
        if spv.stem not in manifest["kernels"] and spv.stem not in variants:
            if check:
                problems.append(f"{rel(spv)} has no source in {rel(sources_dir)}/")
            else:
                spv.unlink()
                print(f"removed {rel(spv)} (no source)")
    text = _dumps(manifest)
    if check:
        if same_compiler and (not manifest_path.exists() or manifest_path.read_text() != text):
            problems.append(f"{rel(manifest_path)} is stale")
    elif not manifest_path.exists() or manifest_path.read_text() != text:
        manifest_path.write_text(text)
        print(f"wrote {rel(manifest_path)}")
    return len(sources)


def build(check: bool) -> int:
    version = compiler_version()
    problems, total = [], 0
    for sources_dir, spirv_dir in TARGETS:
        if sources_dir.is_dir() or spirv_dir.is_dir():
            total += build_target(sources_dir, spirv_dir, version, check, problems)
    if check:
        if problems:
            print("SPIR-V is out of date:\n  " + "\n  ".join(problems) + f"\nfix: {FIX}",
                  file=sys.stderr)
            return 1
        print(f"{total} kernels up to date ({version})")
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
