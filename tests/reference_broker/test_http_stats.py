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


# --------------------------------------------------------------------------- not public (issue 20)


def _get_as(port: int, path: str, auth: tuple[str, str] | None = None) -> tuple[int, dict, dict]:
    import base64

    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_statistics_need_a_configured_users_credentials(broker_factory):
    """ENG-HTTP-2: with users configured, HTTP Basic of one of them; /health stays open."""
    running = broker_factory(http="127.0.0.1:0", security={
        "users": [{"name": "ops", "password": "pw", "groups": ["admins"]}]})
    port = running.server.http_address[1]
    status, headers, _ = _get_as(port, "/stats")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic "), \
        "ENG-HTTP-2: the statistics answered without credentials"
    assert _get_as(port, "/stats", ("ops", "wrong"))[0] == 401, "ENG-HTTP-2: a wrong password was accepted"
    assert _get_as(port, "/queues", ("nobody", "pw"))[0] == 401
    status, _, body = _get_as(port, "/stats", ("ops", "pw"))
    assert status == 200 and body["broker"] == "reference"
    assert _get_as(port, "/health")[0] == 200


def test_statistics_never_show_a_temporary_queue_name_or_connection_id(broker_factory, raw_factory):
    """ENG-HTTP-3 (issue 20, item 3: the name of the temporary queue to steal came from here)."""
    running = broker_factory(http="127.0.0.1:0")
    owner = raw_factory(running.address)
    owner.connect(**{"client-id": "owner-app"})
    owner.send_frame("SUBSCRIBE", [("id", "r"), ("destination", "/temp-queue/replies"), ("receipt", "1")])
    owner.expect("RECEIPT")
    owner.send_frame("SUBSCRIBE", [("id", "d"), ("destination", "/topic/news"), ("activemq.subscriptionName", "keep"),
                                   ("receipt", "2")])
    owner.expect("RECEIPT")
    temp_name, connection_id = running.call(lambda: (
        next(iter(running.server.broker.temporary.owners)),
        next(iter(running.server.broker.connections))))
    status, _, body = _get_as(running.server.http_address[1], "/stats")
    text = json.dumps(body)
    assert status == 200
    temp_id = temp_name.partition("://")[2]
    assert temp_id not in text, f"ENG-HTTP-3: the temporary queue name {temp_id} is in the statistics"
    assert connection_id not in text, "ENG-HTTP-3: a connection id (the stem of temporary names) is shown"
    assert "owner-app" not in text, "ENG-HTTP-3: a durable subscription's client id is shown"
    assert [q for q in body["queues"] if q.get("temporary")], "the temporary queue should still be listed, masked"


@pytest.mark.parametrize("listener", ["stomp", "mqtt", "amqp", "http"])
def test_non_loopback_listener_without_users_is_refused_naming_it(listener):
    """ENG-SEC-1 (Mosquitto 2.0 style): no users means loopback-only unless allow_anonymous = true
    (and the statistics never go public off loopback)."""
    from reference_broker.config import ConfigError, build_config

    with pytest.raises(ConfigError, match=f"listener '{listener}' = '0.0.0.0:0' is not a loopback address"):
        build_config({listener: "0.0.0.0:0"})
    with_users = {"users": [{"name": "u", "password": "p"}]}
    build_config({listener: "0.0.0.0:0", "security": with_users})
    build_config({listener: "127.0.0.1:0"})
    build_config({listener: "[::1]:0"})
    if listener != "http":
        build_config({listener: "0.0.0.0:0", "security": {"allow_anonymous": True}})
    else:
        with pytest.raises(ConfigError, match="listener 'http'"):
            build_config({listener: "0.0.0.0:0", "security": {"allow_anonymous": True}})


def test_non_loopback_listener_without_users_is_a_usage_error_at_start():
    """ENG-SEC-1 from the command line. 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this
    machine: a broker that wrongly accepted the option fails to bind instead of listening."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "reference_broker", "--stomp", "192.0.2.1:0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "listener 'stomp'" in proc.stderr and "allow_anonymous" in proc.stderr, \
        (proc.returncode, proc.stderr[-2000:])
