"""The AMQP 1.0 adapter, over python-qpid-proton's `BlockingConnection`.

Addresses. ActiveMQ's AMQP transport and the reference broker take the canonical names as
they are (``queue://X``, ``topic://X``); RabbitMQ's AMQP 1.0 plugin wants ``/queue/X`` and
``/topic/X``: ``address_style="prefix"`` (default) or ``"rabbitmq"``.

Sending. One sender link per address; a send returns once the broker settled the transfer
and raises ClientError unless the outcome is ``accepted`` (AMQP 1.0 section 3.4). Properties
become application-properties; a group id / sequence goes into the properties section's
``group-id`` / ``group-sequence`` (which ActiveMQ and Artemis map to JMSXGroupID /
JMSXGroupSeq) and comes back in `Received.properties` under the JMS names.

Receiving. Credit is the consumer's prefetch, managed here rather than by proton's flow
controller (which tops credit up as messages *arrive*, so unacknowledged messages would pile
up without bound): in ``auto`` mode a message is accepted when taken and one credit is
returned; in the client modes credit comes back when a message is settled, so at most
``prefetch`` messages are unacknowledged, as for a JMS consumer. ``ack`` = accepted,
``nack`` = the outcome the broker counts as a failed delivery, so that its redelivery limits and
dead-lettering apply: ``nack_outcome="modified"`` (default: modified with delivery-failed, as
Artemis and the reference broker count it) or ``"rejected"`` for ActiveMQ Classic, whose AMQP
transport (5.17 AmqpSender.onDelivery) redelivers a modified delivery at once with no limit and
turns only a rejected one into a poison ack, the step its redelivery policy and DLQ act on (the
same step a STOMP NACK takes there). Selectors use the ``jms-selector`` source filter
(apache.org:selector-filter:string); durable topic subscriptions a durable source terminus
named by the link name, owned by the connection's container id (the client id); closing such
a subscription detaches the link (kept) and `unsubscribe_durable` closes it (removed).
Consumer priority is the link property ``priority`` (Artemis' convention, also read by the
reference broker).

proton's BlockingConnection is single-threaded: everything, receiving included, runs on the
caller's thread, and the connection only makes progress while a call here is waiting.
"""

from __future__ import annotations

import ipaddress
import itertools
import uuid
from collections import OrderedDict

from proton import ConnectionException, Delivery, Message, ProtonException, SSLDomain, Timeout, int32, symbol
from proton.reactor import DurableSubscription, ReceiverOption, Selector
from proton._utils import Fetcher  # not re-exported by proton.utils; BlockingConnection uses it the same way
from proton.utils import BlockingConnection, BlockingReceiver, SendException

from .base import (
    GROUP_ID,
    GROUP_SEQ,
    AckMode,
    ClientError,
    ConnectFailed,
    ExchangeLog,
    Received,
    Unsupported,
    preview,
    split_destination,
)
from .tls import ClientTls
from .proton_ssl import install as install_on_demand_tls_contexts
from machinery.waiting import Deadline

install_on_demand_tls_contexts()  # each connection's container makes its TLS contexts only if used (proton_ssl.py)

#: credit for a subscription that does not name a prefetch
DEFAULT_CREDIT = 100
ADDRESS_STYLES = ("prefix", "rabbitmq")
NACK_OUTCOMES = ("modified", "rejected")
_OUTCOMES = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected", Delivery.RELEASED: "released",
             Delivery.MODIFIED: "modified", Delivery.RECEIVED: "received"}


def amqp_address(destination: str, style: str = "prefix") -> str:
    kind, name = split_destination(destination)
    return destination if style == "prefix" else f"/{kind}/{name}"


def canonical_address(address: str | None, fallback: str) -> str:
    if not address:
        return fallback
    for kind in ("queue", "topic"):
        if address.startswith(f"/{kind}/"):
            return f"{kind}://{address[len(kind) + 2:]}"
    return address


class _LinkProperties(ReceiverOption):
    """Link properties on the attach (proton has no ready-made option for them)."""

    def __init__(self, properties: dict) -> None:
        self.properties = properties

    def apply(self, receiver) -> None:
        receiver.properties = self.properties


def _describe(exc: BaseException) -> str:
    """The AMQP error condition of a proton exception, when it carries one."""
    condition = getattr(exc, "condition", None)
    text = str(exc)
    if condition and str(condition) not in text:
        text = f"{condition}: {text}"
    return text or type(exc).__name__


