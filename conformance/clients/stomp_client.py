"""The STOMP 1.2 adapter, over stomp.py's ``Connection12``.

Every operation that changes broker state asks for a RECEIPT and waits for it, so when a call
returns the broker has acted on it (STOMP 1.2 "Header receipt"); an ERROR frame instead makes
the call raise ClientError carrying the frame's ``message`` header and body.

ActiveMQ's STOMP extensions carry what STOMP itself cannot say (ActiveMQ Classic "Stomp"
page, "ActiveMQ extensions to STOMP"): ``activemq.prefetchSize``, ``activemq.exclusive``,
``activemq.priority``, ``activemq.subscriptionName`` (durable topic subscriptions, with
``client-id`` on CONNECT), and message headers ``JMSXGroupID`` / ``JMSXGroupSeq``,
``persistent``, ``priority``, ``expires``. The reference broker reads the same headers
(``reference_broker/protocols/stomp/session.py``).

stomp.py calls the listener on its own receiver thread; everything the test thread reads
goes through a Condition (receipts, errors) or an `Inbox` (messages).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import stomp

from .base import (
    GROUP_ID,
    GROUP_SEQ,
    AckMode,
    ClientError,
    ConnectFailed,
    ExchangeLog,
    Inbox,
    NotSent,
    Received,
    Unsupported,
    preview,
    split_destination,
)
from .tls import ClientTls

#: MESSAGE headers that describe the frame or the message envelope, not application properties.
PROTOCOL_HEADERS = frozenset({
    "destination", "message-id", "subscription", "ack", "content-length", "content-type",
    "redelivered", "persistent", "priority", "expires", "timestamp", "correlation-id",
    "reply-to", "type", "receipt", "transaction", "JMSXDeliveryCount",
})

_ACK_MODES = ("auto", "client", "client-individual")


def stomp_destination(destination: str) -> str:
    """``queue://X`` -> ``/queue/X``, ``topic://X`` -> ``/topic/X`` (ActiveMQ's STOMP names)."""
    kind, name = split_destination(destination)
    return f"/{kind}/{name}"


def canonical_destination(header: str | None) -> str:
    """The MESSAGE ``destination`` header back in canonical form; other names stay as sent."""
    if header is None:
        return ""
    for kind in ("queue", "topic"):
        prefix = f"/{kind}/"
        if header.startswith(prefix):
            return f"{kind}://{header[len(prefix):]}"
    return header


def header_value(value: object) -> str:
    """A property value as a STOMP header: booleans as JMS spells them, the rest as str()."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error_text(frame, body_lines: int | None = None) -> str:
    """The ERROR frame's ``message`` header and body (ActiveMQ puts a Java stack trace in the
    body: ``body_lines`` keeps only its first lines for exception messages)."""
    message = frame.headers.get("message", "")
    body = frame.body.decode("utf-8", "replace") if isinstance(frame.body, bytes) else (frame.body or "")
    lines = body.strip().splitlines()
    if body_lines is not None and len(lines) > body_lines:
        lines = lines[:body_lines] + [f"... ({len(lines) - body_lines} more lines in the exchange log)"]
    body = "\n".join(lines)
    if message and body.startswith(message):
        return body
    return f"{message}: {body}" if message and body else (message or body or "ERROR frame without a message")


class _Listener(stomp.ConnectionListener):
    """Receives on stomp.py's thread; hands frames to the client under one Condition."""

    def __init__(self, client: "StompClient") -> None:
        self.client = client
        self.cond = threading.Condition()
        self.connected = False
        self.receipts: set[str] = set()
        self.errors: list[str] = []
        self.lost: str | None = None

    def on_connected(self, frame) -> None:
        with self.cond:
            self.connected = True
            self.cond.notify_all()

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        self.client.exchange.note(f"<- ERROR {_error_text(frame)}")
        with self.cond:
            self.errors.append(_error_text(frame, body_lines=1))
            self.cond.notify_all()

    def on_message(self, frame) -> None:
        self.client._deliver(frame)

    def on_disconnected(self) -> None:
        reason = f"ERROR {self.errors[-1]!r}" if self.errors else "the broker closed the connection"
        with self.cond:
            first = self.lost is None
            if first:
                self.lost = reason
            self.cond.notify_all()
        if first:
            self.client._connection_lost(reason)


