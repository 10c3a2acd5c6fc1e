#!/usr/bin/env python3
"""Prepare kp 0.9.0's sources with tools/kp-0.9.0.patch for pyvkgrad's wheel build.

    python tools/kp_source.py DEST           # prints the patched source tree's path (under DEST)
    python tools/kp_source.py --fetch FILE   # only fetches the sdist to FILE (tools/_env.sh)

CMakeLists.txt runs this at configure time. The sdist is $PYVKGRAD_KP_SDIST when set, else it is
looked for where pip's configuration says packages come from: its find-links (directories or
pages), then, unless no-index, its index-url and extra-index-urls (the simple API), as pip
resolves them from its environment variables (PIP_FIND_LINKS, PIP_NO_INDEX, PIP_INDEX_URL, ...)
and pip.conf (`pip config list`). Not `pip download`: that builds the sdist's metadata with kp's
setup.py, which needs setuptools from the index (an offline build failed there) and runs kp's
code for nothing. pip's command-line options (`pip wheel --no-index --find-links DIR`) never
reach a build backend, so an offline build sets them in the environment:
`PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR pip wheel <checkout>`. Its sha256 must be the PyPI
release's, wherever it comes from. The patch is applied here, in Python, strictly (every hunk at its place,
context exact), so the build needs no `patch` program. A tree already prepared from the same
sdist, patch and script is reused, which keeps an incremental build incremental.
Standard library only; Python 3.9+.
"""

from __future__ import annotations

import hashlib
import html.parser
import os
import re
import shutil
import ssl
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

KP_VERSION = "0.9.0"
KP_SDIST_SHA256 = "98e583dc6e9731ff6d7a3e3317817e4d93f7b2945929619e29a56325db279949"
KP_SDIST_NAME = f"kp-{KP_VERSION}.tar.gz"
PYPI_SIMPLE = "https://pypi.org/simple"
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


def pip_options() -> dict:
    """pip's find-links, no-index, index-url, extra-index-url and cert, as pip itself reads them
    (`pip config list`: its configuration files, then PIP_ environment variables, which win)."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    options, env = {}, {}
    for line in done.stdout.splitlines():
        m = re.fullmatch(r"(:env:|global|download)\.([\w-]+)='(.*)'", line.strip())
        if m:
            (env if m.group(1) == ":env:" else options)[m.group(2)] = m.group(3)
    options.update(env)
    for key in ("find-links", "no-index", "index-url", "extra-index-url", "cert"):
        value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if value is not None:  # also when `pip config` is unavailable
            options[key] = value
    return options


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _read(url: str, cafile) -> bytes:
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    with urllib.request.urlopen(url, timeout=60, context=context) as response:
        return response.read()


def _local(location: str):
    """The directory or file a find-links or index location names on this machine, or None."""
    if location.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlparse(location).path))
    if "://" not in location:
        return Path(location).expanduser()
    return None


def _candidates(options: dict):
    """Where kp's sdist may be, in pip's order: (description, local path or URL)."""
    for location in options.get("find-links", "").split():
        local = _local(location)
        if local is not None:
            yield location, local if local.is_file() else local / KP_SDIST_NAME
        else:
            yield location, (location, None)  # a page of links
    if options.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        return
    for index in [options.get("index-url") or PYPI_SIMPLE] + options.get(
            "extra-index-url", "").split():
        local = _local(index)
        if local is not None:
            page = local / "kp"
            yield index, (page / "index.html" if (page / "index.html").is_file()
                          else page / KP_SDIST_NAME)
        else:
            yield index, (index.rstrip("/") + "/kp/", None)


def download_sdist(target: Path) -> None:
    """Copy or download kp's sdist to `target` from the first place of pip's configuration
    that has it (a file whose sha256 is not the release's is passed over)."""
    options = pip_options()
    cafile = options.get("cert") or None
    tried = []
    for where, source in _candidates(options):
        try:
            if isinstance(source, tuple) or source.name == "index.html":
                page = source[0] if isinstance(source, tuple) else source.as_uri()
                links = _Links()
                links.feed(_read(page, cafile).decode("utf-8", "replace"))
                urls = [urllib.parse.urljoin(page, h) for h in links.hrefs
                        if urllib.parse.urlparse(h).path.rsplit("/", 1)[-1] == KP_SDIST_NAME]
                if not urls:
                    tried.append(f"{where}: no {KP_SDIST_NAME}")
                    continue
                data = _read(urls[0], cafile)
            elif source.is_file():
                data = source.read_bytes()
            else:
                tried.append(f"{where}: no {KP_SDIST_NAME}")
                continue
        except (OSError, ValueError) as e:
            tried.append(f"{where}: {e}")
            continue
        if hashlib.sha256(data).hexdigest() != KP_SDIST_SHA256:
            tried.append(f"{where}: a {KP_SDIST_NAME} that is not PyPI's (sha256)")
            continue
        print(f"-- pyvkgrad: kp {KP_VERSION}'s sdist from {where}", file=sys.stderr)
        target.write_bytes(data)
        return
    raise SourceError(
        f"kp {KP_VERSION}'s sdist ({KP_SDIST_NAME}) is in none of the places pip's "
        f"configuration names:\n  " + "\n  ".join(tried or ["(none: no-index and no find-links)"])
        + "\npip's command-line options (--no-index, --find-links, --index-url) do not reach "
        "a build; set them in the environment (PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR) or pip.conf, "
        f"or set PYVKGRAD_KP_SDIST=/path/{KP_SDIST_NAME}. To get the file: pip download "
        f"--no-deps --no-binary :all: kp=={KP_VERSION}")


def find_sdist(dest: Path) -> Path:
    given = os.environ.get("PYVKGRAD_KP_SDIST")
    if given:
        sdist = Path(given).expanduser().resolve()
        if not sdist.is_file():
            raise SourceError(f"PYVKGRAD_KP_SDIST={given}: no such file")
    else:
        sdist = dest / "download" / KP_SDIST_NAME
        if not (sdist.is_file() and _sha256(sdist) == KP_SDIST_SHA256):
            sdist.parent.mkdir(parents=True, exist_ok=True)
            download_sdist(sdist)
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
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[1] != "--fetch"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if len(argv) == 3:
            download_sdist(Path(argv[2]))
        else:
            print(prepare(Path(argv[1]).resolve()))
    except (SourceError, OSError, tarfile.TarError) as e:
        print(f"pyvkgrad: cannot prepare kp {KP_VERSION}'s sources: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
