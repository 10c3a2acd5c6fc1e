"""Fingerprints: the sha256 of every operator's outputs on a fixed list of cases, to show that a
device gives the same bits as any other (docs/semantics.md §17, the same-bits contract).

    python -m pyvkgrad fingerprint                 print this device's fingerprints
    python -m pyvkgrad fingerprint --write FILE    store them (JSON)
    python -m pyvkgrad fingerprint --check FILE    compare with a stored file; 1 on a difference

The cases are every record of the operator table in each of its data types, on shapes that
take each plan family (a single element; primes; 255/256/257; rank 4 with small and large
reduced extents), plus ResampleGrad with more than 65,535 contributors per element. Inputs
come from numpy's PCG64 generator seeded per case; each case also stores the sha256 of its
inputs, so a numpy that draws other numbers is told apart from a device that computes other
bits. Operators outside the contract (`OUTSIDE_CONTRACT`) are fingerprinted and reported, but a
difference in them does not fail `--check`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import operators
from .operator_record import Case, Operator

# Operators whose default path does not yet give the same bits everywhere, and why: none
# (the BatchNorm grads joined the contract with the exact sums).
OUTSIDE_CONTRACT: Dict[str, str] = {}
# Shapes per rank limit: one element, a prime, around a workgroup, rank 4 with a short and a
# long reduced extent (BatchNorm's plans), an odd 7x7 layout.
SHAPES = ((1,), (257,), (3, 5, 7, 11), (2, 16, 7, 7), (1, 3, 64, 96))


def _digest(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _inputs(case: Case) -> List[np.ndarray]:
    return [np.asarray(a) for a in case.args if isinstance(a, np.ndarray)] + \
        [np.asarray(v) for v in case.kwargs.values() if isinstance(v, np.ndarray)]


def cases() -> Iterator[Tuple[str, Operator, Case]]:
    """(label, record, case) for every fixed case."""
    for seed, record in enumerate(operators.OPERATORS):
        for dtype in record.dtypes:
            for shape in SHAPES:
                if len(shape) > record.max_rank:
                    continue
                rng = np.random.default_rng([seed, len(shape), int(np.prod(shape))])
                case = record.make_case(rng, shape, dtype)
                # The default path: no execution options (a case may pick `atomic`).
                case = Case(case.args, case.kwargs, {}, case.label)
                yield f"{record.name} {np.dtype(dtype).name} {list(shape)}", record, case
    # More contributors per element than lavapipe's loop limit: windows on lavapipe, none on a
    # GPU, the same sums in the same order.
    rng = np.random.default_rng(2**20)
    record = operators.BY_NAME["resample_grad"]
    for dtype in (np.float32, np.float16):
        dy = rng.standard_normal((1, 2, 512, 512)).astype(dtype)
        for mode in ("nearest_neighbor", "linear"):
            case = Case((dy, (1, 2, 2, 2)), dict(interpolation_mode=mode))
            yield (f"resample_grad {np.dtype(dtype).name} [1, 2, 512, 512] -> [1, 2, 2, 2] "
                   f"{mode}"), record, case


def fingerprints(device=None) -> Dict[str, Dict[str, str]]:
    """label -> {"inputs": sha256, "outputs": sha256} on `device`."""
    return {label: {"inputs": _digest(_inputs(case)),
                    "outputs": _digest(record.run(case, device))}
            for label, record, case in cases()}


def compare(mine: Dict[str, Dict[str, str]], stored: Dict[str, Dict[str, str]]
            ) -> Tuple[List[str], List[str], List[str]]:
    """(cases that differ inside the contract, cases that differ outside it, cases whose
    inputs differ: another numpy's draws, not comparable)."""
    inside, outside, inputs = [], [], []
    for label, want in stored.items():
        got = mine.get(label)
        if got is None or got["inputs"] != want["inputs"]:
            inputs.append(label)
        elif got["outputs"] != want["outputs"]:
            (outside if label.split()[0] in OUTSIDE_CONTRACT else inside).append(label)
    return inside, outside, inputs


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyvkgrad fingerprint",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", metavar="FILE", help="store this device's fingerprints")
    ap.add_argument("--check", metavar="FILE", help="compare with stored fingerprints")
    ap.add_argument("--device", default=None, help="a device index or part of its name")
    args = ap.parse_args(argv)
    from .device import get_device

    # What the arguments name is checked before the cases run: one line and 2, not a traceback.
    stored = None
    if args.check:
        try:
            with open(args.check) as f:
                stored = json.load(f)
        except (OSError, ValueError) as e:
            ap.error(f"--check {args.check}: {e}")
        if not (isinstance(stored, dict) and all(isinstance(v, dict) and "outputs" in v
                                                 for v in stored.values())):
            ap.error(f"--check {args.check}: not a fingerprint file (a JSON object of cases, "
                     f"as --write stores)")
    if args.write:
        folder = os.path.dirname(os.path.abspath(args.write))
        if os.path.isdir(args.write) or not os.access(folder, os.W_OK):
            ap.error(f"--write {args.write}: not a file that can be written")
    try:
        device = get_device(args.device)
    except ValueError as e:
        ap.error(f"--device: {e}" if args.device is not None else str(e))
    mine = fingerprints(device)
    print(f"device: {device.info.name}; {len(mine)} cases")
    if args.write:
        try:
            with open(args.write, "w") as f:
                json.dump(dict(sorted(mine.items())), f, indent=1)
                f.write("\n")
        except OSError as e:
            print(f"python -m pyvkgrad fingerprint: cannot write {args.write}: {e}",
                  file=sys.stderr)
            return 1
        print(f"wrote {args.write}")
    if not args.check:
        if not args.write:
            for label, digests in mine.items():
                print(f"{digests['outputs'][:16]}  {label}")
        return 0
    inside, outside, inputs = compare(mine, stored)
    same = len(stored) - len(inside) - len(outside) - len(inputs)
    print(f"{same} of {len(stored)} cases give the stored bits")
    for title, labels in (("DIFFER (inside the contract)", inside),
                          ("differ (outside the contract: OUTSIDE_CONTRACT)", outside),
                          ("not comparable (other inputs: another numpy?)", inputs)):
        if labels:
            print(f"{title}: {len(labels)}")
            for label in labels:
                print(f"  {label}")
    return 1 if inside or inputs else 0


if __name__ == "__main__":
    sys.exit(main())
