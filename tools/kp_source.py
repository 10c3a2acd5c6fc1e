#!/usr/bin/env python3
"""Prepare kp 0.9.0's sources with tools/kp-0.9.0.patch for pyvkgrad's wheel build.

    python tools/kp_source.py DEST     # prints the patched source tree's path (under DEST)

CMakeLists.txt runs this at configure time. The sdist is $PYVKGRAD_KP_SDIST when set (an offline
build, e.g. `pip wheel --no-build-isolation`), else it is downloaded with
`python -m pip download`, which honours the user's pip configuration and index. Its sha256 must
be the PyPI release's. The patch is applied here, in Python, strictly (every hunk at its place,
context exact), so the build needs no `patch` program. A tree already prepared from the same
sdist, patch and script is reused, which keeps an incremental build incremental.
Standard library only; Python 3.9+.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

KP_VERSION = "0.9.0"
KP_SDIST_SHA256 = "98e583dc6e9731ff6d7a3e3317817e4d93f7b2945929619e29a56325db279949"
TOOLS = Path(__file__).resolve().parent
PATCH = TOOLS / f"kp-{KP_VERSION}.patch"


class SourceError(Exception):
    pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_sdist(dest: Path) -> Path:
    given = os.environ.get("PYVKGRAD_KP_SDIST")
    if given:
        sdist = Path(given).expanduser().resolve()
        if not sdist.is_file():
            raise SourceError(f"PYVKGRAD_KP_SDIST={given}: no such file")
    else:
        sdist = dest / "download" / f"kp-{KP_VERSION}.tar.gz"
        if not (sdist.is_file() and _sha256(sdist) == KP_SDIST_SHA256):
            sdist.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "-d", str(sdist.parent), f"kp=={KP_VERSION}"]
            print(f"-- pyvkgrad: downloading the kp {KP_VERSION} sdist: {' '.join(cmd)}",
                  file=sys.stderr)
            done = subprocess.run(cmd, check=False, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT,
                                  text=True)
            if done.returncode != 0 or not sdist.is_file():
                raise SourceError(
                    f"could not download the kp {KP_VERSION} sdist from the package index:\n"
                    f"{done.stdout[-3000:]}\n"
                    f"Offline, download it elsewhere (pip download --no-deps --no-binary :all: "
                    f"kp=={KP_VERSION}) and set PYVKGRAD_KP_SDIST=/path/kp-{KP_VERSION}.tar.gz")
    digest = _sha256(sdist)
    if digest != KP_SDIST_SHA256:
        raise SourceError(f"{sdist} is not the kp {KP_VERSION} sdist from PyPI "
                          f"(sha256 {digest}, expected {KP_SDIST_SHA256})")
    return sdist


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_patch(text: str):
    """[(relative path, [(old_start, old_lines, new_lines)])] of a unified diff (-p1 paths)."""
    lines = text.splitlines(keepends=True)
    files, i = [], 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            path = lines[i + 1][4:].rstrip("\n").split("\t")[0]
            path = path.split("/", 1)[1]  # -p1
            hunks, i = [], i + 2
            while i < len(lines) and lines[i].startswith("@@"):
                m = _HUNK.match(lines[i])
                if not m:
                    raise SourceError(f"bad hunk header in {PATCH.name}: {lines[i]!r}")
                n_old = int(m.group(2) or 1)
                n_new = int(m.group(4) or 1)
                old, new, i = [], [], i + 1
                while len(old) < n_old or len(new) < n_new:
                    line = lines[i]
                    tag, body = line[:1], line[1:]
                    if line.startswith("\\"):  # "\ No newline at end of file"
                        i += 1
                        continue
                    if tag == " " or line == "\n":
                        body = body if tag == " " else "\n"
                        old.append(body)
                        new.append(body)
                    elif tag == "-":
                        old.append(body)
                    elif tag == "+":
                        new.append(body)
                    else:
                        raise SourceError(f"bad line in {PATCH.name} ({path}): {line!r}")
                    i += 1
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
                hunks.append((int(m.group(1)), old, new))
            files.append((path, hunks))
        else:
            i += 1
    if not files:
        raise SourceError(f"{PATCH} holds no diff")
    return files


def apply_patch(tree: Path, text: str) -> None:
    for path, hunks in parse_patch(text):
        target = tree / path
        content = target.read_text(encoding="utf-8").splitlines(keepends=True)
        shift = 0
        for start, old, new in hunks:
            at = start - 1 + shift if old else start + shift
            if content[at:at + len(old)] != old:
                raise SourceError(f"{PATCH.name} does not apply to {path} at line {start}")
            content[at:at + len(old)] = new
            shift += len(new) - len(old)
        target.write_text("".join(content), encoding="utf-8")


def prepare(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    sdist = find_sdist(dest)
    tree = dest / f"kp-{KP_VERSION}"
    stamp = hashlib.sha256(PATCH.read_bytes() + Path(__file__).read_bytes()).hexdigest()
    stamp_file = dest / "kp-source.stamp"
    if tree.is_dir() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    stamp_file.unlink(missing_ok=True)
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            for member in tar.getmembers():
                if member.name.startswith(("/", "..")) or ".." in Path(member.name).parts:
                    raise SourceError(f"unsafe path in {sdist}: {member.name}")
            tar.extractall(dest)
    apply_patch(tree, PATCH.read_text(encoding="utf-8"))
    stamp_file.write_text(stamp)
    return tree


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        print(prepare(Path(argv[1]).resolve()))
    except (SourceError, OSError, tarfile.TarError) as e:
        print(f"pyvkgrad: cannot prepare kp {KP_VERSION}'s sources: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
