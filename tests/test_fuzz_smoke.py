"""A short bounded run of every fuzz target (fuzz/, issue 20), each in its own process as
`python -m fuzz TARGET` runs it: fails on a crash (an exception other than the parser's own
error, a broken round-trip) or a hang (one input past the time-out), and reports libFuzzer's
totals (executions, covered edges `cov`, features `ft`). Longer runs: README, "Fuzzing".
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.requirements import skip_or_fail

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["stomp", "mqtt", "amqp", "selector", "config", "stomp-session", "mqtt-session"]
SECONDS = int(os.environ.get("BROKERCONF_FUZZ_SECONDS", "8"))
DONE = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+)")



@pytest.mark.parametrize(("argv", "named"), [(["nosuch"], "target"), (["stomp", "--seconds", "0"], "--seconds"),
                                              (["stomp", "--runs", "x"], "--runs"), ([], "target")])
def test_bad_arguments_are_usage_errors_naming_the_option(argv, named, capsys):
    from fuzz.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


def test_every_target_has_a_seed_corpus():
    from fuzz.__main__ import CORPUS
    from fuzz.targets import TARGETS as REGISTERED

    assert sorted(REGISTERED) == sorted(TARGETS)
    for target in TARGETS:
        assert len(list((CORPUS / target).iterdir())) >= 4, f"fuzz/corpus/{target} has too few seeds"


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_without_crash_or_hang(target, tmp_path, record_property):
    try:
        import atheris  # noqa: F401
    except ImportError:
        skip_or_fail("atheris", "atheris is not installed (pip install -e '.[test]')")
    cmd = [sys.executable, "-m", "fuzz", target, "--seconds", str(SECONDS), "--timeout", "5",
           "--work", str(tmp_path)]
    # generous bound: instrumenting the imports takes a few seconds on a loaded machine
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=SECONDS + 120)
    out = done.stdout + done.stderr
    found = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert done.returncode == 0 and not found, (
        f"fuzz target {target}: exit {done.returncode}, artifacts {found} in {tmp_path}\n{out[-4000:]}")
    totals = DONE.search(out)
    assert totals, f"fuzz target {target}: libFuzzer printed no DONE line\n{out[-2000:]}"
    runs, cov, ft = map(int, totals.groups())
    assert runs > 0, f"fuzz target {target} executed no input"
    record_property("fuzz_executions", runs)
    record_property("fuzz_cov", cov)
    record_property("fuzz_ft", ft)
    print(f"fuzz {target}: {runs} executions in {SECONDS} s, cov {cov}, ft {ft}")
