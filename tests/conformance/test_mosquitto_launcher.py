"""Quick end-to-end check of the mosquitto launcher (conformance.targets.mosquitto.process)."""

from __future__ import annotations

import os
import socket
import struct
import time

import psutil
import pytest

from conformance.requirements import skip_or_fail
import conformance.targets.mosquitto.process as mosq_mod
from conformance.targets.mosquitto.process import (
    MosquittoNotInstalled,
    MosquittoProcess,
    MosquittoStartError,
    mosquitto_available,
)


def _require():
    ok, reason = mosquitto_available()
    if not ok:
        skip_or_fail("mosquitto", reason)  # the only reason to skip: the Debian package is not installed


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, f"connection closed; got {data!r}"
        data += chunk
    return data


def _read_packet(s: socket.socket) -> tuple[int, bytes]:
    first = _recv_exact(s, 1)[0]
    length, shift = 0, 0
    while True:
        b = _recv_exact(s, 1)[0]
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return first, _recv_exact(s, length)


def _connect(port: int, client_id: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + struct.pack(">H", len(client_id)) + client_id
    s.sendall(bytes([0x10, len(body)]) + body)
    first, body = _read_packet(s)
    assert first == 0x20 and body == b"\x00\x00", (first, body)
    return s


# ---------------------------------------------------------------- no broker needed


def test_not_installed_is_reported_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(mosq_mod, "find_mosquitto", lambda: None)
    ok, reason = mosquitto_available()
    assert not ok and "apt-get install mosquitto" in reason
    with pytest.raises(MosquittoNotInstalled, match="apt-get install mosquitto"):
        MosquittoProcess(tmp_path / "w").start(timeout=5)


def test_rendered_config(tmp_path):
    p = MosquittoProcess(tmp_path / "w", max_inflight_messages=100, max_queued_messages=0,
                         extra_config="max_packet_size 1000000")
    p.mqtt_port = 4321
    conf = p.render_config()
    lines = conf.splitlines()
    assert "listener 4321 127.0.0.1" == lines[-1]
    for want in ("allow_anonymous true", "persistence false", f"log_dest file {p.log_path}",
                 "max_inflight_messages 100", "max_queued_messages 0", "max_packet_size 1000000"):
        assert want in lines, want
    assert "pid_file" not in conf and "include_dir" not in conf
    if os.geteuid() == 0:
        assert "user root" in lines  # would otherwise drop to `mosquitto` and lose the log file
    assert "max_inflight_messages" not in MosquittoProcess(tmp_path / "x").render_config()
    with pytest.raises(ValueError):
        MosquittoProcess(tmp_path / "w", name="bad name")


# ---------------------------------------------------------------- real broker


@pytest.mark.real_broker
@pytest.mark.slow
def test_start_round_trip_stop_restart(tmp_path):
    _require()
    m = MosquittoProcess(tmp_path / "mosq", name="launcher-test")
    with m:
        pid, port = m.pid, m.mqtt_port
        assert pid > 0 and psutil.pid_exists(pid)
        assert os.getpgid(pid) == pid  # its own process group
        assert psutil.Process(pid).name() == "mosquitto"  # the PID we hold is the broker itself
        listening = [c.laddr for c in psutil.Process(pid).net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(a.ip == "127.0.0.1" and a.port == port for a in listening), listening

        sub = _connect(port, b"launcher-sub")
        sub.sendall(b"\x82\x0b\x00\x01\x00\x06test/q\x01")  # SUBSCRIBE test/q QoS 1
        first, body = _read_packet(sub)
        assert first == 0x90 and body == b"\x00\x01\x01"
        pub = _connect(port, b"launcher-pub")
        payload = b"hello brokerconf"
        pkt_body = b"\x00\x06test/q\x00\x07" + payload
        pub.sendall(bytes([0x32, len(pkt_body)]) + pkt_body)  # PUBLISH QoS 1, id 7
        first, body = _read_packet(pub)
        assert first == 0x40 and body == b"\x00\x07"  # PUBACK
        first, body = _read_packet(sub)
        assert first & 0xF6 == 0x32, hex(first)
        assert body[:8] == b"\x00\x06test/q" and body[10:] == payload
        sub.sendall(b"\x40\x02" + body[8:10])
        for s in (pub, sub):
            s.sendall(b"\xe0\x00")
            s.close()

        assert m.rss_peak_bytes() > 1024 * 1024
        assert "running" in m.log_tail(200)
        assert "launcher-pub" in m.log_tail(200)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not m.running
    assert m.rss_peak_bytes() > 0  # remembered after exit
    assert "terminating" in m.log_tail(5)
    m.stop()  # idempotent

    with m:  # restart keeps the port
        assert m.mqtt_port == port and m.pid != pid
        _connect(port, b"again").close()


@pytest.mark.real_broker
@pytest.mark.slow
def test_bad_config_fails_fast_with_log(tmp_path):
    _require()
    m = MosquittoProcess(tmp_path / "mosq", extra_config="no_such_option 1")
    t0 = time.monotonic()
    with pytest.raises(MosquittoStartError) as ei:
        m.start(timeout=20)
    assert time.monotonic() - t0 < 10
    assert "no_such_option" in str(ei.value) or "Unknown configuration" in str(ei.value)
    assert not m.running
