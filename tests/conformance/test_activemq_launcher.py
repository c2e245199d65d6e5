"""Quick end-to-end check of the ActiveMQ Classic launcher (conformance.targets.activemq.process)."""

from __future__ import annotations

import os
import socket

import time

import psutil
import pytest

from conformance.requirements import skip_or_fail
import conformance.targets.activemq.process as amq_mod
from conformance.targets.activemq.process import (
    ActiveMQNotInstalled,
    ActiveMQProcess,
    ActiveMQStartError,
    activemq_available,
    activemq_mqtt_available,
)



def _require(check=activemq_available):
    ok, reason = check()
    if not ok:
        skip_or_fail("activemq", reason)  # the only reason to skip: the Debian packages are not installed


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


# ---------------------------------------------------------------- no JVM needed


def test_not_installed_is_reported_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setattr(amq_mod, "ACTIVEMQ_HOME", tmp_path / "no-activemq-here")
    ok, reason = activemq_available()
    assert not ok
    assert "activemq.jar" in reason and "apt-get install activemq" in reason
    with pytest.raises(ActiveMQNotInstalled, match="apt-get install activemq"):
        ActiveMQProcess(tmp_path / "w").start(timeout=5)


def test_missing_mqtt_jars_name_their_package(tmp_path, monkeypatch):
    monkeypatch.setattr(amq_mod, "JAVA_SHARE", tmp_path / "empty")
    ok, reason = activemq_mqtt_available()
    assert not ok and "libmqtt-client-java" in reason


def test_rendered_config(tmp_path):
    p = ActiveMQProcess(tmp_path / "w", name="cfg-test", mqtt=True, memory_limit_mb=64,
                        policy_entries_xml='<policyEntry queue=">" producerFlowControl="false"/>')
    p.stomp_port, p.openwire_port, p.mqtt_port = 1111, 2222, 3333
    xml = p.render_config()
    assert 'xsi:schemaLocation="http://www.springframework.org/schema/beans' in xml
    assert "stomp://127.0.0.1:1111?transport.closeAsync=false" in xml
    assert 'uri="tcp://127.0.0.1:2222"' in xml and 'uri="mqtt://127.0.0.1:3333"' in xml
    assert 'persistent="false"' in xml and 'useJmx="false"' in xml and 'schedulerSupport="false"' in xml
    assert '<memoryUsage limit="64 mb"/>' in xml
    assert '<policyEntry queue=">" producerFlowControl="false"/>' in xml
    assert "kahaDB" not in xml
    with pytest.raises(ValueError):
        ActiveMQProcess(tmp_path / "w", stomp=False, openwire=False, mqtt=False)


# ---------------------------------------------------------------- real broker


@pytest.mark.real_broker
@pytest.mark.slow
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


@pytest.mark.real_broker
@pytest.mark.slow
def test_mqtt_connector_answers_connack(tmp_path):
    _require(activemq_mqtt_available)
    with ActiveMQProcess(tmp_path / "amq", stomp=True, openwire=False, mqtt=True) as amq:
        assert amq.mqtt_port
        with socket.create_connection(("127.0.0.1", amq.mqtt_port), timeout=10) as s:
            # MQTT 3.1.1 CONNECT, clean session, keepalive 60, empty client id
            s.sendall(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 60, 0, 0]))
            assert s.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted


@pytest.mark.real_broker
@pytest.mark.slow
def test_bad_config_fails_fast_with_log(tmp_path):
    _require()
    amq = ActiveMQProcess(tmp_path / "amq", policy_entries_xml='<policyEntry queue=">" noSuchAttribute="1"/>')
    t0 = time.monotonic()
    with pytest.raises(ActiveMQStartError) as ei:
        amq.start(timeout=60)
    assert time.monotonic() - t0 < 45, "should fail as soon as the JVM exits, not at the timeout"
    assert "noSuchAttribute" in str(ei.value)
    assert not amq.running


@pytest.mark.real_broker
@pytest.mark.slow
def test_persistent_restart_keeps_ports_and_messages(tmp_path):
    _require()
    amq = ActiveMQProcess(tmp_path / "amq", persistent=True, openwire=False)
    with amq:
        first_pid, port = amq.pid, amq.stomp_port
        s, buf = _stomp(port)
        s.sendall(b"SEND\ndestination:/queue/durable\npersistent:true\nreceipt:r1\n\nsurvivor\x00")
        assert _read_frame(s, buf).startswith(b"RECEIPT\n")
        s.close()
    assert not psutil.pid_exists(first_pid)
    with amq:
        assert amq.stomp_port == port and amq.pid != first_pid
        s, buf = _stomp(port)
        s.sendall(b"SUBSCRIBE\nid:1\ndestination:/queue/durable\nack:auto\n\n\x00")
        msg = _read_frame(s, buf)
        assert msg.startswith(b"MESSAGE\n") and msg.split(b"\n\n", 1)[1] == b"survivor"
        s.close()
