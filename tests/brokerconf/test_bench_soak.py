"""`brokerconf bench soak` (conformance/bench/soak.py): its options, its memory-trend arithmetic,
and a run of a few seconds that must sample the broker's RSS and loop lag and print the table and
the verdict. The verdict itself is not judged here: a soak of seconds says nothing about leaks,
and benchmarks are read, not asserted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from conformance.bench.soak import MB, Sample, least_squares_slope, memory_trend


def _brokerconf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command in its own process group: if it hangs, its broker goes with it (by group id)."""
    proc = subprocess.Popen([sys.executable, "-m", "brokerconf.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"brokerconf {' '.join(args)} did not finish in {timeout} s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_least_squares_slope_of_a_line_and_of_noise():
    assert least_squares_slope([0, 1, 2, 3], [5, 7, 9, 11]) == pytest.approx(2.0)
    assert least_squares_slope([0, 1, 2, 3, 4, 5], [3, 1, 3, 1, 3, 1]) == pytest.approx(-3 / 17.5)


def test_memory_trend_leaves_out_the_warm_up_and_reads_mb_per_minute():
    # fast growth during a 60 s warm-up, then exactly 2 MB per minute
    samples = [Sample(t, int((100 + t) * MB), None, None, None) for t in range(0, 60, 5)]
    samples += [Sample(t, int((160 + 2 * (t - 60) / 60) * MB), None, None, None) for t in range(60, 600, 10)]
    slope, n = memory_trend(samples, warmup_s=60)
    assert n == 54
    assert slope == pytest.approx(2.0, abs=0.01)
    assert memory_trend(samples[:13], warmup_s=60) == (None, 1)


@pytest.mark.parametrize("args, named", [
    (["--duration", "0"], "argument --duration"),
    (["--duration", "ten"], "argument --duration"),
    (["--rate", "-1"], "argument --rate"),
    (["--sample-every", "nan"], "argument --sample-every"),
    (["--max-slope", "-0.1"], "argument --max-slope"),
    (["--duration", "10", "--warmup", "20"], "--warmup (20 s) must be shorter than --duration (10 s)"),
    (["--duration", "5", "--report-every", "10"], "--report-every (10 s) must not exceed --duration (5 s)"),
    (["--duration", "10", "--report-every", "2", "--sample-every", "3"], "--sample-every (3 s) must not exceed"),
    (["--without", "tx,gremlins"], "--without: unknown client(s) gremlins (known: fresh, stuck, churn, garbage, tx)"),
])
def test_bad_soak_option_is_a_usage_error_naming_it(args, named):
    proc = _brokerconf("bench", "soak", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr, proc.stderr
    assert "reference broker pid" not in proc.stdout, "nothing may start on a usage error"


@pytest.mark.slow
def test_bench_soak_runs_and_samples_rss_and_loop_lag(tmp_path):
    out = tmp_path / "soak.json"
    proc = _brokerconf("bench", "soak", "--duration", "8", "--report-every", "2", "--sample-every", "0.5",
                       "--warmup", "2", "--rate", "20", "--json", str(out), timeout=180)
    # 0 or 1 is the verdict (not judged on a few seconds); anything else is a crash or a usage error
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("elapsed s"))
    assert "RSS MB" in lines[header] and "lag ms" in lines[header]
    rows = [line.split() for line in lines[header + 1:header + 5]]
    assert len(rows) == 4 and all(len(row) == 11 for row in rows), lines[header:header + 5]
    assert [float(row[0]) for row in rows] == sorted(float(row[0]) for row in rows)
    assert any(line.startswith("memory trend after warm-up (2 s, ") and "MB/min" in line for line in lines)
    assert lines[-2].startswith("verdict: PASS") or lines[-2].startswith("verdict: FAIL: memory grows"), lines[-2]

    result = json.loads(out.read_text())
    samples = result["samples"]
    assert len(samples) >= 12, f"sampled only {len(samples)} times in 8 s at 0.5 s"
    assert all(s["rss_bytes"] > 10 * MB for s in samples)
    assert sum(s["lag_ms"] is not None for s in samples) >= len(samples) - 1, "the broker's /health gave no loop lag"
    assert all(s["connections"] >= 2 for s in samples if s["connections"] is not None)
    assert result["slope_mb_per_min"] is not None and result["trend_samples"] >= 10
    counts = result["counters"]
    for key in ("stomp.sent", "stomp.received", "mqtt.sent", "mqtt.received", "amqp.sent", "amqp.received",
                "fresh.sent", "churn.connections", "garbage.sent", "tx.sent"):
        assert counts.get(key, 0) > 0, f"the soak never did {key}: {counts}"
    assert counts.get("stuck.connected") == 2, counts
    assert result["broker_exit"] is None and result["error"] is None
