"""One small client API over stomp.py, paho-mqtt and python-qpid-proton.

Suites are written once against `Client` / `Subscription` and run over whichever protocol the
test is parametrized with. Destinations are canonical ActiveMQ names (``queue://X``,
``topic://X``); each adapter maps them onto its protocol (STOMP ``/queue/X``, MQTT topic ``X``
with ``.`` -> ``/``, AMQP address ``queue://X`` or ``X``). Where a protocol cannot carry a
feature (MQTT has no queues, no selectors on the wire, no NACK), the adapter raises
`Unsupported` with the reason, which the plugin reports as not applicable.

Every client records its exchange with the broker (`Client.exchange`: one line per operation
and per frame received) so a failing test carries what was said on the wire.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol
from machinery.waiting import Deadline

AckMode = Literal["auto", "client", "client-individual"]

#: message property names shared by every adapter (JMS names, as ActiveMQ and Artemis use)
GROUP_ID = "JMSXGroupID"
GROUP_SEQ = "JMSXGroupSeq"


class Unsupported(Exception):
    """The protocol (or this adapter) cannot express the operation; the message says why."""


class ClientError(Exception):
    """The broker refused an operation (STOMP ERROR frame, MQTT reason code, AMQP error condition)."""


class NotSent(ClientError):
    """The connection was already gone when the client tried to write the frame, so the broker
    never saw a whole frame: the operation certainly did not happen and may be retried
    elsewhere. (A frame that *was* written but never confirmed is a different case: in doubt.)"""


@dataclass
class Received:
    body: bytes
    destination: str  # canonical (queue://X / topic://X) when the protocol tells it
    properties: dict[str, object] = field(default_factory=dict)  # application properties, incl. group id / seq
    message_id: str | None = None
    redelivered: bool = False
    delivery_count: int | None = None  # as JMSXDeliveryCount: 1 on the first delivery; None when not told
    priority: int | None = None
    persistent: bool | None = None
    headers: dict[str, object] = field(default_factory=dict)  # protocol-level headers as received
    subscription: "Subscription | None" = field(default=None, repr=False, compare=False)
    received_at: float = field(default_factory=time.monotonic, repr=False, compare=False)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def group_id(self) -> str | None:
        value = self.properties.get(GROUP_ID)
        return None if value is None else str(value)

    @property
    def group_seq(self) -> int | None:
        value = self.properties.get(GROUP_SEQ)
        return None if value is None else int(value)


class Subscription(Protocol):
    destination: str
    ack_mode: AckMode
    #: whether ack() returns only once the broker confirmed it (STOMP: the ACK's receipt). AMQP
    #: acks are settled dispositions the broker never answers, so a crash right after one may
    #: still redeliver the message: chaos workloads record such acks as in doubt (``info``).
    ack_confirmed: bool

    def receive(self, timeout: float = 5.0) -> Received | None:
        """The next message, or None after ``timeout`` seconds."""

    def receive_n(self, n: int, timeout: float = 5.0) -> list[Received]:
        """Up to ``n`` messages, waiting at most ``timeout`` seconds overall."""

    def drain(self, quiet: float = 0.5) -> list[Received]:
        """Everything that arrives until nothing has arrived for ``quiet`` seconds."""

    def ack(self, message: Received) -> None:
        """Acknowledge (cumulative in ``client`` mode, this one only in ``client-individual``)."""

    def nack(self, message: Received) -> None:
        """Negative acknowledgement: the broker redelivers or dead-letters it."""

    def close(self) -> None:
        """Stop consuming (unsubscribe; a durable subscription is kept)."""


class Client(Protocol):
    protocol: str  # stomp | mqtt | amqp
    exchange: deque[str]

    def send(self, destination: str, body: bytes | str = b"", properties: dict[str, object] | None = None, *,
             persistent: bool = True, priority: int | None = None, ttl_ms: int | None = None,
             group_id: str | None = None, group_seq: int | None = None,
             transaction: str | None = None) -> None:
        """Send and wait for the broker's confirmation when the protocol has one (STOMP receipt,
        MQTT PUBACK at QoS 1, AMQP accepted); ClientError when the broker refuses."""

    def subscribe(self, destination: str, *, ack: AckMode = "auto", prefetch: int | None = None,
                  selector: str | None = None, durable_name: str | None = None,
                  exclusive: bool = False, priority: int | None = None,
                  headers: dict[str, str] | None = None) -> Subscription:
        """Start consuming; returns once the broker has the subscription (receipt / SUBACK / attach)."""

    def unsubscribe_durable(self, destination: str, durable_name: str) -> None:
        """Remove a durable subscription."""

    def begin(self) -> str:
        """Start a local transaction; returns its id for send(transaction=...) and commit/abort."""

    def commit(self, transaction: str) -> None: ...

    def abort(self, transaction: str) -> None: ...

    def close(self) -> None:
        """Disconnect cleanly (idempotent)."""


def split_destination(destination: str) -> tuple[str, str]:
    """``queue://a.b`` -> ("queue", "a.b"); ValueError names the bad destination."""
    kind, sep, name = destination.partition("://")
    if not sep or kind not in ("queue", "topic") or not name:
        raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME")
    return kind, name


class ExchangeLog(deque):
    """A bounded record of one client's exchange, for evidence."""

    def __init__(self, limit: int = 500) -> None:
        super().__init__(maxlen=limit)
        self.started = time.monotonic()

    def note(self, line: str) -> None:
        self.append(f"{time.monotonic() - self.started:8.3f}s {line}")


class ConnectFailed(ClientError, ConnectionError):
    """The client could not open a session with the broker (socket refused, login refused,
    no answer in time); the message names the address and what to check."""


def preview(body: bytes | str, limit: int = 80) -> str:
    """A short printable form of a body for the exchange log (evidence, not data)."""
    raw = body.encode() if isinstance(body, str) else bytes(body)
    text = repr(raw[:limit])
    return text + (f"...(+{len(raw) - limit} bytes)" if len(raw) > limit else "")


class Inbox:
    """Messages handed over from a client library's network thread to the test's thread.

    ``get`` returns None on timeout, but raises ClientError once the connection is gone and
    nothing is left: a None would read as "the broker sent nothing", which is a different
    finding. ``get_n`` and ``drain`` return what arrived before the loss (the caller compares
    counts; the exchange log says why it stopped)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: deque = deque()
        self.lost: str | None = None

    def put(self, item: object) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def connection_lost(self, reason: str) -> None:
        with self._cond:
            if self.lost is None:
                self.lost = reason
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def _wait(self, timeout: float) -> object | None:
        with self._cond:
            self._cond.wait_for(lambda: self._items or self.lost is not None, max(timeout, 0.0))
            return self._items.popleft() if self._items else None

    def get(self, timeout: float) -> object | None:
        item = self._wait(timeout)
        if item is None and self.lost is not None:
            raise ClientError(f"connection lost while receiving: {self.lost}")
        return item

    def get_n(self, n: int, timeout: float) -> list:
        deadline = Deadline(timeout)
        got: list = []
        # a reader, not a `wait_until`: each round takes one item, and what came is kept
        while len(got) < n:
            item = self._wait(deadline.remaining())
            if item is None:
                break
            got.append(item)
        return got

    def drain(self, quiet: float) -> list:
        got: list = []
        while (item := self._wait(quiet)) is not None:
            got.append(item)
        return got