class _Fetcher(Fetcher):
    """proton's blocking-receiver handler, plus whether the broker answered our detach (proton's
    endpoint state does not show a detach, only a close)."""

    remote_detached = False

    def on_link_remote_detach(self, event) -> None:
        self.remote_detached = True


class AmqpSubscription:
    # The adapter settles on sending the disposition (receiver settle mode "first"): no answer.
    ack_confirmed = False

    def __init__(self, client: "AmqpClient", destination: str, ack_mode: AckMode, prefetch: int | None,
                 durable_name: str | None) -> None:
        self.client = client
        self.destination = destination
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self.durable_name = durable_name
        self.receiver: BlockingReceiver | None = None
        self.fetcher: _Fetcher | None = None
        self.closed = False
        self._unsettled: OrderedDict[str, Delivery] = OrderedDict()
        self._tags = itertools.count(1)

    def _open(self, address: str, name: str, options: list) -> None:
        conn = self.client._conn
        # prefetch=0: no proton flow controller; this class gives credit itself (module notes).
        self.fetcher = _Fetcher(conn, 0)
        link = conn.container.create_receiver(conn.conn, address, name=name, handler=self.fetcher, options=options)
        credit = DEFAULT_CREDIT if self.prefetch is None else self.prefetch
        self.receiver = BlockingReceiver(conn, link, self.fetcher, credit=credit)
        # BlockingReceiver grants the credit locally; the FLOW frame only leaves with the next
        # I/O on this connection. Drive it briefly now, so a subscription that has not called
        # receive() yet still competes for messages (else the first receiver takes them all).
        try:
            conn.wait(lambda: False, timeout=0.05)
        except Timeout:
            pass

    # ------------------------------------------------------------------ receiving

    def receive(self, timeout: float = 5.0) -> Received | None:
        note = f"receive {self.destination}"
        client = self.client
        with client._errors(note):
            if self.prefetch == 0 and not self.receiver.link.credit and not self.fetcher.has_message:
                self.receiver.link.flow(1)  # prefetch 0: pull one message per receive
            try:
                client._conn.wait(lambda: self.fetcher.has_message, timeout=max(timeout, 0.0), msg=note)
            except Timeout:
                return None
            return self._take()

    def receive_n(self, n: int, timeout: float = 5.0) -> list[Received]:
        deadline = Deadline(timeout)
        got: list[Received] = []
        # a reader, not a `wait_until`: each round receives one message, and what came is kept
        while len(got) < n:
            message = self.receive(deadline.remaining())
            if message is None:
                break
            got.append(message)
        return got

    def drain(self, quiet: float = 0.5) -> list[Received]:
        got: list[Received] = []
        while (message := self.receive(quiet)) is not None:
            got.append(message)
        return got

    def _take(self) -> Received:
        message, delivery = self.fetcher.incoming.popleft()
        tag = f"d-{next(self._tags)}"
        received = received_from_message(message, self.destination, tag, self)
        self.client.exchange.note(
            f"<- TRANSFER {self.destination} id={received.message_id} delivery-count={message.delivery_count} "
            f"props={received.properties} body={preview(received.body)}")
        if delivery.settled:  # pre-settled by the broker: nothing to settle, the credit is spent
            self.receiver.link.flow(1)
        elif self.ack_mode == "auto":
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()
            self.receiver.link.flow(1)
        else:
            self._unsettled[tag] = delivery
        return received

    # ------------------------------------------------------------------ settling

    def _deliveries(self, message: Received) -> list[tuple[str, Delivery]]:
        if self.ack_mode == "auto":
            raise ValueError(f"subscription on {self.destination} uses ack mode 'auto': the message was accepted "
                             "when taken; subscribe with ack='client' or 'client-individual' to settle it yourself")
        tag = message.headers.get("delivery-tag")
        if tag not in self._unsettled:
            raise ClientError(f"message {message.message_id} on {self.destination} is not awaiting settlement "
                              "here (settled already, or received on another subscription)")
        if self.ack_mode == "client":  # cumulative, like a JMS CLIENT_ACKNOWLEDGE session
            tags = list(itertools.takewhile(lambda t: t != tag, self._unsettled)) + [tag]
        else:
            tags = [tag]
        return [(t, self._unsettled.pop(t)) for t in tags]

    def _settle(self, message: Received, outcome: int, note: str) -> None:
        deliveries = self._deliveries(message)
        with self.client._errors(note):
            self.client.exchange.note(f"-> {note} ({len(deliveries)} deliveries)")
            for _, delivery in deliveries:
                if outcome == Delivery.MODIFIED:
                    delivery.local.failed = True
                delivery.update(outcome)
                delivery.settle()
            self.receiver.link.flow(len(deliveries))
            self.client._flush(note)

    def ack(self, message: Received, *, transaction: str | None = None) -> None:
        if transaction:
            raise Unsupported("this adapter has no AMQP transactions (coordinator links)")
        self._settle(message, Delivery.ACCEPTED, f"accept {message.message_id}")

    def nack(self, message: Received, *, transaction: str | None = None) -> None:
        if transaction:
            raise Unsupported("this adapter has no AMQP transactions (coordinator links)")
        if self.client.nack_outcome == "rejected":
            self._settle(message, Delivery.REJECTED, f"rejected {message.message_id}")
        else:
            self._settle(message, Delivery.MODIFIED, f"modified(delivery-failed) {message.message_id}")

    def close(self) -> None:
        """Close the link; a durable subscription's link is detached instead, which keeps it."""
        if self.closed:
            return
        self.closed = True
        self.client._subscriptions.discard(self)
        if self.receiver is None or not self.client.connected:
            return
        note = f"{'detach' if self.durable_name else 'close'} {self.destination}"
        self.client.exchange.note(f"-> {note}")
        with self.client._errors(note):
            if self.durable_name:
                self._detach()
            else:
                self.receiver.close()

    def _detach(self) -> None:
        link = self.receiver.link
        link.detach()
        try:
            self.client._conn.wait(lambda: self.fetcher.remote_detached, timeout=self.client.timeout,
                                   msg=f"detaching {link.name}")
        except Timeout:
            raise ClientError(f"the broker did not answer the detach of {link.name} within "
                              f"{self.client.timeout}s") from None


