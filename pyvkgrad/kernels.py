"""Kernels: name -> SPIR-V bytes and interface, loaded from the package, cached.

The SPIR-V is built by tools/build_shaders.py from shaders/<name>.comp and shipped as package
data (pyvkgrad/spirv/<name>.spv), so using pyvkgrad needs no shader compiler. The manifest
beside it records each kernel's interface, read from the SPIR-V by the build tool: its
capabilities (whence the subgroup operations it needs of the device), its specialization
constants (name, SpecId, type), its bindings (name, binding number, access) and its push
constants (names, in block order).

Plans (pyvkgrad/plan.py) pass everything by name, and this module is where names meet numbers:
- `check` validates a dispatch's names against the interface when the plan is built, so a
  missing, extra or misnamed constant, binding or push constant is an `InterfaceError` before
  any device work, naming the kernel and the name;
- `specialization` gives the uint32 words kp takes, in SpecId order (kp numbers them 0, 1, ...);
- `binding_order` gives the bound buffer names in binding order (kp binds its i-th buffer at
  binding i); `push_words` the push constants in block order.

Per-dimension constant groups: a kernel declares NAME0..NAME7 (shaders/include/indexing.glsl)
and a plan passes them as one name with a tuple, NAME=(eight values); the tuple must cover the
group exactly. Values are checked against the declared type: bool takes True/False (or 0/1),
uint an int in [0, 2^32), float a Python or numpy float (sent as its float32 bits; an int is
refused, so a bit pattern cannot be passed by mistake).
"""

from __future__ import annotations

import functools
import hashlib
import json
import numbers
import re
import struct
from collections import abc
from dataclasses import dataclass
from importlib import resources
from typing import Any, Dict, Iterable, List, Mapping, Tuple, Union

import numpy as np

SPIRV_MAGIC = b"\x03\x02\x23\x07"  # little-endian 0x07230203
READ, WRITE, READ_WRITE = "read", "write", "read_write"


class KernelError(RuntimeError):
    """A shipped kernel is missing or corrupt: reinstall, or rebuild with tools/build_shaders.py."""


class InterfaceError(KernelError):
    """A plan and its kernel disagree on a constant, binding or push constant (name, count or
    type): a bug in pyvkgrad, caught when the plan is built."""


@dataclass(frozen=True)
class Constant:
    name: str
    id: int  # SpecId
    type: str  # "bool", "uint" or "float"
    default: object


@dataclass(frozen=True)
class Binding:
    name: str
    binding: int
    access: str  # READ (readonly), WRITE (writeonly) or READ_WRITE
    views: Tuple[str, ...]  # "type member" of each block that views the binding


@dataclass(frozen=True)
class Interface:
    """What a kernel declares, in SpecId, binding and block order."""

    kernel: str
    constants: Tuple[Constant, ...]
    bindings: Tuple[Binding, ...]
    push_constants: Tuple[str, ...]
    capabilities: Tuple[str, ...] = ()  # its SPIR-V OpCapability names ("Shader", ...)

    @property
    def access(self) -> Dict[str, str]:
        """Binding name -> READ, WRITE or READ_WRITE."""
        return {b.name: b.access for b in self.bindings}

    @property
    def subgroup_features(self) -> Tuple[str, ...]:
        """The subgroup operations the kernel uses, as VkSubgroupFeatureFlagBits names
        (_vulkan_info.SUBGROUP_FEATURES: "basic", "arithmetic", ...), from its
        GroupNonUniform* capabilities."""
        return tuple(SUBGROUP_CAPABILITIES[c] for c in self.capabilities
                     if c in SUBGROUP_CAPABILITIES)


