"""The clients of `brokerconf bench soak` (soak.py): well-behaved STOMP / MQTT / AMQP producers
and consumers built on the project's clients (conformance/clients), and the misbehaving ones
issue 20 asks a broker to survive, written on raw sockets because they break the rules on
purpose:

* a consumer that subscribes and never reads its socket (STOMP, and MQTT QoS 1),
* a client opening and closing connections as fast as it can be served (STOMP and MQTT),
* a client sending garbage to every listener,
* a transaction that is begun, filled to the broker's limit and never committed (it starts over
  when refused),
* a publisher to ever new topic names (what the broker keeps per name must stay bounded).

Each worker is a thread that runs until `stop` is set, counts what it did in `Counters` and, when
the broker drops it, counts an error and reconnects: a soak wants the load to go on.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from conformance.bench.mqtt_load import encode_connect, encode_subscribe
from conformance.clients.amqp_client import AmqpClient
from conformance.clients.base import ClientError
from conformance.clients.mqtt_client import MqttClient
from conformance.clients.stomp_client import StompClient
from machinery.waiting import Deadline

BODY = b"s" * 256
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    stomp: int
    mqtt: int
    amqp: int


class Counters:
    """Event counts shared by the workers (sent, received, churned, garbage, errors...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class _Pacer:
    """At most `rate` events per second, without bursts after a stall."""

    def __init__(self, rate: float, stop: threading.Event) -> None:
        self.period = 1.0 / rate
        self.stop = stop
        self.next = time.monotonic()

    def wait(self) -> bool:
        """Sleep until the next event is due; False once stopped."""
        self.next = max(self.next + self.period, time.monotonic() - self.period)
        delay = self.next - time.monotonic()
        if delay > 0:
            return not self.stop.wait(delay)
        return not self.stop.is_set()


def _retrying(name: str, counters: Counters, stop: threading.Event, body: Callable[[], None]) -> None:
    """Run `body` until stopped; a dropped connection or a refusal is counted and retried."""
    while not stop.is_set():
        try:
            body()
        except (ClientError, OSError, TimeoutError) as exc:
            counters.add(f"{name}.errors")
            counters.add(f"{name}.last_error:{type(exc).__name__}")
            stop.wait(0.5)


# --------------------------------------------------------------------------- well-behaved


def stomp_producer(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:
    """Non-persistent sends to a queue and to a spread of topics, one receipt each."""

    def body() -> None:
        client = StompClient(HOST, ports.stomp)
        try:
            pacer = _Pacer(rate, stop)
            n = 0
            while pacer.wait():
                n += 1
                client.send("queue://SOAK.Q", BODY, persistent=False)
                client.send(f"topic://SOAK.T.{n % 100}", BODY, persistent=False)
                counters.add("stomp.sent", 2)
        finally:
            client.close()

    _retrying("stomp.producer", counters, stop, body)


def stomp_consumer(ports: Ports, counters: Counters, stop: threading.Event) -> None:
    """Reads the queue and every SOAK.T topic."""

    def body() -> None:
        client = StompClient(HOST, ports.stomp)
        try:
            subs = [client.subscribe("queue://SOAK.Q"), client.subscribe("topic://SOAK.T.>")]
            while not stop.is_set():
                got = sum(len(sub.receive_n(1000, timeout=0.1)) for sub in subs)
                counters.add("stomp.received", got)
                if not client.connected:
                    raise ClientError("connection lost")
        finally:
            client.close()

    _retrying("stomp.consumer", counters, stop, body)


def mqtt_producer(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:
    """QoS 1 publishes to twenty topics."""

    def body() -> None:
        client = MqttClient(HOST, ports.mqtt, qos=1)
        try:
            pacer = _Pacer(rate, stop)
            n = 0
            while pacer.wait():
                n += 1
                client.send(f"topic://soak.m.{n % 20}", BODY, qos=1)
                counters.add("mqtt.sent")
        finally:
            client.close()

    _retrying("mqtt.producer", counters, stop, body)


def mqtt_consumer(ports: Ports, counters: Counters, stop: threading.Event) -> None:

    def body() -> None:
        client = MqttClient(HOST, ports.mqtt, qos=1)
        try:
            sub = client.subscribe("topic://soak.m.>", qos=1)
            while not stop.is_set():
                counters.add("mqtt.received", len(sub.receive_n(1000, timeout=0.2)))
                if not client.connected:
                    raise ClientError("connection lost")
        finally:
            client.close()

    _retrying("mqtt.consumer", counters, stop, body)


def amqp_producer(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:

    def body() -> None:
        client = AmqpClient(HOST, ports.amqp)
        try:
            pacer = _Pacer(rate, stop)
            while pacer.wait():
                client.send("queue://SOAK.A", BODY, persistent=False)
                counters.add("amqp.sent")
        finally:
            client.close()

    _retrying("amqp.producer", counters, stop, body)


def amqp_consumer(ports: Ports, counters: Counters, stop: threading.Event) -> None:

    def body() -> None:
        client = AmqpClient(HOST, ports.amqp)
        try:
            sub = client.subscribe("queue://SOAK.A", prefetch=100)
            while not stop.is_set():
                counters.add("amqp.received", len(sub.receive_n(1000, timeout=0.2)))
        finally:
            client.close()

    _retrying("amqp.consumer", counters, stop, body)


def fresh_names_publisher(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:
    """QoS 0 publishes, each to a topic name never used before (MQTT soak/fresh/<n>)."""
    numbers = itertools.count(1)

    def body() -> None:
        client = MqttClient(HOST, ports.mqtt, qos=0)
        try:
            pacer = _Pacer(rate, stop)
            while pacer.wait():
                client.send(f"topic://soak.fresh.{next(numbers)}", BODY, persistent=False)
                counters.add("fresh.sent")
        finally:
            client.close()

    _retrying("fresh.publisher", counters, stop, body)


# --------------------------------------------------------------------------- misbehaving


def _stomp_frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = "".join(f"{k}:{v}\n" for k, v in headers.items())
    return f"{command}\n{head}\n".encode() + body + b"\0"


def _read_some(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096)
    except (socket.timeout, OSError):
        return b""


def never_reading_consumers(ports: Ports, counters: Counters, stop: threading.Event) -> None:
    """A STOMP subscriber to every SOAK.T topic and an MQTT QoS 1 subscriber to soak/m/#, on
    sockets nobody reads (small receive buffers, so the broker meets back-pressure soon)."""
    socks: list[socket.socket] = []
    try:
        while not stop.is_set():
            try:
                if not socks:
                    stomp_sock = socket.socket()
                    stomp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    stomp_sock.connect((HOST, ports.stomp))
                    stomp_sock.sendall(_stomp_frame("CONNECT", {"accept-version": "1.2", "host": "soak"}))
                    stomp_sock.sendall(_stomp_frame("SUBSCRIBE", {"id": "stuck", "destination": "/topic/SOAK.T.>",
                                                                  "ack": "client"}))
                    mqtt_sock = socket.socket()
                    mqtt_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    mqtt_sock.connect((HOST, ports.mqtt))
                    mqtt_sock.sendall(encode_connect(f"soak-stuck-{os.getpid()}", keepalive=0))
                    mqtt_sock.sendall(encode_subscribe(1, "soak/m/#", 1))
                    socks = [stomp_sock, mqtt_sock]
                    counters.add("stuck.connected", 2)
                stop.wait(1.0)
            except OSError:
                counters.add("stuck.errors")
                for sock in socks:
                    sock.close()
                socks = []
                stop.wait(0.5)
    finally:
        for sock in socks:
            sock.close()


def connection_churn(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:
    """Connect, log in, and leave at once, alternating STOMP (with DISCONNECT) and MQTT
    (dropping the socket without DISCONNECT, which fires no will here but ends a session)."""
    pacer = _Pacer(rate, stop)
    n = 0
    while pacer.wait():
        n += 1
        try:
            with socket.create_connection((HOST, ports.stomp if n % 2 else ports.mqtt), timeout=5) as sock:
                if n % 2:
                    sock.sendall(_stomp_frame("CONNECT", {"accept-version": "1.2", "host": "soak"}))
                    _read_some(sock, 5)
                    sock.sendall(_stomp_frame("DISCONNECT", {}))
                else:
                    sock.sendall(encode_connect(f"soak-churn-{n}", keepalive=0))
                    _read_some(sock, 5)
            counters.add("churn.connections")
        except OSError:
            counters.add("churn.errors")


def garbage_sender(ports: Ports, counters: Counters, stop: threading.Event, rate: float) -> None:
    """Random bytes to each listener in turn, then waits for the broker to hang up."""
    pacer = _Pacer(rate, stop)
    targets = [ports.stomp, ports.mqtt, ports.amqp]
    n = 0
    while pacer.wait():
        port = targets[n % len(targets)]
        n += 1
        try:
            with socket.create_connection((HOST, port), timeout=5) as sock:
                sock.sendall(os.urandom(64 + n % 1024))
                deadline = Deadline(2)
                # a reader: each round takes what the broker sent, until it hangs up
                while not deadline.expired() and _read_some(sock, 0.5):
                    pass  # drain the ERROR frame / close until EOF
            counters.add("garbage.sent")
        except OSError:
            counters.add("garbage.errors")


def never_committed_transaction(ports: Ports, counters: Counters, stop: threading.Event, _rate: float) -> None:
    """BEGIN, then 1 KB sends in that transaction as fast as the broker takes them; never COMMIT.
    When the broker refuses (its per-connection transaction limit: 10k messages by default) or
    drops the connection, wait a second and start over on a new connection. At a trickle the
    buffer would still be filling after the warm-up (10 KB/s takes over 16 minutes to reach the
    limit) and the soak would measure the fill, not the bound; filling at once, the limit is
    reached every cycle and what the trend shows is whether the broker keeps to it."""

    def body() -> None:
        client = StompClient(HOST, ports.stomp)
        try:
            tx = client.begin()
            counters.add("tx.begun")
            while not stop.is_set():
                client.send("queue://SOAK.TX", b"t" * 1024, persistent=False, transaction=tx)
                counters.add("tx.sent")
        finally:
            client.close()
            stop.wait(1.0)

    _retrying("tx", counters, stop, body)


#: the clients a soak may leave out (`--without`), by the name the option takes
OPTIONAL_WORKERS = {
    "fresh": fresh_names_publisher,
    "stuck": never_reading_consumers,
    "churn": connection_churn,
    "garbage": garbage_sender,
    "tx": never_committed_transaction,
}


def start_workers(ports: Ports, counters: Counters, stop: threading.Event, rate: float,
                  without: frozenset[str] = frozenset()) -> list[threading.Thread]:
    """Every worker but those named in `without` (OPTIONAL_WORKERS), as daemon threads: `rate`
    is each producer's messages per second."""
    misbehaving_rate = max(1.0, rate / 5)
    plan: list[tuple[Callable, tuple]] = [
        (stomp_consumer, ()), (mqtt_consumer, ()), (amqp_consumer, ()),
        (stomp_producer, (rate,)), (mqtt_producer, (rate,)), (amqp_producer, (rate,)),
        # twice the rate: the names fill the broker's bounded per-name memory (10k idle topics)
        # early in the run, so the trend after warm-up shows whether it stays bounded
        (fresh_names_publisher, (2 * rate,)),
        (never_reading_consumers, ()),
        (connection_churn, (misbehaving_rate,)),
        (garbage_sender, (misbehaving_rate,)),
        (never_committed_transaction, (misbehaving_rate,)),
    ]
    left_out = {OPTIONAL_WORKERS[name] for name in without}
    threads = []
    for worker, extra in plan:
        if worker in left_out:
            continue
        thread = threading.Thread(target=worker, args=(ports, counters, stop, *extra), name=f"soak-{worker.__name__}",
                                  daemon=True)
        thread.start()
        threads.append(thread)
    return threads