def _ssl_domain(tls: ClientTls) -> SSLDomain:
    """Proton's client TLS: the broker's certificate checked against the CA and the host name."""
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(tls.ca_file))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if tls.cert_file is not None:
        domain.set_credentials(str(tls.cert_file), str(tls.key_file), None)
    return domain


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class AmqpClient:
    protocol = "amqp"

    def __init__(self, host: str, port: int, *, login: str | None = None, passcode: str | None = None,
                 client_id: str | None = None, address_style: str = "prefix", timeout: float = 5.0,
                 nack_outcome: str = "modified", destination_parameters: str | None = None,
                 tls: ClientTls | None = None, **connect_options) -> None:
        # None: ``name?key=value`` destinations go to the broker as they are; else why this broker
        # does not take them over AMQP (raised as Unsupported)
        self.destination_parameters = destination_parameters
        if address_style not in ADDRESS_STYLES:
            raise ValueError(f"address_style must be one of {ADDRESS_STYLES}, not {address_style!r}")
        if nack_outcome not in NACK_OUTCOMES:
            raise ValueError(f"nack_outcome must be one of {NACK_OUTCOMES}, not {nack_outcome!r}")
        self.nack_outcome = nack_outcome
        self.address = (host, port)
        self.address_style = address_style
        self.timeout = timeout
        self.client_id = client_id or f"brokerconf-{uuid.uuid4().hex[:12]}"
        self.exchange = ExchangeLog()
        self._senders: dict[str, object] = {}
        self._subscriptions: set[AmqpSubscription] = set()
        self._names = itertools.count(1)
        self._closed = False
        self.tls = tls
        where = f"AMQP{'+TLS' if tls else ''} {host}:{port}"
        self.exchange.note(f"-> OPEN {where} container-id={self.client_id} user={login}"
                           + (f" {tls.describe()}" if tls else ""))
        options = dict(connect_options)
        if login is not None:
            options.update(user=login, password=passcode or "")
        if tls is not None:
            options["ssl_domain"] = _ssl_domain(tls)
            if tls.server_name:
                options["sni"] = tls.server_name  # proton checks the certificate against this name
            elif _is_ip_address(host):
                raise ValueError(f"AMQP over TLS to {host}: proton checks the broker's certificate against DNS names "
                                 "only; give ClientTls(server_name=...) a name in that certificate")
        try:
            self._conn = BlockingConnection(f"{'amqps' if tls else 'amqp'}://{host}:{port}", timeout=timeout,
                                            container_id=self.client_id, **options)
        except (ProtonException, OSError) as exc:
            raise ConnectFailed(f"{where} refused or did not answer the connection: {_describe(exc)} (is the "
                                "broker running, is that its AMQP port, are login/passcode right?)") from None
        self.exchange.note("<- OPEN")

    @property
    def connected(self) -> bool:
        return not self._closed and not self._conn.disconnected

    class _Errors:
        """Turns proton's exceptions into ClientError (with the AMQP condition) for one operation."""

        def __init__(self, client: "AmqpClient", note: str) -> None:
            self.client, self.note = client, note

        def __enter__(self) -> None:
            lost = self.client._conn.disconnected
            if lost:
                raise ClientError(f"{self.note}: connection lost: {lost}")
            if self.client._closed:
                raise ClientError(f"{self.note}: not connected (closed by the client)")

        def __exit__(self, kind, exc, tb) -> bool:
            if exc is None or isinstance(exc, (ClientError, Unsupported, ValueError)):
                return False
            if isinstance(exc, SendException):
                outcome = _OUTCOMES.get(exc.state, str(exc.state))
                raise ClientError(f"{self.note}: the broker settled it as {outcome}, not accepted") from None
            if isinstance(exc, Timeout):
                raise ClientError(f"{self.note}: no answer within {self.client.timeout}s; "
                                  "the outcome is unknown") from None
            if isinstance(exc, (ProtonException, ConnectionException, OSError)):
                lost = "connection lost: " if self.client._conn.disconnected else ""
                self.client.exchange.note(f"-- {self.note}: {lost}{_describe(exc)}")
                raise ClientError(f"{self.note}: {lost}{_describe(exc)}") from None
            return False

    def _errors(self, note: str) -> "AmqpClient._Errors":
        return AmqpClient._Errors(self, note)

    def _flush(self, note: str) -> None:
        """Process I/O until proton has written everything pending (dispositions, flows): AMQP
        does not answer a settled disposition, so "on the wire" is as sure as it gets."""
        transport = self._conn.conn.transport
        try:
            self._conn.wait(lambda: transport is None or transport.pending() <= 0, timeout=self.timeout, msg=note)
        except Timeout:
            raise ClientError(f"{note}: could not write to the broker within {self.timeout}s") from None

    # ------------------------------------------------------------------ producing

    def send(self, destination: str, body: bytes | str = b"", properties: dict[str, object] | None = None, *,
             persistent: bool = True, priority: int | None = None, ttl_ms: int | None = None,
             group_id: str | None = None, group_seq: int | None = None,
             transaction: str | None = None) -> None:
        self._check_parameters(destination)
        if transaction:
            raise Unsupported("this adapter has no AMQP transactions (coordinator links)")
        address = amqp_address(destination, self.address_style)
        # bytes go in a Data section (a JMS BytesMessage), text in an AmqpValue string (a TextMessage).
        message = Message(body=body, inferred=isinstance(body, (bytes, bytearray)), durable=persistent,
                          properties=dict(properties or {}))
        if priority is not None:
            message.priority = priority
        if ttl_ms is not None:
            message.ttl = ttl_ms / 1000.0  # proton takes seconds
        if group_id is not None:
            message.group_id = group_id
        if group_seq is not None:
            # AMQP group-sequence is a uint (sequence-no); JMS's -1 ("close the group") travels as
            # 0xFFFFFFFF, which ActiveMQ and Artemis read back as a signed int.
            message.group_sequence = group_seq & 0xFFFFFFFF
        note = (f"TRANSFER {address} durable={persistent} priority={priority} ttl={ttl_ms} group={group_id}/{group_seq} "
                f"props={properties or {}} body={preview(body)}")
        with self._errors(note):
            sender = self._senders.get(address)
            if sender is None:
                sender = self._senders[address] = self._conn.create_sender(address)
            self.exchange.note(f"-> {note}")
            sender.send(message, timeout=self.timeout)
            self.exchange.note("<- accepted")

    # ------------------------------------------------------------------ consuming

    def _check_parameters(self, destination: str) -> None:
        if self.destination_parameters and "?" in destination:
            raise Unsupported(f"destination parameters ({destination.partition('?')[2]}) over AMQP on this broker: "
                              f"{self.destination_parameters}")

    def subscribe(self, destination: str, *, ack: AckMode = "auto", prefetch: int | None = None,
                  selector: str | None = None, durable_name: str | None = None,
                  exclusive: bool = False, priority: int | None = None,
                  headers: dict[str, str] | None = None) -> AmqpSubscription:
        if ack not in ("auto", "client", "client-individual"):
            raise ValueError(f"ack mode {ack!r} is not one of auto, client, client-individual")
        self._check_parameters(destination)
        if exclusive:
            raise Unsupported("AMQP 1.0 has no standard way to ask for an exclusive consumer")
        if headers:
            raise Unsupported(f"AMQP attach has no subscription headers ({sorted(headers)})")
        address = amqp_address(destination, self.address_style)
        options: list = []
        if selector:
            options.append(Selector(selector, name="jms-selector"))
        if durable_name:
            options.append(DurableSubscription())
        if priority is not None:
            options.append(_LinkProperties({symbol("priority"): int32(priority)}))
        name = durable_name or f"{self.client_id}-sub-{next(self._names)}"
        sub = AmqpSubscription(self, destination, ack, prefetch, durable_name)
        note = f"ATTACH receiver {name} {address} ack={ack} prefetch={prefetch} selector={selector!r} durable={bool(durable_name)}"
        with self._errors(note):
            self.exchange.note(f"-> {note}")
            sub._open(address, name, options)
        self._subscriptions.add(sub)
        return sub

    def unsubscribe_durable(self, destination: str, durable_name: str) -> None:
        """Close (not detach) the durable subscription's link: the broker removes it. An active
        one on this connection is closed; otherwise it is attached again by name first."""
        active = [s for s in self._subscriptions if s.durable_name == durable_name]
        note = f"remove durable {durable_name} {destination}"
        with self._errors(note):
            self.exchange.note(f"-> {note}")
            if active:
                for sub in active:
                    sub.closed = True
                    self._subscriptions.discard(sub)
                    sub.receiver.close()
                return
            sub = AmqpSubscription(self, destination, "client-individual", 0, durable_name)
            sub._open(amqp_address(destination, self.address_style), durable_name, [DurableSubscription()])
            sub.receiver.close()

    # ------------------------------------------------------------------ not here

    def begin(self) -> str:
        raise Unsupported("this adapter has no AMQP transactions (coordinator links)")

    def commit(self, transaction: str) -> None:
        raise Unsupported("this adapter has no AMQP transactions (coordinator links)")

    def abort(self, transaction: str) -> None:
        raise Unsupported("this adapter has no AMQP transactions (coordinator links)")

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        """Close the connection (links end with it; durable subscriptions stay). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.exchange.note("-> CLOSE")
        try:
            self._conn.close()
        except Exception as exc:  # noqa: BLE001 - teardown of a connection that may be gone already
            self.exchange.note(f"-- close: {_describe(exc)}")

    def __enter__(self) -> "AmqpClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AmqpClient({self.address[0]}:{self.address[1]}, client_id={self.client_id!r})"


def received_from_message(message: Message, destination: str, tag: str, sub: AmqpSubscription | None) -> Received:
    body = message.body
    if body is None:
        data = b""
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)  # copy now: a Data section is a view into the Message
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = repr(body).encode()
    properties = dict(message.properties or {})
    if message.group_id is not None:
        properties[GROUP_ID] = message.group_id
        if message.group_sequence:
            sequence = message.group_sequence
            properties[GROUP_SEQ] = sequence - (1 << 32) if sequence >= 1 << 31 else sequence  # back to JMS's int
    headers = {
        "delivery-tag": tag,
        "address": message.address,
        "subject": message.subject,
        "correlation-id": message.correlation_id,
        "reply-to": message.reply_to,
        # proton reports an absent content-type as the symbol "None"
        "content-type": None if message.content_type in (None, "None") else str(message.content_type),
        "delivery-count": message.delivery_count,
        "first-acquirer": message.first_acquirer,
        "body-type": type(body).__name__,
        "annotations": {str(k): v for k, v in (message.annotations or {}).items()},
    }
    return Received(
        body=data,
        destination=canonical_address(message.address, destination),
        properties=properties,
        message_id=None if message.id is None else str(message.id),
        redelivered=message.delivery_count > 0,
        # JMSXDeliveryCount counts this delivery too; AMQP's delivery-count only earlier failed ones.
        delivery_count=message.delivery_count + 1,
        priority=message.priority,
        persistent=message.durable,
        headers=headers,
        subscription=sub,
    )