# SPIR-V capabilities of subgroup operations -> the VkSubgroupFeatureFlagBits a device must
# support (in compute shaders) to run them.
SUBGROUP_CAPABILITIES = {
    "GroupNonUniform": "basic", "GroupNonUniformVote": "vote",
    "GroupNonUniformArithmetic": "arithmetic", "GroupNonUniformBallot": "ballot",
    "GroupNonUniformShuffle": "shuffle", "GroupNonUniformShuffleRelative": "shuffle_relative",
    "GroupNonUniformClustered": "clustered", "GroupNonUniformQuad": "quad"}


@functools.lru_cache(maxsize=None)
def _manifest() -> Dict[str, Any]:
    try:
        return json.loads(resources.files(__package__).joinpath("spirv/manifest.json").read_text())
    except (FileNotFoundError, ValueError) as e:
        raise KernelError(f"pyvkgrad/spirv/manifest.json is missing or unreadable ({e}); "
                          f"rebuild with `python tools/build_shaders.py`") from e


def _entry(name: str) -> Dict[str, Any]:
    entry = _manifest()["kernels"].get(name)
    if entry is None:
        raise KernelError(f"no kernel named {name!r} in pyvkgrad/spirv/manifest.json")
    return entry


def spirv_file(name: str, entry: Mapping[str, Any], rte16: bool) -> Tuple[str, str]:
    """(file stem, manifest hash key) of kernel `name`'s SPIR-V (entry: its manifest entry):
    with rte16 its second SPIR-V, `<name>.rte16.spv`, where the build made one."""
    if rte16 and "rte16_spirv_sha256" in entry:
        return name + ".rte16", "rte16_spirv_sha256"
    return name, "spirv_sha256"


@functools.lru_cache(maxsize=None)
def spirv(name: str, rte16: bool = False) -> bytes:
    """The SPIR-V of kernel `name`, checked against the manifest's hash. rte16: its second
    SPIR-V, `<name>.rte16.spv`, where it has one (a kernel that converts to float16: the
    device rounds the halves under a RoundingModeRTE execution mode, for the devices that
    support it, `PhysicalDeviceInfo.rounding_mode_rte_float16`); the same bits."""
    entry = _entry(name)
    file, key = spirv_file(name, entry, rte16)
    try:
        data = resources.files(__package__).joinpath(f"spirv/{file}.spv").read_bytes()
    except FileNotFoundError as e:
        raise KernelError(f"pyvkgrad/spirv/{file}.spv is missing; rebuild with "
                          f"`python tools/build_shaders.py`") from e
    if data[:4] != SPIRV_MAGIC or hashlib.sha256(data).hexdigest() != entry[key]:
        raise KernelError(f"pyvkgrad/spirv/{file}.spv is corrupt (hash differs from the "
                          f"manifest); rebuild with `python tools/build_shaders.py`")
    return data


def names() -> List[str]:
    """Every kernel the manifest records, sorted."""
    return sorted(_manifest()["kernels"])


def manifest_entry(name: str) -> Dict[str, Any]:
    """The manifest's record of kernel `name`: its source, hashes and interface."""
    return dict(_entry(name))


def clear_caches() -> None:
    """Forget the cached manifest, SPIR-V and interfaces (they are read again on next use),
    e.g. after rebuilding the kernels of an editable install in a running process."""
    for cached in (_manifest, spirv, interface):
        cached.cache_clear()


@functools.lru_cache(maxsize=None)
def interface(name: str) -> Interface:
    """Kernel `name`'s interface, as the manifest records it."""
    return interface_of(name, _entry(name))


