"""The journal's fast path with and without the I/O deadline (store/bounded_io.py), side by side:
flushes per second of one small persistent message each (the worst case for the hand-off to the
worker thread, whose cost is per flush), for each sync policy, on a local temporary directory.

    .venv/bin/python benchmarks/journal_io_bench.py --flushes 20000 --repeat 3

Prints, per sync policy, the median flushes/s on the caller's thread (``io_timeout_s=None``, as
before the deadline existed) and through the bounded worker (``io_timeout_s=5``), and the cost of
the hand-off per flush in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_broker.engine.message import Message  # noqa: E402
from reference_broker.store.base import SyncPolicy  # noqa: E402
from reference_broker.store.journal import JournalStore  # noqa: E402


def one_run(sync: SyncPolicy, io_timeout_s: float | None, flushes: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bc-journal-bench-") as tmp:
        store = JournalStore(Path(tmp) / "j", sync=sync, io_timeout_s=io_timeout_s, compact_ratio=0)
        store.recover()
        message = Message(message_id="m", destination="queue://bench", body=b"x" * 256, persistent=True)
        start = time.perf_counter()
        for i in range(flushes):
            store.add("queue://bench", message)
            store.flush()
        elapsed = time.perf_counter() - start
        store.close()
    return flushes / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flushes", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sync", action="append", choices=[p.value for p in SyncPolicy],
                    help="sync policies to measure (default: never and always)")
    args = ap.parse_args()
    if args.flushes < 1 or args.repeat < 1:
        ap.error("--flushes and --repeat: need at least 1")
    policies = [SyncPolicy(p) for p in (args.sync or ["never", "always"])]
    print(f"{'sync':<8} {'caller thread flush/s':>22} {'bounded worker flush/s':>23} {'hand-off us/flush':>18}")
    for policy in policies:
        n = args.flushes if policy is not SyncPolicy.ALWAYS else max(1, args.flushes // 10)
        direct, bounded = [], []
        for _ in range(args.repeat):  # interleaved, so machine noise hits both alike
            direct.append(one_run(policy, None, n))
            bounded.append(one_run(policy, 5.0, n))
        d, b = statistics.median(direct), statistics.median(bounded)
        print(f"{policy.value:<8} {d:>22,.0f} {b:>23,.0f} {(1 / b - 1 / d) * 1e6:>18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
