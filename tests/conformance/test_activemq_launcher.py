"""Quick end-to-end check of the ActiveMQ Classic launcher (conformance.targets.activemq)."""

from __future__ import annotations

import os
import socket

import psutil
import pytest

from conformance.targets.activemq import ActiveMQProcess, activemq_available, activemq_mqtt_available

pytestmark = [pytest.mark.real_broker, pytest.mark.slow]


def _require(check=activemq_available):
    ok, reason = check()
    if not ok:
        pytest.skip(reason)  # the only reason to skip: the Debian package is not installed


def _read_frame(sock: socket.socket, buf: bytearray) -> bytes:
    while True:
        while buf[:1] in (b"\n", b"\r"):
            del buf[:1]
        i = buf.find(b"\x00")
        if i >= 0:
            frame = bytes(buf[:i])
            del buf[: i + 1]
            return frame
        chunk = sock.recv(65536)
        assert chunk, f"broker closed the connection; partial data {bytes(buf)!r}"
        buf += chunk


def _stomp(port: int) -> tuple[socket.socket, bytearray]:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\nheart-beat:0,0\n\n\x00")
    buf = bytearray()
    frame = _read_frame(s, buf)
    assert frame.startswith(b"CONNECTED\n"), frame
    return s, buf


def test_start_send_receive_stop(tmp_path):
    _require()
    amq = ActiveMQProcess(tmp_path / "amq", name="launcher-test")
    with amq:
        pid = amq.pid
        assert pid > 0 and psutil.pid_exists(pid)
        assert os.getpgid(pid) == pid  # its own process group
        assert {amq.stomp_port, amq.openwire_port} and amq.mqtt_port is None
        xml = amq.config_path.read_text()
        assert "xsi:schemaLocation" in xml and 'persistent="false"' in xml

        consumer, cbuf = _stomp(amq.stomp_port)
        consumer.sendall(b"SUBSCRIBE\nid:1\ndestination:/queue/launcher\nack:auto\nreceipt:r1\n\n\x00")
        assert _read_frame(consumer, cbuf).startswith(b"RECEIPT\n")

        producer, _ = _stomp(amq.stomp_port)
        producer.sendall(b"SEND\ndestination:/queue/launcher\ncontent-type:text/plain\n\nhello brokerconf\x00")
        msg = _read_frame(consumer, cbuf)
        assert msg.startswith(b"MESSAGE\n"), msg
        assert msg.split(b"\n\n", 1)[1] == b"hello brokerconf"
        assert b"destination:/queue/launcher" in msg
        producer.close()
        consumer.close()

        assert amq.rss_peak_bytes() > 10 * 1024 * 1024
        assert "started" in amq.log_tail(200)
    assert not psutil.pid_exists(pid), f"ActiveMQ pid {pid} still exists after stop()"
    assert amq.rss_peak_bytes() > 0  # remembered after exit
    amq.stop()  # idempotent


def test_mqtt_connector_answers_connack(tmp_path):
    _require(activemq_mqtt_available)
    with ActiveMQProcess(tmp_path / "amq", stomp=True, openwire=False, mqtt=True) as amq:
        assert amq.mqtt_port
        with socket.create_connection(("127.0.0.1", amq.mqtt_port), timeout=10) as s:
            # MQTT 3.1.1 CONNECT, clean session, keepalive 60, empty client id
            s.sendall(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 60, 0, 0]))
            assert s.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