def interface_of(name: str, entry: Mapping[str, Any]) -> Interface:
    """The Interface of a manifest entry (tools/build_shaders.py's format)."""
    try:
        iface = Interface(
            name,
            tuple(Constant(c["name"], c["id"], c["type"], c["default"])
                  for c in sorted(entry["constants"], key=lambda c: c["id"])),
            tuple(Binding(b["name"], b["binding"], b["access"], tuple(b["views"]))
                  for b in sorted(entry["bindings"], key=lambda b: b["binding"])),
            tuple(p["name"] for p in sorted(entry["push_constants"], key=lambda p: p["offset"])),
            tuple(entry["capabilities"]))
    except (KeyError, TypeError) as e:
        raise KernelError(f"the manifest entry of kernel {name!r} has no interface ({e!r}); "
                          f"rebuild with `python tools/build_shaders.py`") from e
    # kp numbers specialization constants and buffers 0, 1, ... (the build enforces it).
    if [c.id for c in iface.constants] != list(range(len(iface.constants))) or \
            [b.binding for b in iface.bindings] != list(range(len(iface.bindings))):
        raise KernelError(f"the manifest entry of kernel {name!r} numbers its constants or "
                          f"bindings with gaps; rebuild with `python tools/build_shaders.py`")
    return iface


# A kernel by name (a package kernel) or its Interface (e.g. a benchmark kernel's).
KernelRef = Union[str, Interface]
# Names -> values, as a mapping or (name, value) pairs (a Dispatch stores pairs).
Pairs = Union[Mapping[str, Any], Iterable[Tuple[str, Any]]]


# ---- names -> numbers -------------------------------------------------------------------------

def _summary(names) -> str:
    """WG, IS_F16, SIZES0..7, ... : the names with each numbered group folded."""
    out, groups = [], {}
    for n in names:
        m = re.fullmatch(r"(.*?)(\d+)", n)
        if m:
            if m.group(1) not in groups:
                groups[m.group(1)] = []
                out.append(m.group(1))
            groups[m.group(1)].append(int(m.group(2)))
        else:
            out.append(n)
    parts = []
    for n in out:
        ids = groups.get(n)
        if ids is None:
            parts.append(n)
        elif len(ids) > 1 and ids == list(range(ids[0], ids[0] + len(ids))):
            parts.append(f"{n}{ids[0]}..{ids[-1]}")
        else:
            parts.extend(f"{n}{i}" for i in ids)
    return ", ".join(parts) or "nothing"


def _mismatch(kernel: str, what: str, declared, given) -> None:
    """Raise InterfaceError when the names given differ from those declared."""
    declared_set, given_set = set(declared), set(given)
    if declared_set == given_set:
        return
    missing = [n for n in declared if n not in given_set]
    extra = [n for n in given if n not in declared_set]
    problems = []
    if missing:
        problems.append(f"not passed by the plan: {_summary(missing)}")
    if extra:
        problems.append(f"not declared by the kernel: {_summary(extra)}")
    raise InterfaceError(f"kernel {kernel}: the plan's {what} do not match the kernel's: "
                         f"{'; '.join(problems)} (it declares {_summary(declared)}; "
                         f"pyvkgrad/spirv/manifest.json)")


def _flatten(kernel: str, constants) -> Dict[str, object]:
    """Constants by name with groups expanded: NAME=(a, b) -> NAME0=a, NAME1=b."""
    flat = {}
    for name, value in as_pairs(constants):
        group = isinstance(value, tuple)
        for key, v in ([(f"{name}{i}", v) for i, v in enumerate(value)] if group
                       else [(name, value)]):
            if key in flat:
                raise InterfaceError(f"kernel {kernel}: constant {key} is passed twice")
            flat[key] = v
    return flat


def float_word(value: float) -> int:
    """The float32 bits of `value` (rounded to nearest) as a uint32 word: a float
    specialization constant's word, and a float a kernel takes as a uint push constant."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _word(kernel: str, c: Constant, value) -> int:
    """The uint32 word of constant `c`, checked against its type."""
    if c.type == "float":
        if isinstance(value, (float, np.floating)):
            return float_word(value)
    elif c.type == "bool":
        if isinstance(value, (bool, np.bool_)) or (isinstance(value, numbers.Integral)
                                                   and value in (0, 1)):
            return int(value)
    elif isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) \
            and 0 <= value < 2**32:
        return int(value)
    expected = {"float": "a float (sent as its float32 bits)", "bool": "True/False or 0/1",
                "uint": "an int in [0, 2^32)"}[c.type]
    raise InterfaceError(f"kernel {kernel}: constant {c.name} is a {c.type} and takes "
                         f"{expected}, got {value!r}")


def _interface(kernel: KernelRef) -> Interface:
    """A kernel's Interface from its name (a package kernel) or the Interface itself (e.g. a
    benchmark kernel's, from `interface_of`)."""
    return kernel if isinstance(kernel, Interface) else interface(kernel)


