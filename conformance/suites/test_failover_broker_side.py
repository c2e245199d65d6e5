"""The broker side of client failover, against the A-MQ "Fault Tolerant Messaging" guide, 2.1.2
"Broker-side configuration" (../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue
fault_tolerance.toml): a listening endpoint is never given a failover URI (FT-DYNAMIC-5).

Generated only for targets whose listeners this module knows how to configure by hand: the
reference broker (its --stomp flag and its configuration file's ``stomp`` key). ActiveMQ's
transportConnector is not rendered from a test's choice of URI here, so on ActiveMQ the statement
stays "not checked" rather than being reported not applicable.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conformance.plugin import STATE

FAILOVER_LISTENER = "failover:(stomp://127.0.0.1:61613,stomp://127.0.0.1:61614)"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target_name" in metafunc.fixturenames:
        state = metafunc.config.stash[STATE]
        names = [n for n in dict.fromkeys(state.target_names) if state.targets[n].kind == "reference"]
        metafunc.parametrize("target_name", names, ids=names)


def _start(args: list[str], cwd) -> subprocess.CompletedProcess:
    # a broker that accepted the listener would serve for ever: the timeout bounds that case, and
    # its process is killed by subprocess.run when it fires
    return subprocess.run([sys.executable, "-m", "reference_broker", "--name", "ftdyn5", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.spec("FT-DYNAMIC-5")
@pytest.mark.parametrize("where", ["flag", "config-file"])
def test_a_listener_given_a_failover_uri_is_refused(target_name, where, tmp_path):
    if where == "flag":
        args = ["--stomp", FAILOVER_LISTENER]
    else:
        config = tmp_path / "broker.toml"
        config.write_text(f'stomp = "{FAILOVER_LISTENER}"\n')
        args = ["--config", str(config)]
    try:
        done = _start(args, tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"FT-DYNAMIC-5: the broker started with a failover: URI as its STOMP listener ({where})")
    assert done.returncode == 2, (f"FT-DYNAMIC-5: a failover: URI as the STOMP listener ({where}) should be refused as "
                                  f"a usage error (exit 2); exit {done.returncode}\n{done.stderr[-2000:]}")
    assert "stomp" in done.stderr and "HOST:PORT" in done.stderr, \
        f"FT-DYNAMIC-5: the refusal should name the stomp listener and what it takes: {done.stderr[-2000:]}"
