"""`brokerconf bench stomp`: end-to-end STOMP throughput, one producer to one consumer,
non-persistent messages, auto-ack, against the reference broker and (when installed) ActiveMQ
Classic, in the same run, with each broker's peak RSS and the ratio between them.

The brokers run as their own processes and the load generator (stomp_load.py) runs its
producer and consumer in two more, so nothing here shares a GIL with the broker under test.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from conformance.targets.activemq.process import ActiveMQProcess, activemq_available
from conformance.targets.reference.process import ReferenceBrokerProcess
from .stomp_load import run_stomp_load

RUN_WARMUP = 10_000  # messages each run sends before timing starts


@dataclass
class TargetBench:
    target: str
    runs: list[float] = field(default_factory=list)  # msgs/s per run
    cpu_us_per_msg: list[float] = field(default_factory=list)  # broker CPU per message, per run
    rss_peak_bytes: int = 0
    error: str | None = None
    skipped: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else 0.0


def _bench_target(name: str, launcher, *, messages: int, body_size: int, repeats: int,
                  destination: str, progress: Callable[[str], None], warmup_messages: int,
                  persistent: bool = False) -> TargetBench:
    result = TargetBench(name)
    try:
        progress(f"starting {name}...")
        launcher.start()
        host, port = "127.0.0.1", launcher.stomp_port
        # One discarded run first, for every target alike: a JVM broker's first run mostly
        # measures its JIT compiler warming up.
        progress(f"{name}: warm-up run ({warmup_messages:,} messages, not counted)")
        warm = run_stomp_load(host, port, target=name, messages=warmup_messages, body_size=body_size,
                              destination=destination, persistent=persistent)
        if warm.error:
            raise RuntimeError(f"warm-up run failed: {warm.error}")
        broker_process = psutil.Process(launcher.pid)
        for attempt in range(1, repeats + 1):
            before = broker_process.cpu_times()
            run = run_stomp_load(host, port, target=name, messages=messages, body_size=body_size,
                                 destination=destination, warmup=RUN_WARMUP, persistent=persistent)
            after = broker_process.cpu_times()
            if run.error:
                result.error = run.error
                progress(f"{name} run {attempt}: error: {run.error}")
                break
            # CPU the broker process spent per message (all its threads; the run's own warm-up
            # messages included): steadier than the rate on a shared machine.
            cpu = (after.user - before.user) + (after.system - before.system)
            result.cpu_us_per_msg.append(cpu / (messages + RUN_WARMUP) * 1e6)
            result.runs.append(run.msgs_per_sec)
            progress(f"{name} run {attempt}/{repeats}: {run.msgs_per_sec:,.0f} msg/s "
                     f"({run.consumer_received:,} messages in {run.seconds:.2f} s; "
                     f"broker CPU {result.cpu_us_per_msg[-1]:.1f} us/msg)")
        result.rss_peak_bytes = launcher.rss_peak_bytes()
    except Exception as exc:  # a broker that cannot start is reported, and the bench goes on
        result.error = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: {result.error}")
    finally:
        launcher.stop()
    return result


def run_stomp_bench(*, messages: int = 200_000, body_size: int = 256, repeats: int = 3,
                    targets: tuple[str, ...] = ("reference", "activemq"), destination: str = "/queue/bench",
                    warmup_messages: int = 100_000, progress: Callable[[str], None] = print,
                    persistent: bool = False) -> list[TargetBench]:
    """``persistent``: persistent sends, and the reference broker on its journal store (``--data``,
    default sync ``always``: one fdatasync per network read batch) in a temporary directory."""
    results = []
    with tempfile.TemporaryDirectory(prefix="brokerconf-bench-") as tmp:
        for name in targets:
            if name == "reference":
                launcher = ReferenceBrokerProcess(name="bench", http=False, log_level="WARNING",
                                                  data_dir=Path(tmp) / "reference-data" if persistent else None)
            elif name == "activemq":
                ok, reason = activemq_available()
                if not ok:
                    results.append(TargetBench(name, skipped=reason))
                    progress(f"activemq: not measured: {reason}")
                    continue
                launcher = ActiveMQProcess(Path(tmp) / "activemq")
            else:
                raise ValueError(f"unknown bench target {name!r}: use reference or activemq")
            results.append(_bench_target(name, launcher, messages=messages, body_size=body_size,
                                         repeats=repeats, destination=destination, progress=progress,
                                         warmup_messages=warmup_messages, persistent=persistent))
    return results


def format_table(results: list[TargetBench], messages: int, body_size: int, persistent: bool = False) -> str:
    kind = "persistent (reference: journal store, sync always)" if persistent else "non-persistent"
    lines = [
        f"STOMP end-to-end, 1 producer -> 1 consumer, {messages:,} x {body_size}-byte {kind} messages, auto-ack",
        f"{'target':<12} {'median msg/s':>14} {'runs (msg/s)':<36} {'peak RSS':>10} {'broker CPU/msg':>15}",
    ]
    for r in results:
        if r.skipped or (r.error and not r.runs):
            lines.append(f"{r.target:<12} {'-':>14} {(r.skipped or r.error)[:60]}")
            continue
        runs = ", ".join(f"{x:,.0f}" for x in r.runs)
        cpu = statistics.median(r.cpu_us_per_msg) if r.cpu_us_per_msg else 0.0
        lines.append(f"{r.target:<12} {r.median:>14,.0f} {runs:<36} {r.rss_peak_bytes / 2**20:>8.1f} MB"
                     f" {cpu:>12.1f} us")
    by_name = {r.target: r for r in results}
    ref, amq = by_name.get("reference"), by_name.get("activemq")
    if ref and amq and ref.runs and amq.runs:
        lines.append(f"ratio reference / activemq: {ref.median / amq.median:.2f}x (target: at least 2x)")
    return "\n".join(lines)


def write_json(results: list[TargetBench], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{**asdict(r), "median": r.median} for r in results], indent=2))
