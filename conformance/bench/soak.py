"""`brokerconf bench soak`: the reference broker under mixed STOMP / MQTT / AMQP load with
misbehaving clients (soak_clients.py) for a given time, watched from outside.

The broker runs as its own process (conformance/targets/reference/process.py). Every
`sample_every` seconds the soak reads the broker's resident set size (psutil) and its event-loop
lag (the `/health` HTTP resource, reference_broker/loop_lag.py); every `report_every` seconds it
prints a row of the table. At the end it fits a least-squares line to RSS over time after the
warm-up and prints the slope in MB per minute with a verdict: memory must not trend upward once
the broker is warm (issue 20, "Soak").
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from conformance.targets.reference.process import ReferenceBrokerProcess

from .soak_clients import Counters, Ports, start_workers

MB = 1024 * 1024

#: the broker's configuration for the soak: a memory limit, and ActiveMQ's slow-consumer
#: handling on every topic so a subscriber that never reads costs a bounded backlog
#: (ActiveMQ "Slow Consumer Handling", constant pending message limit strategy)
BROKER_CONFIG = """\
[system_usage]
memory_limit = 67108864

[[policy_entries]]
topic = ">"
pending_message_limit_strategy = { type = "constant", limit = 1000 }
"""

_COLUMNS = ("elapsed s", "RSS MB", "lag ms", "lag max ms", "conns", "sent/s", "recv/s", "churn/s",
            "garbage/s", "tx sends", "errors")


@dataclass
class Sample:
    t: float  # seconds since the load started
    rss_bytes: int
    lag_ms: float | None  # the broker's last loop-lag probe
    lag_recent_max_ms: float | None  # its largest over the broker's recent window
    connections: int | None


@dataclass
class SoakResult:
    duration_s: float
    warmup_s: float
    max_slope_mb_per_min: float
    samples: list[Sample] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    slope_mb_per_min: float | None = None
    trend_samples: int = 0
    broker_exit: int | None = None  # set when the broker died during the soak
    health_errors: int = 0
    error: str | None = None
    without: list[str] = field(default_factory=list)  # clients left out (--without)

    @property
    def passed(self) -> bool:
        return (self.error is None and self.broker_exit is None and self.slope_mb_per_min is not None
                and self.slope_mb_per_min <= self.max_slope_mb_per_min)


def least_squares_slope(xs: list[float], ys: list[float]) -> float:
    """Slope of the least-squares line through the points (xs must not all be equal)."""
    mean_x = statistics.fmean(xs)
    mean_y = statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    return sxy / sxx


def memory_trend(samples: list[Sample], warmup_s: float) -> tuple[float | None, int]:
    """RSS slope in MB per minute over the samples taken after the warm-up, and their number
    (None with fewer than three samples)."""
    after = [s for s in samples if s.t >= warmup_s]
    if len(after) < 3 or after[0].t == after[-1].t:
        return None, len(after)
    slope = least_squares_slope([s.t / 60 for s in after], [s.rss_bytes / MB for s in after])
    return slope, len(after)


def _health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _sample(process: psutil.Process, http_port: int, t: float) -> tuple[Sample, bool]:
    rss = process.memory_info().rss
    health = _health(http_port)
    loop = (health or {}).get("loop") or {}
    sample = Sample(t, rss, loop.get("lag_ms"), loop.get("lag_max_recent_ms"),
                    (health or {}).get("connections"))
    return sample, health is not None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(samples: list[Sample], before: dict[str, int], now: dict[str, int], seconds: float) -> str:
    last = samples[-1]
    lags = [s.lag_recent_max_ms for s in samples if s.lag_recent_max_ms is not None]

    def rate(*keys: str) -> float:
        return sum(now.get(k, 0) - before.get(k, 0) for k in keys) / seconds

    errors = sum(v for k, v in now.items() if k.endswith(".errors"))
    cells = (
        f"{last.t:.0f}", f"{last.rss_bytes / MB:.1f}", _fmt(last.lag_ms, ".1f"), _fmt(max(lags) if lags else None, ".1f"),
        _fmt(last.connections, "d"),
        f"{rate('stomp.sent', 'mqtt.sent', 'amqp.sent', 'fresh.sent'):.0f}",
        f"{rate('stomp.received', 'mqtt.received', 'amqp.received'):.0f}",
        f"{rate('churn.connections'):.1f}", f"{rate('garbage.sent'):.1f}", f"{now.get('tx.sent', 0)}", f"{errors}",
    )
    return "  ".join(c.rjust(len(h)) for c, h in zip(cells, _COLUMNS))


def run_soak(*, duration: float, report_every: float, sample_every: float, warmup: float, rate: float,
             max_slope: float, without: frozenset[str] = frozenset(),
             progress: Callable[[str], None] = print) -> SoakResult:
    result = SoakResult(duration, warmup, max_slope, without=sorted(without))
    with tempfile.TemporaryDirectory(prefix="brokerconf-soak-") as tmp:
        config = Path(tmp) / "broker.toml"
        config.write_text(BROKER_CONFIG)
        broker = ReferenceBrokerProcess(name="soak", config_file=config, mqtt=True, amqp=True, http=True,
                                        log_level="WARNING")
        stop = threading.Event()
        threads: list[threading.Thread] = []
        try:
            broker.start()
            process = psutil.Process(broker.pid)
            ports = Ports(broker.stomp_port, broker.mqtt_port, broker.amqp_port)
            progress(f"soak: reference broker pid {broker.pid} (stomp {ports.stomp}, mqtt {ports.mqtt}, "
                     f"amqp {ports.amqp}, http {broker.http_port}); {duration:.0f} s of load, "
                     f"{rate:g} msg/s per producer, warm-up {warmup:.0f} s"
                     + (f", without {', '.join(sorted(without))}" if without else ""))
            counters = Counters()
            threads = start_workers(ports, counters, stop, rate, without)
            progress("  ".join(_COLUMNS))
            started = time.monotonic()
            period_samples: list[Sample] = []
            period_counts = counters.snapshot()
            next_report = report_every
            next_sample = 0.0
            while True:
                now = time.monotonic() - started
                if now >= duration:
                    break
                if now < next_sample:
                    time.sleep(min(next_sample - now, duration - now))
                    continue
                next_sample += sample_every
                if not broker.running:
                    result.broker_exit = broker.proc.returncode
                    progress(f"soak: the broker exited with {result.broker_exit}:\n{broker.log_tail()}")
                    break
                sample, answered = _sample(process, broker.http_port, now)
                result.health_errors += not answered
                result.samples.append(sample)
                period_samples.append(sample)
                if sample.t >= next_report or sample.t + sample_every >= duration:
                    counts = counters.snapshot()
                    progress(_row(period_samples, period_counts, counts, max(sample.t - (next_report - report_every), 1e-9)))
                    period_samples, period_counts = [], counts
                    next_report += report_every
            result.counters = counters.snapshot()
        except Exception as exc:  # reported with the numbers gathered so far
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
            if broker.running is False and broker.proc is not None and result.broker_exit is None and result.samples:
                result.broker_exit = broker.proc.returncode
            broker.stop()
    result.slope_mb_per_min, result.trend_samples = memory_trend(result.samples, warmup)
    return result


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def format_summary(result: SoakResult) -> str:
    lines = []
    samples = result.samples
    counts = result.counters
    lines.append(f"samples: {len(samples)} over {samples[-1].t:.0f} s" if samples else "samples: none")
    if samples:
        rss = [s.rss_bytes / MB for s in samples]
        after = [s.rss_bytes / MB for s in samples if s.t >= result.warmup_s]
        lines.append(f"RSS MB: start {rss[0]:.1f}, at end of warm-up {after[0] if after else float('nan'):.1f}, "
                     f"end {rss[-1]:.1f}, peak {max(rss):.1f}")
        lags = [s.lag_recent_max_ms for s in samples if s.lag_recent_max_ms is not None]
        if lags:
            lines.append(f"loop lag ms (broker's recent maximum, per sample): median {statistics.median(lags):.1f}, "
                         f"p99 {_percentile(lags, 0.99):.1f}, max {max(lags):.1f}")
        else:
            lines.append("loop lag: not available (the broker's /health answered no loop lag)")
    if result.health_errors:
        lines.append(f"/health unanswered {result.health_errors} times")
    sent = sum(counts.get(k, 0) for k in ("stomp.sent", "mqtt.sent", "amqp.sent", "fresh.sent"))
    received = sum(counts.get(k, 0) for k in ("stomp.received", "mqtt.received", "amqp.received"))
    lines.append(f"load: {sent:,} messages sent (stomp {counts.get('stomp.sent', 0):,}, mqtt {counts.get('mqtt.sent', 0):,}, "
                 f"amqp {counts.get('amqp.sent', 0):,}, to fresh topic names {counts.get('fresh.sent', 0):,}), "
                 f"{received:,} received")
    if result.without:
        lines.append(f"left out (--without): {', '.join(result.without)}")
    lines.append(f"misbehaving: {counts.get('churn.connections', 0):,} churned connections, "
                 f"{counts.get('garbage.sent', 0):,} garbage connections, {counts.get('tx.sent', 0):,} sends in "
                 f"{counts.get('tx.begun', 0):,} never-committed transactions, "
                 f"{counts.get('stuck.connected', 0)} never-reading consumers")
    errors = {k: v for k, v in sorted(counts.items()) if ".errors" in k or ".last_error:" in k}
    if errors:
        lines.append("client errors: " + ", ".join(f"{k} {v}" for k, v in errors.items()))
    if result.slope_mb_per_min is None:
        lines.append(f"memory trend after warm-up ({result.warmup_s:.0f} s): not enough samples "
                     f"({result.trend_samples})")
    else:
        lines.append(f"memory trend after warm-up ({result.warmup_s:.0f} s, {result.trend_samples} samples): "
                     f"{result.slope_mb_per_min:+.3f} MB/min (least squares)")
    if result.error:
        verdict = f"FAIL: the soak stopped: {result.error}"
    elif result.broker_exit is not None:
        verdict = f"FAIL: the broker exited with {result.broker_exit} during the soak"
    elif result.slope_mb_per_min is None:
        verdict = "FAIL: too few samples after the warm-up to judge the memory trend"
    elif result.passed:
        verdict = (f"PASS: memory flat after warm-up ({result.slope_mb_per_min:+.3f} <= "
                   f"{result.max_slope_mb_per_min:.3f} MB/min)")
    else:
        verdict = (f"FAIL: memory grows after warm-up ({result.slope_mb_per_min:+.3f} > "
                   f"{result.max_slope_mb_per_min:.3f} MB/min)")
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


def write_json(result: SoakResult, path: Path) -> None:
    data = asdict(result)
    data["passed"] = result.passed
    path.write_text(json.dumps(data, indent=2))
