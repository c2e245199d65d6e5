"""The command line: bad options are named; the main job runs and writes its report."""

import json
import subprocess
import sys

import pytest


def _brokerconf(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "brokerconf.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_unknown_bench_target_is_named():
    proc = _brokerconf("bench", "stomp", "--targets", "reference,hornetq")
    assert proc.returncode == 2
    assert "unknown target(s) hornetq in --targets" in proc.stderr


def test_bad_number_is_named():
    proc = _brokerconf("bench", "stomp", "--messages", "-3")
    assert proc.returncode == 2
    assert "--messages" in proc.stderr and "positive integer" in proc.stderr


@pytest.mark.slow
def test_main_job_against_reference_writes_report(tmp_path):
    proc = _brokerconf("run", "--targets", "reference", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = list(tmp_path.iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    checks = results["targets"]["reference"]["checks"]
    assert len(checks) >= 9
    assert all(c["outcome"] == "passed" for c in checks), checks
    assert "GRP-PIN-1" in (run_dir / "index.html").read_text()
