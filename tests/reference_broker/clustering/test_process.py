"""The broker process (python -m reference_broker) runs its [cluster_connection]: the ready line
names the cluster acceptor, STOMP clients' messages are balanced to the other node, and SIGTERM
(a graceful stop) scales down."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from conformance.clients.stomp_client import StompClient
from machinery.process import free_ports

_READY = re.compile(r"ready: (.*)$")


def _start(tmp: Path, name: str, toml: str) -> tuple[subprocess.Popen, dict[str, int]]:
    config = tmp / f"{name}.toml"
    config.write_text(toml)
    log = (tmp / f"{name}.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "reference_broker", "--config", str(config)], stderr=log,
                            stdout=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        log.seek(0)
        for line in log.read().splitlines():
            match = _READY.search(line)
            if match:
                return proc, {k: int(v.rsplit(":", 1)[1]) for k, _, v in (p.partition("=") for p in match.group(1).split())}
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    log.seek(0)
    raise AssertionError(f"{name} did not get ready:\n{log.read()}")


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _toml(name: str, cluster_port: int, peer_port: int, **extra: str) -> str:
    lines = "\n".join(f"{k} = {v}" for k, v in extra.items())
    return (f'name = "{name}"\nstomp = "127.0.0.1:0"\n[cluster_connection]\nnode_name = "{name}"\n'
            f'acceptor = "127.0.0.1:{cluster_port}"\nstatic_connectors = ["127.0.0.1:{peer_port}"]\n'
            f'cluster_user = "u"\ncluster_password = "p"\nretry_interval = 100\nmax_retry_interval = 100\n{lines}\n')


def test_broker_processes_cluster_and_scale_down_on_sigterm(tmp_path):
    port_a, port_b = free_ports(2)
    b, ports_b = _start(tmp_path, "B", _toml("B", port_b, port_a))
    try:
        a, ports_a = _start(tmp_path, "A", _toml("A", port_a, port_b, scale_down="true",
                                                  message_load_balancing='"STRICT"'))
        try:
            assert ports_a["cluster"] == port_a and ports_b["cluster"] == port_b, "the ready line names the acceptor"
            with StompClient("127.0.0.1", ports_b["stomp"]) as on_b:
                on_b.subscribe("queue://orders", ack="auto").close()  # B has the queue
            time.sleep(1.0)  # A learns B's queue over the link
            with StompClient("127.0.0.1", ports_a["stomp"]) as producer:
                for i in range(4):
                    producer.send("queue://orders", f"m{i}")
            os.kill(a.pid, signal.SIGTERM)  # graceful: A's share goes to B
            assert a.wait(30) == 0
            with StompClient("127.0.0.1", ports_b["stomp"]) as consumer:
                got = sorted(m.text for m in consumer.subscribe("queue://orders", ack="auto").receive_n(4, timeout=10))
            assert got == ["m0", "m1", "m2", "m3"], f"B should hold its STRICT share and A's scaled-down share: {got}"
        finally:
            _end(a)
    finally:
        _end(b)
