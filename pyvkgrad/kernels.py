"""Kernel name -> SPIR-V bytes, loaded from the package (pyvkgrad/spirv/<name>.spv), cached.

The SPIR-V is built by tools/build_shaders.py from shaders/<name>.comp and shipped as package
data, so using pyvkgrad needs no shader compiler.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources

SPIRV_MAGIC = b"\x03\x02\x23\x07"  # little-endian 0x07230203


class KernelError(RuntimeError):
    """A shipped kernel is missing or corrupt: reinstall, or rebuild with tools/build_shaders.py."""


@functools.lru_cache(maxsize=None)
def _manifest() -> dict:
    try:
        return json.loads(resources.files(__package__).joinpath("spirv/manifest.json").read_text())
    except (FileNotFoundError, ValueError) as e:
        raise KernelError(f"pyvkgrad/spirv/manifest.json is missing or unreadable ({e}); "
                          f"rebuild with `python tools/build_shaders.py`") from e


@functools.lru_cache(maxsize=None)
def spirv(name: str) -> bytes:
    """The SPIR-V of kernel `name`, checked against the manifest's hash."""
    entry = _manifest()["kernels"].get(name)
    if entry is None:
        raise KernelError(f"no kernel named {name!r} in pyvkgrad/spirv/manifest.json")
    try:
        data = resources.files(__package__).joinpath(f"spirv/{name}.spv").read_bytes()
    except FileNotFoundError as e:
        raise KernelError(f"pyvkgrad/spirv/{name}.spv is missing; rebuild with "
                          f"`python tools/build_shaders.py`") from e
    if data[:4] != SPIRV_MAGIC or hashlib.sha256(data).hexdigest() != entry["spirv_sha256"]:
        raise KernelError(f"pyvkgrad/spirv/{name}.spv is corrupt (hash differs from the "
                          f"manifest); rebuild with `python tools/build_shaders.py`")
    return data


def names() -> list:
    return sorted(_manifest()["kernels"])
