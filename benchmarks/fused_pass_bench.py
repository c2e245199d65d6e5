"""Time the per-run pass of the checkers (reports/checkers/registry.py, `facts_of` over
`history.Columns`) on one history file, without Spark: what one Spark task of `brokerconf
analyze` spends judging a run once it has read it.

    .venv/bin/python benchmarks/fused_pass_bench.py /tmp/pb/h1m.jsonl [--repeat N] [--scale K] [--shuffle]

The history is read as the task reads it (reports/pipeline/fused/load.py: the C scanner, else
pyarrow). ``--scale 8`` runs the history eight times over (8M operations from the 1M one).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.checkers.history import Columns  # noqa: E402  (after the path insert)
from reports.checkers.registry import facts_of  # noqa: E402
from reports.pipeline.fused.load import read_history_file  # noqa: E402


def scaled(table: pa.Table, k: int) -> pa.Table:
    """The history ``k`` times over, each copy's indexes after the previous one's."""
    if k == 1:
        return table
    span = int(pa.compute.max(table["index"]).as_py()) + 1
    parts = [table.set_column(table.schema.get_field_index("index"), "index", pa.compute.add(table["index"], i * span))
             for i in range(k)]
    return pa.concat_tables(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("history", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shuffle", action="store_true", help="rows in reverse order (the pass must sort them)")
    ap.add_argument("--scale", type=int, default=1, help="the history this many times over, one after the other")
    args = ap.parse_args()
    t = time.perf_counter()
    table = scaled(read_history_file(args.history).table, args.scale)
    if args.shuffle:
        table = table.take(pa.array(range(table.num_rows - 1, -1, -1)))
    print(f"read {args.history}: {table.num_rows} rows in {time.perf_counter() - t:.1f}s", flush=True)
    best = None
    for _ in range(args.repeat):
        t = time.perf_counter()
        facts = facts_of(Columns(table))
        took = time.perf_counter() - t
        best = took if best is None else min(best, took)
    found = sum(len(facts[name]["found"]) for name in ("total_queue", "fifo", "groups"))
    print(f"facts_of(Columns): {best:.2f}s (best of {args.repeat}), {found} anomalies", flush=True)


if __name__ == "__main__":
    main()
