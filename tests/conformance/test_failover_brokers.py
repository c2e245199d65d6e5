"""The failover transport between real reference-broker processes over STOMP.

Two brokers, each with a journal store so persistent messages survive a kill -9 (the same
config `conformance/targets/reference/target.py:ProcessReference` writes). The client uses
``randomize=false`` so it starts on the first broker (A-MQ FT Table 2.1, "randomize")."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conformance.clients import connect
from conformance.clients.failover import FailoverExhausted, InDoubt, connect_failover
from conformance.targets.reference.process import ReferenceBrokerProcess
from machinery.waiting import poll

pytestmark = pytest.mark.slow


def start_broker(tmp_path, name: str) -> ReferenceBrokerProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    config = workdir / "broker.json"
    config.write_text(json.dumps({"name": name, "store": {"kind": "journal", "sync": "always"}}))
    broker = ReferenceBrokerProcess(name=name, config_file=config, data_dir=workdir / "data", http=False)
    return broker.start()


@pytest.fixture
def brokers(tmp_path):
    started = []
    try:
        started.append(start_broker(tmp_path, "A"))
        started.append(start_broker(tmp_path, "B"))
        yield started
    finally:
        for broker in started:
            broker.stop()


def failover_uri(brokers, options: str = "") -> str:
    inner = ",".join(f"stomp://127.0.0.1:{b.stomp_port}" for b in brokers)
    return f"failover:({inner})?randomize=false&initialReconnectDelay=10&maxReconnectDelay=200{options}"


def wait_until_interrupted(events, timeout: float = 5.0) -> None:
    """Wait for the client to see its connection drop before sending. A SEND written in the
    instant before the kernel closes a killed broker's socket is genuinely in doubt (no receipt,
    and trackMessages=false: A-MQ FT Table 2.1); that race has its own test
    (test_send_in_flight_when_the_broker_dies_is_in_doubt_or_ok) and is not a failover failure."""
    assert poll(lambda: "interrupted" in [e.kind for e in events], timeout=timeout, interval=0.01), \
        f"the client never noticed the kill: {events}"


def test_kill_first_broker_client_moves_to_second_and_keeps_working(brokers):
    a, b = brokers
    events = []
    client = connect_failover(failover_uri(brokers), "stomp", listener=events.append, timeout=2.0)
    try:
        assert client.uri.port == a.stomp_port
        sub = client.subscribe("queue://fo.work", ack="client-individual")
        client.send("queue://fo.work", b"before")
        first = sub.receive(5)
        assert first is not None and first.body == b"before"
        sub.ack(first)

        a.kill()  # SIGKILL
        wait_until_interrupted(events)
        client.send("queue://fo.work", b"after")  # waits for the reconnect if needed, then goes to B
        assert client.uri.port == b.stomp_port
        second = sub.receive(5)  # the subscription was re-created on B
        assert second is not None and second.body == b"after"
        sub.ack(second)
        kinds = [e.kind for e in events]
        assert kinds == ["resumed", "interrupted", "resumed"], kinds
        downtime = events[2].time - events[1].time
        print(f"failover downtime (interrupted -> resumed): {downtime * 1000:.1f} ms")
    finally:
        client.close()


def test_persistent_message_survives_on_the_restarted_broker(brokers):
    a, b = brokers
    with connect("127.0.0.1", a.stomp_port, "stomp") as producer:
        producer.send("queue://fo.durable", b"kept", persistent=True)
    a.kill()
    a.start()  # same port, same journal
    client = connect_failover(failover_uri(brokers), "stomp", timeout=2.0)
    try:
        assert client.uri.port == a.stomp_port
        message = client.subscribe("queue://fo.durable").receive(5)
        assert message is not None and message.body == b"kept"
    finally:
        client.close()


def test_priority_backup_returns_to_the_restarted_first_broker(brokers):
    a, b = brokers
    events = []
    client = connect_failover(failover_uri(brokers, "&priorityBackup=true"), "stomp",
                              listener=events.append, timeout=2.0)
    try:
        sub = client.subscribe("queue://fo.prio")
        a.kill()
        wait_until_interrupted(events)
        client.send("queue://fo.prio", b"on-b")
        assert client.uri.port == b.stomp_port
        assert sub.receive(5).body == b"on-b"
        a.start()
        assert poll(lambda: client.uri.port, lambda port: port == a.stomp_port, timeout=10) == a.stomp_port, \
            f"never switched back to the priority broker: {events}"
        assert events[-1].kind == "switched"
        client.send("queue://fo.prio", b"on-a")
        assert sub.receive(5).body == b"on-a"
    finally:
        client.close()


def test_send_in_flight_when_the_broker_dies_is_in_doubt_or_ok(brokers):
    """A send racing a kill -9 either completes (ok) or raises InDoubt; never a plain failure."""
    a, b = brokers
    client = connect_failover(failover_uri(brokers), "stomp", timeout=2.0)
    outcomes = {"ok": 0, "info": 0}
    # Killed from another thread, so the kill can land between a SEND and its RECEIPT.
    killer = threading.Timer(0.05, a.kill)
    try:
        killer.start()
        for i in range(200):
            try:
                client.send("queue://fo.race", f"m{i}".encode(), {"seq": i})
                outcomes["ok"] += 1
            except InDoubt:
                outcomes["info"] += 1
        assert outcomes["ok"] + outcomes["info"] == 200
        assert client.uri.port == b.stomp_port
        print(f"outcomes around a kill -9: {outcomes}")
    finally:
        killer.join()
        client.close()


def test_startup_max_reconnect_attempts_fails_fast_with_no_broker_up(brokers):
    for broker in brokers:
        broker.stop()
    started = time.monotonic()
    with pytest.raises(FailoverExhausted, match="startupMaxReconnectAttempts=2"):
        connect_failover(failover_uri(brokers, "&startupMaxReconnectAttempts=2"), "stomp", timeout=1.0)
    print(f"gave up after {time.monotonic() - started:.3f} s")
