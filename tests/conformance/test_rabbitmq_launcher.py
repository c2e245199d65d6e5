"""End-to-end check of the RabbitMQ launcher (conformance.targets.rabbitmq.process)."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import time

import psutil
import pytest

from conformance.requirements import skip_or_fail
import conformance.targets.rabbitmq.process as rmq_mod
from conformance.targets.rabbitmq.process import (
    RabbitMQNotInstalled,
    RabbitMQProcess,
    RabbitMQStartError,
    rabbitmq_available,
)
from machinery.waiting import poll


def _require(**plugins):
    ok, reason = rabbitmq_available(**plugins)
    if not ok:
        skip_or_fail("rabbitmq", reason)  # the only reason to skip: the Debian package is not installed


def _listening(pid: int) -> list:
    return [c.laddr for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


# ---------------------------------------------------------------- no broker needed


def test_not_installed_is_reported_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(rmq_mod, "RABBITMQ_SCRIPTS", tmp_path / "no-rabbit-here")
    ok, reason = rabbitmq_available()
    assert not ok and "apt-get install rabbitmq-server" in reason
    with pytest.raises(RabbitMQNotInstalled, match="rabbitmq-server"):
        RabbitMQProcess(tmp_path / "w").start(timeout=5)


def test_rendered_config_env_and_plugins(tmp_path):
    r = RabbitMQProcess(tmp_path / "w", name="cfgtest", stomp=True, mqtt=True, extra_config="heartbeat = 5")
    r.amqp_port, r.dist_port, r.epmd_port, r.stomp_port, r.mqtt_port = 1001, 1002, 1003, 1004, 1005
    conf = r.render_config().splitlines()
    for want in ("listeners.tcp.1 = 127.0.0.1:1001", "loopback_users = none", "stomp.listeners.tcp.1 = 127.0.0.1:1004",
                 "mqtt.listeners.tcp.1 = 127.0.0.1:1005", "heartbeat = 5"):
        assert want in conf, want
    assert r.render_enabled_plugins() == "[rabbitmq_amqp1_0,rabbitmq_stomp,rabbitmq_mqtt].\n"
    assert RabbitMQProcess(tmp_path / "x", amqp10=False).render_enabled_plugins() == "[].\n"
    assert r.nodename.startswith("cfgtest-") and r.nodename.endswith("@localhost")
    assert r.nodename != RabbitMQProcess(tmp_path / "w", name="cfgtest").nodename  # random per instance
    env = r.build_env()
    w = str(r.workdir)
    assert env["HOME"] == w  # private Erlang cookie
    assert env["RABBITMQ_NODENAME"] == r.nodename
    assert env["RABBITMQ_NODE_PORT"] == "1001" and env["RABBITMQ_DIST_PORT"] == "1002"
    assert env["ERL_EPMD_PORT"] == "1003" and env["ERL_EPMD_ADDRESS"] == "127.0.0.1"
    # no VM of the node starts an epmd of its own (it would outlive the node, in no group of ours)
    assert env["ERL_FLAGS"] == "-start_epmd false"
    assert "{127,0,0,1}" in env["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"]
    for var in ("RABBITMQ_CONF_ENV_FILE", "RABBITMQ_CONFIG_FILE", "RABBITMQ_CONFIG_FILES", "RABBITMQ_ADVANCED_CONFIG_FILE",
                "RABBITMQ_ENABLED_PLUGINS_FILE", "RABBITMQ_MNESIA_BASE", "RABBITMQ_LOG_BASE", "RABBITMQ_LOGS"):
        assert env[var].startswith(w), var  # nothing under /etc/rabbitmq or /var/lib/rabbitmq
    with pytest.raises(ValueError):
        RabbitMQProcess(tmp_path / "w", name="bad@name")


# ---------------------------------------------------------------- real broker


def _stomp_connected(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
        data = b""
        while b"\x00" not in data:
            chunk = s.recv(4096)
            assert chunk, data
            data += chunk
        return data


def _mqtt_connack(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = b"\x00\x04MQTT\x04\x02\x00\x3c\x00\x04bc-t"
        s.sendall(bytes([0x10, len(body)]) + body)
        data = b""
        while len(data) < 4:
            chunk = s.recv(4 - len(data))
            assert chunk, data
            data += chunk
        return data


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_start_round_trip_stop(tmp_path):
    _require(stomp=True, mqtt=True)
    from proton import Message
    from proton.utils import BlockingConnection

    r = RabbitMQProcess(tmp_path / "rmq", name="launcher-test", stomp=True, mqtt=True)
    with r:
        pid, beam, epmd = r.pid, r.beam_pid, r.epmd_pid
        assert os.getpgid(pid) == pid  # own process group
        assert beam and psutil.Process(beam).name().startswith("beam")
        assert psutil.Process(epmd).name() == "epmd" and psutil.Process(epmd).ppid() == os.getpid()
        helpers = psutil.Process(pid).children(recursive=True)

        # every listening socket of the node is on loopback: AMQP, STOMP, MQTT, Erlang distribution
        ports = {a.port for a in _listening(beam)}
        assert {r.amqp_port, r.stomp_port, r.mqtt_port, r.dist_port} <= ports
        assert all(a.ip == "127.0.0.1" for a in _listening(beam)), _listening(beam)
        assert all(a.ip in ("127.0.0.1", "::1") and a.port == r.epmd_port for a in _listening(epmd))

        # private cookie under the work dir
        cookie = r.workdir / ".erlang.cookie"
        assert cookie.is_file() and (cookie.stat().st_mode & 0o077) == 0

        # AMQP 1.0 round trip (guest/guest over SASL PLAIN)
        conn = BlockingConnection(r.amqp_url, timeout=20, allowed_mechs="PLAIN")
        try:
            assert str(conn.conn.remote_properties.get("product")) == "RabbitMQ"
            rcv = conn.create_receiver("launcher-q", credit=10)
            snd = conn.create_sender("launcher-q")
            snd.send(Message(body=b"hello brokerconf"))
            msg = rcv.receive(timeout=20)
            assert bytes(msg.body) == b"hello brokerconf"
            rcv.accept()
        finally:
            conn.close()

        assert _stomp_connected(r.stomp_port).startswith(b"CONNECTED\n")
        assert _mqtt_connack(r.mqtt_port) == b"\x20\x02\x00\x00"

        assert r.rss_peak_bytes() > 20 * 1024 * 1024
        # RabbitMQ writes its log asynchronously: the broker already answers (above) before the
        # startup lines necessarily reach the file, so give them a moment.
        assert poll(lambda: "Server startup complete" in r.log_tail(400) or "started TCP listener" in r.log_tail(400),
                    timeout=15, interval=0.2), f"no startup line in the log:\n{r.log_tail(40)}"
    assert not r.running
    for p in [psutil.Process(pid) if psutil.pid_exists(pid) else None, *helpers]:
        assert p is None or not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, p
    assert not psutil.pid_exists(epmd), "our epmd must be stopped with the node"
    assert r.rss_peak_bytes() > 0  # remembered after exit
    r.stop()  # idempotent


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.timeout(200)
def test_amqp091_only_readiness_and_bad_config(tmp_path):
    _require(amqp10=False)
    r = RabbitMQProcess(tmp_path / "plain", amqp10=False)
    with r:
        with socket.create_connection(("127.0.0.1", r.amqp_port), timeout=10) as s:
            s.sendall(b"AMQP\x00\x00\x09\x01")
            ftype, chan = struct.unpack(">BH", s.recv(3))
            assert (ftype, chan) == (1, 0)  # connection.start
        epmd = r.epmd_pid
    assert not psutil.pid_exists(epmd)

    bad = RabbitMQProcess(tmp_path / "bad", extra_config="no_such_setting.at_all = 1")
    t0 = time.monotonic()
    with pytest.raises(RabbitMQStartError) as ei:
        bad.start(timeout=120)
    assert time.monotonic() - t0 < 90, "should fail when the node exits, not at the timeout"
    assert "no_such_setting" in str(ei.value)
    assert not bad.running and not psutil.pid_exists(bad.epmd_pid)


def _listeners_on(port: int) -> list[int]:
    """PIDs listening on loopback ``port`` (any process: a stray epmd would be in none of ours)."""
    return sorted({c.pid for c in psutil.net_connections(kind="inet")
                   if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid})


@pytest.mark.real_broker
@pytest.mark.slow
@pytest.mark.timeout(200)
def test_without_its_epmd_the_node_fails_and_starts_no_epmd_of_its_own(tmp_path, monkeypatch):
    """ERL_FLAGS=-start_epmd false: were our private epmd gone, the node must not start an
    `epmd -daemon` itself (it would outlive the node outside any process group we own)."""
    _require(amqp10=False)
    monkeypatch.setattr(RabbitMQProcess, "_start_epmd", lambda self, deadline: None)  # no epmd at all
    r = RabbitMQProcess(tmp_path / "noepmd", amqp10=False)
    try:
        with pytest.raises(RabbitMQStartError):
            r.start(timeout=90)
        assert not r.running
        stray = _listeners_on(r.epmd_port)
        assert not stray, f"an epmd was started on the node's epmd port {r.epmd_port}: pids {stray}"
    finally:
        r.stop()
        for pid in _listeners_on(r.epmd_port):  # only what listens on this test's own free port
            psutil.Process(pid).kill()