def specialization(kernel: KernelRef, constants: Pairs) -> np.ndarray:
    """The specialization words of `kernel` (uint32, SpecId order) from constants by name."""
    iface = _interface(kernel)
    kernel = iface.kernel
    flat = _flatten(kernel, constants)
    _mismatch(kernel, "specialization constants", [c.name for c in iface.constants], flat)
    return np.array([_word(kernel, c, flat[c.name]) for c in iface.constants], dtype=np.uint32)


def binding_order(kernel: KernelRef, bindings: Pairs) -> Tuple[str, ...]:
    """The buffers bound to `kernel`, in binding order, from binding name -> buffer name."""
    iface = _interface(kernel)
    kernel = iface.kernel
    bindings = dict(bindings)
    _mismatch(kernel, "bindings", [b.name for b in iface.bindings], bindings)
    for name, buffer in bindings.items():
        if not isinstance(buffer, str):
            raise InterfaceError(f"kernel {kernel}: binding {name} must name a buffer (a "
                                 f"tensor field or a scratch buffer), got {buffer!r}")
    return tuple(bindings[b.name] for b in iface.bindings)


def push_words(kernel: KernelRef, push: Pairs) -> Tuple[int, ...]:
    """The push-constant words of `kernel`, in block order, from push constants by name."""
    iface = _interface(kernel)
    kernel = iface.kernel
    push = dict(push)
    _mismatch(kernel, "push constants", iface.push_constants, push)
    for name, value in push.items():
        if type(value) is int and 0 <= value < 2**32:  # the usual case, checked quickly
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
                or not 0 <= value < 2**32:
            raise InterfaceError(f"kernel {kernel}: push constant {name} is a uint and takes "
                                 f"an int in [0, 2^32), got {value!r}")
    return tuple(int(push[name]) for name in iface.push_constants)


# Constants and bindings already found to fit a kernel's interface, by (kernel, their
# reprs), with the Interface they fit: the dispatches of one plan (hundreds of thousands where
# a loop limit cuts a narrow grid) share them and differ in push constants only. A repr tells
# True, 1 and 1.0 apart, as the checks do; what it does not tell apart (a numpy scalar and
# its Python value) gets the same verdict. Bounded: emptied when full.
_FITTING: Dict[Tuple[str, str, str], Interface] = {}
_FITTING_MAX = 512  # keys hold reprs of a few KiB each


def check(kernel: KernelRef, constants: Pairs, bindings: Pairs, push: Pairs) -> None:
    """Raise InterfaceError unless the names (and values) fit kernel `kernel`'s interface."""
    iface = _interface(kernel)
    key = (iface.kernel, repr(constants), repr(bindings))
    if _FITTING.get(key) is not iface:
        specialization(iface, constants)
        binding_order(iface, bindings)
        if len(_FITTING) >= _FITTING_MAX:
            _FITTING.clear()
        _FITTING[key] = iface
    push_words(iface, push)


def as_pairs(values: Pairs) -> Tuple[Tuple[str, Any], ...]:
    """A mapping (or pairs) as a tuple of (name, value) pairs; list values become tuples."""
    # (collections.abc's Mapping: typing's isinstance check costs several times more, on
    # every dispatch a plan makes.)
    items = values.items() if isinstance(values, abc.Mapping) else values
    return tuple([(name, tuple(v) if isinstance(v, (list, np.ndarray)) else v)
                  for name, v in items])
