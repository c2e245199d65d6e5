"""Micro-benchmark of selector evaluation against growing message values (no broker).

Issue 20: a LIKE translated into a backtracking regular expression froze the broker on
`p LIKE '%a%a%a%a%a%a%a%a%a%a%a%a%b'` and 100 `a`s. This prints, for each selector and each value
length, the best time of one evaluation and the time per character of the value: a cost linear
in the value's length shows as a flat ns/char column. No assertions (speed is watched here,
never asserted in tests).

    python3 benchmarks/selector_bench.py [--sizes 1000,10000,100000,1000000] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from reference_broker.engine.selector import parse_selector  # noqa: E402

CASES = [
    # (label, selector, value of length n). The values make the matcher do its most work: the
    # first and last parts match, so the parts between must be searched for across the value.
    ("attack: 12 x %a then %b", "p LIKE '" + "%a" * 12 + "%b'", lambda n: "a" * n),
    ("attack, last %a is %c", "p LIKE '" + "%a" * 11 + "%c%b'", lambda n: "a" * (n - 1) + "b"),
    ("200 x %a_ then %c%b", "p LIKE '" + "%a_" * 200 + "%c%b'", lambda n: "a" * (n - 1) + "b"),
    ("%, 255 x a then _b, %c", "p LIKE '%" + "a" * 254 + "_b%c'", lambda n: "a" * (n - 1) + "c"),
    ("prefix%", "p LIKE 'abc%'", lambda n: "abc" + "x" * (n - 3)),
    ("%middle% (absent)", "p LIKE '%needle%'", lambda n: "x" * n),
    ("a_c% escape", "p LIKE 'x!_%' ESCAPE '!'", lambda n: "x_" + "y" * (n - 2)),
    ("= on a long string", "p = 'abc'", lambda n: "abc" + "x" * (n - 3)),
    ("IN of 1000 strings", "p IN (" + ",".join(f"'v{i}'" for i in range(1000)) + ")",
     lambda n: "v" * n),
    ("convert: numeric string = 5", "convert_string_expressions:p = 5", lambda n: "9" * n),
]


def best_of(rounds: int, fn) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000",
                        help="comma-separated value lengths (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="best of R rounds (default: 3)")
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        if any(s < 4 for s in sizes) or args.rounds < 1:
            raise ValueError
    except ValueError:
        parser.error("--sizes takes comma-separated integers >= 4 and --rounds a positive integer")
    header = f"{'selector':32}" + "".join(f"{n:>12,} chars" for n in sizes)
    print(header)
    print(f"{'':32}" + "".join(f"{'ms (ns/char)':>18}" for _ in sizes))
    for label, text, make in CASES:
        selector = parse_selector(text)
        cells = []
        for n in sizes:
            lookup = {"p": make(n)}.get
            seconds = best_of(args.rounds, lambda: selector.evaluate(lookup))
            cells.append(f"{seconds * 1e3:9.3f} ({seconds * 1e9 / n:5.1f})")
        print(f"{label:32}" + "".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
