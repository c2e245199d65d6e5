"""The arguments of `brokerconf analyze`, apart from the pipeline so building the command line
parser does not import pyspark (every `brokerconf` command builds it)."""

from __future__ import annotations

import argparse

LOCAL = "local[*]"
#: one engine: a Spark task per history computes every checker's facts with reports/checkers
#: (the Spark SQL copies of the checkers are gone, issue 17); the option stays for scripts that pass it
ENGINES = ("fused",)
DEFAULT_ENGINE = "fused"


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0 (argparse names the option and exits 2 otherwise).
    Shared with brokerconf/cli.py, whose parser already imports this module."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH",
                        help="a history.jsonl, a run directory, a directory of runs, or histories.parquet "
                             "written by an earlier analysis")
    parser.add_argument("--out", metavar="DIR", help="where results go (default: reports/out/analysis-<UTC time>)")
    parser.add_argument("--master", default=LOCAL, metavar="URL",
                        help="Spark master: local[*] (default, embedded) or spark://HOST:PORT (a standalone cluster)")
    parser.add_argument("--skip-malformed", action="store_true",
                        help="analyse without malformed lines (listed; every verdict of their run is then unknown)")
    parser.add_argument("--max-downtime", type=float, metavar="S",
                        help="failover downtime bound in seconds: a client slower to recover makes the verdict false "
                             "(default: each run's experiment setting, from its history's harness records)")
    parser.add_argument("--duplicates-allowed", action="store_const", const=True, default=None,
                        help="total queue: duplicated deliveries are reported but do not make the verdict false "
                             "(default: each run's experiment setting, else not allowed)")
    parser.add_argument("--engine", choices=ENGINES, default=DEFAULT_ENGINE,
                        help="analysis engine: fused, the only one (a Spark task per history runs every checker "
                             f"of reports/checkers on its runs; default {DEFAULT_ENGINE})")
    parser.add_argument("--split-rows", type=positive_int, metavar="N",
                        help="a history above N rows is read in pieces and judged in parts split by each "
                             "checker's key, with the same verdicts (reports/checkers/split.py; default: "
                             "$BROKERCONF_SPLIT_ROWS, else what one task's memory holds)")
