"""Fixtures for the AMQP 1.0 end-to-end tests (imported by the test modules that use them).

* `amqp_broker_factory(**config)` starts an in-process broker (conftest's `broker_factory`) with
  an AMQP listener on 127.0.0.1:0 and returns an `AmqpBroker`: the `RunningBroker` plus its
  AMQP address and `url()`.
* `amqp_connect(broker, user=None, password=None, **kwargs)` opens a
  `proton.utils.BlockingConnection` (closed at teardown); kwargs go to proton's
  `Container.connect` (container_id, sasl_enabled, allowed_mechs, ...).
* `wait_until(connection, predicate)` pumps a blocking connection until `predicate()` holds;
  `settle_with(receiver, outcome, failed=...)` settles the oldest message a blocking receiver
  handed out with any outcome (BlockingReceiver cannot set delivery-failed).
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import pytest
from proton import ConnectionException, Delivery
from proton.utils import BlockingConnection, BlockingReceiver

from conformance.waiting import QUIET
from machinery.waiting import poll

from .conftest import TIMEOUT, RunningBroker


class AmqpBroker:
    def __init__(self, running: RunningBroker) -> None:
        self.running = running
        self.amqp_host, self.amqp_port = running.server.amqp_address

    @property
    def amqp_address(self) -> tuple[str, int]:
        return self.amqp_host, self.amqp_port

    @property
    def stomp_address(self) -> tuple[str, int]:
        return self.running.address

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"amqp://{auth}{self.amqp_host}:{self.amqp_port}"

    @property
    def engine(self):
        return self.running.server.broker

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.running.call(fn)

    def queue_stats(self, name: str) -> dict | None:
        return self.running.queue_stats(name)

    def connection_count(self) -> int:
        return self.running.connection_count()


@pytest.fixture
def amqp_broker_factory(broker_factory):
    def factory(**config: Any) -> AmqpBroker:
        config.setdefault("amqp", "127.0.0.1:0")
        return AmqpBroker(broker_factory(**config))

    return factory


@pytest.fixture
def amqp_broker(amqp_broker_factory) -> AmqpBroker:
    return amqp_broker_factory()


@pytest.fixture
def amqp_connect():
    opened: list[BlockingConnection] = []

    def connect(broker: AmqpBroker, user: str | None = None, password: str | None = None,
                timeout: float = TIMEOUT, **kwargs: Any) -> BlockingConnection:
        connection = BlockingConnection(broker.url(user, password), timeout=timeout, **kwargs)
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - already closed by the broker or the test
            pass


def wait_until(connection: BlockingConnection, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> bool:
    """Pump `connection` until `predicate()` is true; False when `timeout` passes first.

    Unlike `BlockingConnection.wait`, the predicate is checked every 50 ms even when no AMQP
    event arrives: a predicate about the broker's state (a dead-letter count, say) may come
    true without the client hearing anything."""
    container = connection.container
    saved = container.timeout

    def pumped() -> bool:
        # One round of AMQP events (at most 50 ms) between two looks at the predicate: the
        # connection's events are processed while waiting, where a sleep would stall them.
        if predicate():
            return True
        container.timeout = 0.05
        container.process()
        if connection.disconnected:
            raise ConnectionException(f"connection lost while waiting: {connection.disconnected}")
        return False

    try:
        return poll(pumped, timeout=timeout, interval=0)
    finally:
        container.timeout = saved


def pump(connection: BlockingConnection, seconds: float = QUIET) -> None:
    """Process events for `seconds`, by default the quiet window (to show that something does
    *not* arrive)."""
    wait_until(connection, lambda: False, seconds)


def settle_with(receiver: BlockingReceiver, outcome: int, *, failed: bool = False,
                undeliverable: bool = False) -> Delivery:
    delivery = receiver.fetcher.unsettled.popleft()
    if outcome == Delivery.MODIFIED:
        delivery.local.failed = failed
        delivery.local.undeliverable = undeliverable
    delivery.update(outcome)
    delivery.settle()
    return delivery


def raw_exchange(address: tuple[str, int], data: bytes, timeout: float = TIMEOUT) -> bytes:
    """Send `data` on a fresh socket and read until the broker closes it; returns what it sent.
    Fails if the broker does not close the connection within `timeout`."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        received = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"the broker did not close the connection; got {bytes(received)!r}")
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        return bytes(received)