class StompSubscription:
    """One SUBSCRIBE on a `StompClient`; messages arrive in its `Inbox`."""

    ack_confirmed = True  # ACK and NACK wait for their RECEIPT

    def __init__(self, client: "StompClient", sub_id: str, destination: str, ack_mode: AckMode,
                 durable_name: str | None) -> None:
        self.client = client
        self.id = sub_id
        self.destination = destination
        self.ack_mode = ack_mode
        self.durable_name = durable_name
        self.inbox = Inbox()
        self.closed = False

    def receive(self, timeout: float = 5.0) -> Received | None:
        return self.inbox.get(timeout)

    def receive_n(self, n: int, timeout: float = 5.0) -> list[Received]:
        return self.inbox.get_n(n, timeout)

    def drain(self, quiet: float = 0.5) -> list[Received]:
        return self.inbox.drain(quiet)

    def _ack_id(self, message: Received) -> str:
        if self.ack_mode == "auto":
            raise ValueError(f"subscription {self.id} on {self.destination} uses ack mode 'auto': "
                             "the broker settled the message already; subscribe with ack='client' "
                             "or 'client-individual' to acknowledge")
        ack_id = message.headers.get("ack")
        if ack_id is None:
            raise ClientError(f"MESSAGE {message.message_id} on {self.destination} has no 'ack' header "
                              "(STOMP 1.2 requires one in client ack modes); cannot acknowledge it")
        return str(ack_id)

    def ack(self, message: Received, *, transaction: str | None = None) -> None:
        headers = {"id": self._ack_id(message)}
        if transaction:
            headers["transaction"] = transaction
        self.client._request("ACK", headers, note=f"ACK {message.message_id} tx={transaction}")

    def nack(self, message: Received, *, transaction: str | None = None) -> None:
        headers = {"id": self._ack_id(message)}
        if transaction:
            headers["transaction"] = transaction
        self.client._request("NACK", headers, note=f"NACK {message.message_id} tx={transaction}")

    def close(self) -> None:
        """UNSUBSCRIBE (a durable subscription stays on the broker; see unsubscribe_durable)."""
        if self.closed:
            return
        self.closed = True
        self.client._subscriptions.pop(self.id, None)
        if self.client.connected:
            self.client._request("UNSUBSCRIBE", {"id": self.id}, note=f"UNSUBSCRIBE {self.id} {self.destination}")


def _see_tls_end_of_stream(transport) -> None:
    """Make stomp.py notice the broker closing a TLS connection.

    Its non-blocking TLS read (stomp/transport.py ``__read``, stomp.py 8.x) takes an empty read for
    "no data yet", so a closed TLS socket stays readable, its receiver spins on it and the client
    is never told the connection is gone. On a TLS socket an empty read is the end of the stream
    (no data yet raises SSLWantReadError instead), so this flips the transport to blocking mode,
    in which stomp.py's own code reads an empty read as the close it is."""
    receive = transport.receive

    def receive_seeing_the_end():
        data = receive()
        if data == b"" and not transport.blocking:
            transport.blocking = True
        return data

    transport.receive = receive_seeing_the_end


