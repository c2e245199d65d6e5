"""`python -m fuzz TARGET [--seconds N] [--runs N] [--work DIR] [--timeout S]`: fuzz one target.

Runs atheris (libFuzzer) in this process: new interesting inputs go to the work directory
(default .tools/fuzz/TARGET, git-ignored), the committed seeds in fuzz/corpus/TARGET are read
too, and a crash or a hang is written to WORK/crash-* / WORK/timeout-* with the exit status
libFuzzer gives (non-zero). `python -m fuzz --list` names the targets. At the end libFuzzer
prints its totals (`#N DONE cov: C ft: F ...`): executions, covered edges and features.
Options after `--` go to libFuzzer unchanged (e.g. `-- -jobs=2`, `-- -dict=...`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value
    return parse


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=sorted(TARGETS), help="what to fuzz")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--seconds", type=_positive(int), default=60, help="total run time (default 60)")
    parser.add_argument("--runs", type=_positive(int), default=None,
                        help="stop after this many executions (default: no limit)")
    parser.add_argument("--timeout", type=_positive(int), default=5,
                        help="seconds one input may take before it counts as a hang (default 5)")
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for new inputs and crash files (default .tools/fuzz/TARGET)")
    args = parser.parse_args(argv)
    if not args.list and args.target is None:
        parser.error("the following arguments are required: target (or --list)")
    return args, extra


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name in sorted(TARGETS):
            print(f"{name:14} {TARGETS[name].__doc__.strip().splitlines()[0]}")
        return 0
    try:
        import atheris  # imported here so --list and the usage errors work without it
    except ImportError:
        print("python -m fuzz: atheris is not installed (it is in the test extra: "
              "pip install -e '.[test]')", file=sys.stderr)
        return 1

    work = args.work or ROOT / ".tools" / "fuzz" / args.target
    work.mkdir(parents=True, exist_ok=True)
    seeds = CORPUS / args.target
    libfuzzer = [
        sys.argv[0],
        f"-max_total_time={args.seconds}",
        f"-timeout={args.timeout}",
        f"-artifact_prefix={work}/",
        "-print_final_stats=1",
        "-rss_limit_mb=2048",
        *( [f"-runs={args.runs}"] if args.runs else [] ),
        *extra,
        str(work / "corpus"),  # the first directory receives the new inputs
        str(seeds),
    ]
    (work / "corpus").mkdir(exist_ok=True)
    with atheris.instrument_imports(include=["reference_broker"]):
        one_input = TARGETS[args.target](work)
    atheris.Setup(libfuzzer, one_input)
    atheris.Fuzz()
    return 0  # not reached: libFuzzer exits the process


if __name__ == "__main__":
    sys.exit(main())
