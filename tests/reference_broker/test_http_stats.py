"""The --http listener: read-only JSON with the counters the documents say operators watch."""

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from conformance.targets.reference.process import ReferenceBrokerProcess


def _get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _stomp(port: int, frames: list[bytes], wait_for: bytes, timeout: float = 5.0) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0")
    for frame in frames:
        sock.sendall(frame)
    data = b""
    deadline = time.monotonic() + timeout
    while wait_for not in data and time.monotonic() < deadline:
        data += sock.recv(65536)
    return sock, data


@pytest.fixture()
def broker(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text(
        '[[policy_entries]]\ntopic = "PRICES.>"\n'
        'pending_message_limit_strategy = { type = "constant", limit = 3 }\n'
    )
    with ReferenceBrokerProcess(config_file=config) as proc:
        yield proc


def test_slow_consumer_counters_exposed(broker):
    """SLOW-STATS-1 ("Slow Consumer Handling", monitoring): `matched` and `discarded` per
    subscription are visible to operators."""
    # A client-ack subscriber with prefetch 1 that never acks: after 1 in flight, 3 pending,
    # the rest of 10 messages are discarded.
    sub, _ = _stomp(broker.stomp_port, [
        b"SUBSCRIBE\nid:slow\ndestination:/topic/PRICES.IBM\nack:client\nactivemq.prefetchSize:1\nreceipt:s\n\n\0",
    ], b"RECEIPT")
    prod, _ = _stomp(broker.stomp_port, [
        b"SEND\ndestination:/topic/PRICES.IBM\n\nprice\0" * 10 + b"SEND\ndestination:/queue/Q\nreceipt:r\n\nq\0",
    ], b"RECEIPT")
    status, body = _get(broker.http_port, "/subscriptions")
    assert status == 200
    (subscription,) = [s for s in body["subscriptions"] if s.get("consumer") == "slow"]
    assert subscription["in_flight"] == 1
    assert subscription["matched"] == 3, "SLOW-STATS-1: matched = messages waiting beyond the prefetch"
    assert subscription["discarded"] == 6, "SLOW-STATS-1: discarded = messages dropped for slowness"
    status, queues = _get(broker.http_port, "/queues")
    (queue,) = [q for q in queues["queues"] if q["name"] == "queue://Q"]
    assert (queue["enqueued"], queue["pending"], queue["dispatched"]) == (1, 1, 0)
    sub.close()
    prod.close()


def test_http_is_read_only_and_explains_404(broker):
    status, body = _get(broker.http_port, "/nope")
    assert status == 404 and "/stats" in body["resources"]
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/stats", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 405
    status, health = _get(broker.http_port, "/health")
    assert status == 200 and health["status"] == "ok"