class StompClient:
    """A STOMP 1.2 session. ``client_id`` is sent as ``client-id`` on CONNECT (ActiveMQ keys
    durable subscriptions on it); one is generated when not given and kept in ``client_id``,
    so a test can reconnect as the same client."""

    protocol = "stomp"

    def __init__(self, host: str, port: int, *, login: str | None = None, passcode: str | None = None,
                 client_id: str | None = None, timeout: float = 5.0, heartbeats: tuple[int, int] = (0, 0),
                 vhost: str | None = None, connect_headers: dict[str, str] | None = None,
                 unsupported_subscribe: dict[str, str] | None = None,
                 destination_parameters: str | None = None, tls: ClientTls | None = None) -> None:
        # None: ``name?key=value`` destinations are sent as they are; else why this broker does not
        # take them over STOMP (raised as Unsupported)
        self.destination_parameters = destination_parameters
        self.address = (host, port)
        # subscribe() options this broker reads differently over STOMP -> why (raised as Unsupported,
        # so the check is not applicable over STOMP there instead of silently meaning something else)
        self.unsupported_subscribe = dict(unsupported_subscribe or {})
        self.timeout = timeout
        self.client_id = client_id or f"brokerconf-{uuid.uuid4().hex[:12]}"
        self.exchange = ExchangeLog()
        self._subscriptions: dict[str, StompSubscription] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._closing = False  # DISCONNECT sent: the broker closing the socket is expected
        self._listener = _Listener(self)
        # One connection attempt: a conformance run wants to know at once that the broker is
        # not there, and reconnecting belongs to the failover transport, not to this adapter.
        # reconnect_sleep_initial=0: stomp.py sleeps its reconnect back-off even after the last
        # allowed attempt (in 0.2 s steps) before it gives up; that sleep added ~200 ms to every
        # failed attempt of our failover client, whose waits are the failover options' alone
        # (measured on the wire beside the real ActiveMQ clients: test_failover_real_clients.py)
        self._conn = stomp.Connection12([self.address], reconnect_attempts_max=1, reconnect_sleep_initial=0,
                                        timeout=timeout, heartbeats=heartbeats, vhost=vhost, auto_decode=False)
        self._conn.set_listener("brokerconf", self._listener)
        self.tls = tls
        if tls is not None:
            # stomp.py wraps the socket itself (PROTOCOL_TLS_CLIENT: the broker's name is checked)
            self._conn.set_ssl(for_hosts=[self.address], ca_certs=str(tls.ca_file),
                               cert_file=None if tls.cert_file is None else str(tls.cert_file),
                               key_file=None if tls.key_file is None else str(tls.key_file),
                               cert_validator=tls.check_certificate)
            _see_tls_end_of_stream(self._conn.transport)
        self._connect(login, passcode, connect_headers or {})

    # ------------------------------------------------------------------ session

    def _connect(self, login: str | None, passcode: str | None, extra: dict[str, str]) -> None:
        where = f"STOMP{'+TLS' if self.tls else ''} {self.address[0]}:{self.address[1]}"
        self.exchange.note(f"-> CONNECT {where} login={login} client-id={self.client_id}"
                           + (f" {self.tls.describe()}" if self.tls else ""))
        headers = {"client-id": self.client_id, **extra}
        try:
            # Starts the transport (socket + one receiver thread), then sends CONNECT.
            self._conn.connect(login, passcode, wait=False, headers=headers, with_connect_command=True)
        except stomp.exception.ConnectFailedException:
            raise ConnectFailed(f"cannot open a socket to {where}: is the broker running and is that "
                                "its STOMP port?" + (" (or the TLS handshake failed: is it a TLS port, does "
                                                     "its certificate chain to the CA given?)" if self.tls else "")
                                ) from None
        except (OSError, stomp.exception.StompException) as exc:
            # The TCP connect succeeded but the socket was closed before CONNECT went out: stomp.py's
            # receiver thread read EOF first and dropped the socket (NotConnectedException), or the
            # write hit the closed socket (OSError). docker-proxy does this for a published port with
            # nothing listening behind it, e.g. a shared-store slave whose connectors are closed.
            # This is a failed connect, like a refused one: the failover transport must try the
            # next broker, not die on an exception it does not know (seen in the container run of
            # chaos/experiments/activemq-shared-store-failover.toml).
            self._stop_transport()
            raise ConnectFailed(f"{where} accepted the TCP connection but closed it before CONNECT could be "
                                f"sent ({exc!r}): nothing serves STOMP behind that port "
                                "(a slave waiting for its lock, or a proxy with no broker behind it)") from None
        listener = self._listener
        with listener.cond:
            listener.cond.wait_for(lambda: listener.connected or listener.errors or listener.lost, self.timeout)
            connected, errors = listener.connected, list(listener.errors)
        if not connected:
            self._stop_transport()
            if errors:
                raise ConnectFailed(f"{where} refused CONNECT: {errors[-1]} (check login/passcode and client-id)")
            raise ConnectFailed(f"{where} did not answer CONNECT within {self.timeout}s "
                                "(is it a STOMP listener?)")
        self.exchange.note("<- CONNECTED")

    @property
    def connected(self) -> bool:
        return self._listener.connected and self._listener.lost is None and not self._closed

    def _connection_lost(self, reason: str) -> None:
        self.exchange.note("-- disconnected" if self._closing else f"-- connection lost: {reason}")
        for sub in list(self._subscriptions.values()):
            sub.inbox.connection_lost(reason)

    def _request(self, command: str, headers: dict[str, str], body: bytes = b"", *, note: str) -> None:
        """Send one frame with a receipt; return when the receipt arrives, raise on ERROR."""
        listener = self._listener
        if not self.connected:
            raise NotSent(f"{note}: not connected ({listener.lost or 'closed'})")
        receipt = f"rcpt-{next(self._ids)}"
        headers = {**headers, "receipt": receipt}
        self.exchange.note(f"-> {note}")
        with listener.cond:
            errors_before = len(listener.errors)
        try:
            self._conn.send_frame(command, headers, body)
        except (OSError, stomp.exception.StompException) as exc:
            # The socket went away between the check above and the write; stomp.py's receiver
            # thread reports why (on_disconnected) just after it closes the socket.
            with listener.cond:
                listener.cond.wait_for(lambda: listener.lost is not None, 1.0)
                cause = listener.lost or (f"after ERROR {listener.errors[-1]!r}" if listener.errors
                                          else "the socket is closed")
            # sendall() raising means the frame was not written out whole, and a STOMP frame
            # counts only once its NUL terminator arrives: the broker cannot have acted on it.
            raise NotSent(f"{note}: could not send ({exc!r}); connection lost: {cause}") from None
        with listener.cond:
            listener.cond.wait_for(lambda: receipt in listener.receipts or len(listener.errors) > errors_before
                                   or listener.lost is not None, self.timeout)
            if receipt in listener.receipts:
                listener.receipts.discard(receipt)
                return
            if len(listener.errors) > errors_before:
                raise ClientError(f"{note}: the broker answered ERROR: {listener.errors[errors_before]}")
            if listener.lost is not None:
                raise ClientError(f"{note}: connection lost before the receipt: {listener.lost}")
        raise ClientError(f"{note}: no RECEIPT within {self.timeout}s; the outcome is unknown")

    # ------------------------------------------------------------------ producing

    def send(self, destination: str, body: bytes | str = b"", properties: dict[str, object] | None = None, *,
             persistent: bool = True, priority: int | None = None, ttl_ms: int | None = None,
             group_id: str | None = None, group_seq: int | None = None,
             transaction: str | None = None, headers: dict[str, str] | None = None) -> None:
        self._check_parameters(destination)
        wire = {k: header_value(v) for k, v in (properties or {}).items()}
        wire["persistent"] = "true" if persistent else "false"
        if priority is not None:
            wire["priority"] = str(priority)
        if ttl_ms is not None:
            # ActiveMQ's STOMP `expires` is an absolute time in ms since the epoch.
            wire["expires"] = str(int(time.time() * 1000) + int(ttl_ms))
        if group_id is not None:
            wire[GROUP_ID] = group_id
        if group_seq is not None:
            wire[GROUP_SEQ] = str(group_seq)
        if transaction:
            wire["transaction"] = transaction
        wire.update(headers or {})
        wire["destination"] = stomp_destination(destination)
        data = body.encode() if isinstance(body, str) else bytes(body)
        shown = {k: v for k, v in wire.items() if k != "destination"}
        # Always framed by length, so a body may hold NUL octets (STOMP 1.2 "Header content-length").
        wire["content-length"] = str(len(data))
        self._request("SEND", wire, data, note=f"SEND {destination} {shown} body={preview(data)}")

    # ------------------------------------------------------------------ consuming

    def _check_parameters(self, destination: str) -> None:
        if self.destination_parameters and "?" in destination:
            raise Unsupported(f"destination parameters ({destination.partition('?')[2]}) over STOMP on this broker: "
                              f"{self.destination_parameters}")

    def subscribe(self, destination: str, *, ack: AckMode = "auto", prefetch: int | None = None,
                  selector: str | None = None, durable_name: str | None = None,
                  exclusive: bool = False, priority: int | None = None,
                  headers: dict[str, str] | None = None) -> StompSubscription:
        if ack not in _ACK_MODES:
            raise ValueError(f"ack mode {ack!r} is not one of {_ACK_MODES}")
        self._check_parameters(destination)
        asked = {"prefetch": prefetch is not None, "exclusive": exclusive, "priority": priority is not None}
        for option, why in self.unsupported_subscribe.items():
            if asked.get(option):
                raise Unsupported(f"STOMP subscribe option {option!r} on this broker: {why}")
        sub_id = f"sub-{next(self._ids)}"
        wire = {"destination": stomp_destination(destination), "id": sub_id, "ack": ack}
        if prefetch is not None:
            wire["activemq.prefetchSize"] = str(prefetch)
        if selector:
            wire["selector"] = selector
        if durable_name:
            wire["activemq.subscriptionName"] = durable_name
        if exclusive:
            wire["activemq.exclusive"] = "true"
        if priority is not None:
            wire["activemq.priority"] = str(priority)
        wire.update(headers or {})
        subscription = StompSubscription(self, sub_id, destination, ack, durable_name)
        # Registered before SUBSCRIBE goes out: messages may come before the receipt does.
        self._subscriptions[sub_id] = subscription
        shown = {k: v for k, v in wire.items() if k not in ("destination", "id")}
        try:
            self._request("SUBSCRIBE", wire, note=f"SUBSCRIBE {sub_id} {destination} {shown}")
        except ClientError:
            self._subscriptions.pop(sub_id, None)
            raise
        return subscription

    def unsubscribe_durable(self, destination: str, durable_name: str) -> None:
        """Remove the durable subscription ``durable_name`` of this client id.

        ActiveMQ removes it on UNSUBSCRIBE carrying ``activemq.subscriptionName`` (the name
        with the connection's client-id). It refuses while the subscription is active, so
        an active one on this connection is closed first."""
        for sub in list(self._subscriptions.values()):
            if sub.durable_name == durable_name:
                sub.close()
        wire = {"id": f"durable-{durable_name}", "destination": stomp_destination(destination),
                "activemq.subscriptionName": durable_name}
        self._request("UNSUBSCRIBE", wire, note=f"UNSUBSCRIBE durable {durable_name} {destination}")

    def _deliver(self, frame) -> None:
        """On stomp.py's thread: turn a MESSAGE into `Received` and route it to its subscription."""
        headers = dict(frame.headers)
        body = frame.body if isinstance(frame.body, bytes) else (frame.body or "").encode()
        sub = self._subscriptions.get(headers.get("subscription", ""))
        received = received_from_frame(headers, body, sub)
        self.exchange.note(f"<- MESSAGE {headers.get('subscription')} {received.destination} "
                           f"id={received.message_id} redelivered={received.redelivered} "
                           f"props={received.properties} body={preview(body)}")
        if sub is None:
            self.exchange.note(f"-- MESSAGE for unknown subscription {headers.get('subscription')!r} dropped")
            return
        sub.inbox.put(received)

    # ------------------------------------------------------------------ transactions

    def begin(self) -> str:
        transaction = f"tx-{next(self._ids)}"
        self._request("BEGIN", {"transaction": transaction}, note=f"BEGIN {transaction}")
        return transaction

    def commit(self, transaction: str) -> None:
        self._request("COMMIT", {"transaction": transaction}, note=f"COMMIT {transaction}")

    def abort(self, transaction: str) -> None:
        self._request("ABORT", {"transaction": transaction}, note=f"ABORT {transaction}")

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """DISCONNECT with a receipt (so everything sent before is processed), then stop the
        receiver thread. Idempotent; never raises for a connection that is already gone."""
        if self._closed:
            return
        if self.connected:
            try:
                self._closing = True
                self._request("DISCONNECT", {}, note="DISCONNECT")
            except ClientError as exc:
                self.exchange.note(f"-- DISCONNECT not confirmed: {exc}")
        self._closed = True
        self._stop_transport()
        for sub in self._subscriptions.values():
            sub.inbox.connection_lost("closed by the client")

    def _stop_transport(self) -> None:
        transport = self._conn.transport
        listener = self._listener
        if self._closing:
            # Brokers close the socket once DISCONNECT is receipted; closing it from this side
            # as well would race stomp.py's receiver thread, which cleans up after that close.
            with listener.cond:
                listener.cond.wait_for(lambda: listener.lost is not None, 1.0)
        thread = getattr(transport, "io_thread", None)
        queue = getattr(transport, "send_queue", None)
        if self.tls is not None and queue is not None and thread is not None and thread.is_alive() \
                and thread is not threading.current_thread():
            # stomp.py's TLS receiver waits in select() with no time-out; disconnect_socket would
            # unregister what it waits on and leave it blocked for good. Stop it first: clear its
            # running flag, then wake its select through the send queue (a pipe it watches).
            transport.running = False
            queue.put(b"")
            thread.join(self.timeout)
        if listener.lost is None:
            try:
                transport.disconnect_socket()
            except Exception as exc:  # noqa: BLE001 - teardown: the socket may already be gone
                self.exchange.note(f"-- closing the socket: {exc!r}")
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.timeout)

    def __enter__(self) -> "StompClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StompClient({self.address[0]}:{self.address[1]}, client_id={self.client_id!r})"


def received_from_frame(headers: dict[str, str], body: bytes, sub: StompSubscription | None) -> Received:
    """A MESSAGE frame as `Received`: envelope headers parsed, the rest are properties."""
    def as_int(name: str) -> int | None:
        try:
            return int(headers[name])
        except (KeyError, ValueError):
            return None

    delivery_count = as_int("JMSXDeliveryCount")
    return Received(
        body=body,
        destination=canonical_destination(headers.get("destination")),
        properties={k: v for k, v in headers.items() if k not in PROTOCOL_HEADERS},
        message_id=headers.get("message-id"),
        redelivered=headers.get("redelivered", "false").lower() == "true",
        delivery_count=delivery_count,
        priority=as_int("priority"),
        # Brokers write `persistent:true` only for persistent messages (ActiveMQ, RabbitMQ, the
        # reference broker): no header means non-persistent.
        persistent=headers.get("persistent", "false").lower() == "true",
        headers=headers,
        subscription=sub,
    )
