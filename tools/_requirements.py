#!/usr/bin/env python3
"""Print requirements from pyproject.toml, one a line, for tools/_env.sh.

    _requirements.py run      [project] dependencies
    _requirements.py test     [project.optional-dependencies] test
    _requirements.py build    [build-system] requires

Several groups may be given. Uses tomllib where the Python has it (3.11+), else a small
reader of the `key = [ "...", ... ]` arrays that pyproject.toml uses.
"""

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _load() -> dict:
    text = PYPROJECT.read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:
        tomllib = None
    if tomllib is not None:
        data = tomllib.loads(text)
        return {"run": data["project"].get("dependencies", []),
                "test": data["project"].get("optional-dependencies", {}).get("test", []),
                "build": data["build-system"]["requires"]}
    found, table = {}, ""
    for m in re.finditer(r"^\[([^\]]+)\]|^([A-Za-z0-9_-]+)\s*=\s*\[(.*?)\]", text, re.M | re.S):
        if m.group(1):
            table = m.group(1).strip()
            continue
        values = re.findall(r'"([^"]*)"', re.sub(r"#[^\n]*", "", m.group(3)))
        found[(table, m.group(2))] = values
    return {"run": found.get(("project", "dependencies"), []),
            "test": found.get(("project.optional-dependencies", "test"), []),
            "build": found[("build-system", "requires")]}


def main(groups) -> int:
    data = _load()
    for group in groups:
        for requirement in data[group]:
            print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
