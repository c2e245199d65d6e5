#!/usr/bin/env python3
"""Compare conformance matrices cell for cell: the same outcome for every target x statement, and
under it the same outcome for every test. Prints one line per difference; exit 1 when there is
any, 0 when the matrices agree (so "identical matrices" is this command's empty output).

    .venv/bin/python scripts/matrix_diff.py reports/out/RUN1/matrix.json reports/out/RUN2/matrix.json [...]

A client column (``client: <subject>``, the statements about a client library) is compared like a
target's. Times (a test's seconds, the generation time) and the wording of reasons are not
compared: they differ between runs that reach the same verdicts; everything that decides a
verdict is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cells(matrix: dict) -> dict[tuple[str, str], tuple[str, tuple]]:
    """(target, spec) -> (the cell's outcome, its tests' (node ID, outcome) pairs, sorted)."""
    out = {}
    for target, row in matrix["matrix"].items():
        for spec, cell in row.items():
            tests = tuple(sorted((t["nodeid"], t["outcome"]) for t in cell.get("tests", [])))
            out[(target, spec)] = (cell["outcome"], tests)
    return out


def differences(first: dict, other: dict) -> list[str]:
    a, b = cells(first), cells(other)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            lines.append(f"{key[0]} {key[1]}: only in {'the first' if key in a else 'the other'}")
            continue
        (outcome_a, tests_a), (outcome_b, tests_b) = a[key], b[key]
        if outcome_a != outcome_b:
            lines.append(f"{key[0]} {key[1]}: {outcome_a} -> {outcome_b}")
        for (nodeid, x), (_, y) in zip(tests_a, tests_b):
            if x != y:
                lines.append(f"{key[0]} {key[1]}: {nodeid}: {x} -> {y}")
        if [n for n, _ in tests_a] != [n for n, _ in tests_b]:
            lines.append(f"{key[0]} {key[1]}: the tests behind the cell differ")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrices", nargs="+", type=Path, metavar="matrix.json")
    args = parser.parse_args(argv)
    if len(args.matrices) < 2:
        parser.error("give at least two matrices to compare")
    loaded = []
    for path in args.matrices:
        try:
            loaded.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            parser.error(f"{path}: not a readable matrix ({exc})")
    found = False
    for path, other in zip(args.matrices[1:], loaded[1:]):
        for line in differences(loaded[0], other):
            found = True
            print(f"{args.matrices[0]} vs {path}: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
