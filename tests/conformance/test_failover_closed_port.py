"""A port that accepts a TCP connection and closes it at once, as docker-proxy does for a published
port with nothing listening behind it (a shared-store slave keeps its connectors closed until it
takes the lock: A-MQ fault-tolerant messaging guide, 3.1).

Seen in the container run of chaos/experiments/activemq-shared-store-failover.toml: after the
master was killed, a consumer's failover pass reached the slave's published port; stomp.py's
receiver thread read EOF before CONNECT was written, so `connect()` raised stomp.py's
``NotConnectedException``. The STOMP adapter passed it on untranslated, it was no connection error
to the failover transport, and it ended the monitor thread: nobody reconnected, and the consumer saw
only empty receives until the run ended (verdict "unknown", never_recovered 1).

Which comes first, the EOF or the CONNECT write, is a race; `eof_first` forces the ordering the
container run hit, so these tests fail without the fix every time, not once in a few runs."""

from __future__ import annotations

import socket
import threading

import pytest
import stomp.transport

from conformance.clients import ConnectFailed, connect
from conformance.clients.base import Inbox
from conformance.clients.failover import FailoverClient, FailoverExhausted, connect_failover
from machinery.waiting import poll
from tests.reference_broker.conftest import broker_factory  # noqa: F401 - fixture used by name


class AcceptAndClose:
    """Listens on 127.0.0.1 and closes every accepted connection without reading from it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="accept-and-close", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def closer():
    server = AcceptAndClose()
    yield server
    server.close()


@pytest.fixture
def eof_first(monkeypatch):
    """stomp.py's transport start returns only once its receiver thread has dropped a socket the
    peer closed at once (the ordering of the failed run); sockets that stay open are unaffected."""
    original = stomp.transport.BaseTransport.start

    def start(self):
        original(self)
        poll(lambda: self.socket is None, timeout=0.5, interval=0.005)

    monkeypatch.setattr(stomp.transport.BaseTransport, "start", start)


@pytest.mark.parametrize("ordering", ["eof_first", "as_it_comes"])
def test_stomp_connect_to_a_port_that_closes_at_once_is_a_failed_connect(closer, ordering, request):
    if ordering == "eof_first":
        request.getfixturevalue("eof_first")
    with pytest.raises(ConnectFailed) as failed:
        connect("127.0.0.1", closer.port, "stomp", timeout=2.0)
    assert closer.accepted == 1
    assert f"127.0.0.1:{closer.port}" in str(failed.value)


def test_failover_subscriber_skips_a_port_that_closes_at_once(broker_factory, closer, eof_first):  # noqa: F811
    """The killed master first, then the port that closes at once (the slave's), then a live broker:
    the subscriber blocked in receive must end up on the live broker and get its message."""
    master, survivor = broker_factory(), broker_factory()
    uris = [f"stomp://127.0.0.1:{port}" for port in (master.port, closer.port, survivor.port)]
    client = connect_failover(f"failover:({','.join(uris)})?randomize=false&initialReconnectDelay=10"
                              "&maxReconnectDelay=100", "stomp", timeout=2.0)
    producer = None
    try:
        sub = client.subscribe("queue://closed_port", ack="client-individual")
        accepted_before = closer.accepted
        master.stop()
        producer = connect(*survivor.address, "stomp")
        producer.send("queue://closed_port", b"after the kill")
        message = sub.receive(10.0)
        assert message is not None and message.body == b"after the kill", \
            f"the subscriber never reached the live broker; transport: {client.events}\n{client.exchange}"
        sub.ack(message)
        assert client.uri.port == survivor.port
        assert closer.accepted > accepted_before  # the closing port really was tried on the way
        assert "accepted the TCP connection but closed it before CONNECT" in str(client.exchange)
    finally:
        if producer is not None:
            producer.close()
        client.close()


class _Inner:
    """An inner client whose connection can be dropped; enough for a subscriber."""

    def __init__(self) -> None:
        self.connected = True
        self.inbox = Inbox()

    def subscribe(self, destination, *, ack="auto", **options):
        return self

    def receive(self, timeout=5.0):
        return self.inbox.get(timeout)

    def drop(self) -> None:
        self.connected = False
        self.inbox.connection_lost("broker killed")

    def close(self) -> None:
        self.connected = False


def test_a_reconnect_that_raises_an_unknown_error_fails_operations_instead_of_hanging():
    """Whatever ends the monitor thread, a subscriber must not wait on empty receives for ever: its
    operations raise, naming the cause, so the caller can replace the client."""
    first = _Inner()

    def connect_inner(host, port, protocol, **options):
        if port == 1 and first.connected:
            return first
        raise RuntimeError("an exception no adapter should let out")

    client = FailoverClient("failover:(stomp://h:1,stomp://h:2)?randomize=false&initialReconnectDelay=1",
                            "stomp", connect=connect_inner, monitor_interval=0.005)
    try:
        sub = client.subscribe("queue://q")
        first.drop()
        with pytest.raises(FailoverExhausted, match=r"monitor stopped on an unexpected RuntimeError\("):
            # bounded: each empty receive takes 0.2 s; before the monitor fails they return None
            for _ in range(50):
                sub.receive(0.2)
        assert [e.kind for e in client.events][-1] == "failed"
    finally:
        client.close()
