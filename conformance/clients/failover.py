"""The failover transport for our clients: ``failover:(uri1,...,uriN)?options``.

Behaviour follows the A-MQ 6.2 "Fault Tolerant Messaging" guide, chapter 2 ("A-MQ FT"), and,
where the guide is silent, ActiveMQ Classic's ``FailoverTransport`` ("ActiveMQ"):

- An *attempt* is one pass over the connect list (ActiveMQ tries every URI of the list in turn
  without pausing, then waits); the wait before reconnect attempt k is
  ``initialReconnectDelay * backOffMultiplier**(k-1)`` capped at ``maxReconnectDelay``
  (A-MQ FT Table 2.1), or ``initialReconnectDelay`` every time without exponential back-off.
  ActiveMQ's code waits that delay twice per failed pass (before the pass and after it); we
  follow the table's description, one wait per attempt.
- Limits (A-MQ FT Table 2.1): after a connection was lost, ``maxReconnectAttempts`` passes
  (-1 forever, 0 = never fail over). At start-up the first pass is free and
  ``startupMaxReconnectAttempts`` retries follow (-1 = fall back to maxReconnectAttempts, as
  ActiveMQ's calculateReconnectAttemptLimit does; which is unlimited by default).
- Ordering (A-MQ FT 2.1.1 and ActiveMQ getConnectList): the URIs are shuffled when
  ``randomize`` is true, else walked left to right; the URI that just failed goes last.
  ``priorityBackup`` (A-MQ FT 2.1.3) puts the priority URIs first and, while connected elsewhere,
  keeps probing them and switches back as soon as one answers.
- ``timeout`` (ms) bounds how long an operation waits for a reconnect; ActiveMQ treats 0 like -1,
  we follow the table (0 = do not wait).
- ``updateURIsURL`` (A-MQ FT Table 2.1): before each connect pass the client reads the file's
  comma-separated URIs and adds those it does not know to its list (ActiveMQ's doReconnect reads
  it on every reconnect and merges it the way broker-sent updates are merged); a file that cannot
  be read is noted in the exchange log and the pass goes on with the list it has.
- ``trackMessages`` replays sends whose receipt was cut off by the failure, up to
  ``maxCacheSize`` bytes in flight; without it (or past the cache) such a send raises `InDoubt`,
  because it may or may not have reached the broker (QPID-5975: replaying can duplicate).

Threads: operations run on the caller's thread; one monitor thread per client notices lost
connections (polling ``inner.connected``), reconnects, restores subscriptions, and probes priority
URIs. Operations that meet a lost connection wait on a Condition for the monitor to finish.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from .direct import connect as connect_inner
from .base import AckMode, Client, ClientError, ConnectFailed, ExchangeLog, NotSent, Received
from .failover_uri import (BrokerURI, FailoverOptions, FailoverURI, parse_broker_uri, parse_failover_uri,
                           read_update_uris)

log = logging.getLogger(__name__)

__all__ = [
    "FailoverClient", "FailoverExhausted", "FailoverTimeout", "InDoubt", "ReconnectSchedule",
    "TransportEvent", "UriOrder", "connect_failover",
]

#: how a suite names this client as the subject of the client statements it checks with it
#: (``@pytest.mark.client_subject``, the matrix column ``client: <this>``; conformance/matrix.py)
CLIENT_SUBJECT = "brokerconf failover (python)"
CONNECTION_ERRORS = (ClientError, ConnectFailed, OSError)


class InDoubt(ClientError):
    """The connection failed while the broker's confirmation was outstanding: the operation may
    or may not have taken effect. A chaos history records it as ``info``, never as ok or fail."""

    def __init__(self, message: str, *, operation: str, destination: str | None = None,
                 properties: dict | None = None) -> None:
        super().__init__(message)
        self.operation = operation
        self.destination = destination
        self.properties = dict(properties or {})


class FailoverTimeout(ClientError):
    """No broker connection came back within the ``timeout`` option; the operation was not sent."""


class FailoverExhausted(ConnectFailed):
    """Every reconnect attempt allowed by maxReconnectAttempts / startupMaxReconnectAttempts failed."""


@dataclass(frozen=True)
class TransportEvent:
    """A transport state change, for the chaos history. ``time`` is the injected clock's reading
    (``time.monotonic`` by default), ``wall_time`` is ``time.time()``."""

    kind: str  # interrupted | resumed | switched | failed | warning
    time: float
    wall_time: float
    uri: str | None = None
    reason: str = ""
    attempts: int = 0


# --------------------------------------------------------------------------- pure policy

class ReconnectSchedule:
    """Delays and attempt limits of A-MQ FT Table 2.1, with no I/O of its own.

    ``run()`` drives a connect function with an injectable ``sleep`` (a fake clock in tests)."""

    def __init__(self, options: FailoverOptions) -> None:
        self.options = options

    def delay_ms(self, attempt: int) -> float:
        """Wait before reconnect attempt ``attempt`` (1-based)."""
        o = self.options
        if attempt < 1:
            return 0.0
        if not o.use_exponential_back_off:
            return float(o.initial_reconnect_delay)
        delay = float(o.initial_reconnect_delay)
        for _ in range(attempt - 1):
            delay *= o.back_off_multiplier
            if delay >= o.max_reconnect_delay:
                return float(o.max_reconnect_delay)
        return min(delay, float(o.max_reconnect_delay))

    def limit(self, *, startup: bool) -> int:
        """How many reconnect attempts are allowed (-1 = unlimited)."""
        o = self.options
        if startup and o.startup_max_reconnect_attempts != -1:
            return o.startup_max_reconnect_attempts
        return o.max_reconnect_attempts

    def may_attempt(self, attempt: int, *, startup: bool) -> bool:
        """Whether reconnect attempt ``attempt`` (1-based; 0 = the start-up pass) may run."""
        if startup and attempt == 0:
            return True
        limit = self.limit(startup=startup)
        return limit == -1 or attempt <= limit

    def should_warn(self, failures: int) -> bool:
        n = self.options.warn_after_reconnect_attempts
        return n > 0 and failures > 0 and failures % n == 0

    def delays(self, n: int, *, startup: bool = False) -> list[float]:
        """The waits before each of the first ``n`` passes (for tests and docs)."""
        first = 0 if startup else 1
        return [self.delay_ms(a) if a else 0.0 for a in range(first, first + n)
                if self.may_attempt(a, startup=startup)]

    def run(self, attempt_pass: Callable[[int], object | None], *, startup: bool,
            sleep: Callable[[float], None] = time.sleep,
            cancelled: Callable[[], bool] = lambda: False,
            on_warning: Callable[[int], None] = lambda failures: None) -> object:
        """Call ``attempt_pass(attempt)`` until it returns something, sleeping per the schedule.

        Returns what the pass returned; raises FailoverExhausted when the limit is reached and
        InterruptedError when ``cancelled()`` turns true (the client was closed)."""
        attempt = 0 if startup else 1
        failures = 0
        while True:
            if not self.may_attempt(attempt, startup=startup):
                raise FailoverExhausted(
                    f"gave up after {failures} failed connect pass(es) "
                    f"({'startupMaxReconnectAttempts' if startup else 'maxReconnectAttempts'}="
                    f"{self.limit(startup=startup)}); start a broker or raise the limit")
            delay = self.delay_ms(attempt)
            if delay > 0:
                sleep(delay / 1000.0)
            if cancelled():
                raise InterruptedError("reconnect cancelled: the client was closed")
            result = attempt_pass(attempt)
            if result is not None:
                return result
            failures += 1
            if self.should_warn(failures):
                on_warning(failures)
            attempt += 1


class UriOrder:
    """Which URI to try first (A-MQ FT 2.1.1 randomize, 2.1.3 priority backup)."""

    def __init__(self, failover: FailoverURI, rng: random.Random | None = None) -> None:
        self.uris = list(failover.uris)
        self.options = failover.options
        self.priority = list(failover.priority_uris())
        self.rng = rng or random.Random()

    def is_priority(self, uri: BrokerURI | None) -> bool:
        return uri is not None and any(uri.same_endpoint(p) for p in self.priority)

    def add(self, uris) -> list[BrokerURI]:
        """Add the endpoints of ``uris`` not in the list yet (updateURIsURL); those added."""
        added = [u for u in uris if not any(u.same_endpoint(known) for known in self.uris)]
        self.uris.extend(added)
        return added

    def connect_list(self, failed: BrokerURI | None = None) -> list[BrokerURI]:
        order = [u for u in self.uris if failed is None or not u.same_endpoint(failed)]
        if self.options.randomize:
            self.rng.shuffle(order)
        if self.options.priority_backup:
            # Priority URIs first, in the order priorityURIs lists them (A-MQ FT Example 2.6).
            rank = {i: n for n, p in enumerate(self.priority) for i, u in enumerate(order) if u.same_endpoint(p)}
            order = ([order[i] for i in sorted(rank, key=rank.get)]
                     + [u for i, u in enumerate(order) if i not in rank])
        removed = len(order) < len(self.uris)
        if removed and failed is not None:
            order.append(next(u for u in self.uris if u.same_endpoint(failed)))
        return order

    def priority_candidates(self, current: BrokerURI | None) -> list[BrokerURI]:
        """Priority URIs worth probing while connected to ``current`` (ActiveMQ: once on any
        priority URI the client stays)."""
        if not self.options.priority_backup or self.is_priority(current):
            return []
        return [u for p in self.priority for u in self.uris if u.same_endpoint(p)]


# --------------------------------------------------------------------------- the client

@dataclass
class _SubscribeArgs:
    destination: str
    ack: AckMode
    options: dict = field(default_factory=dict)


class FailoverSubscription:
    """A subscription that survives failover: re-created on each new connection with the same
    ack mode, selector and durable name. Messages delivered on an old connection but not
    acknowledged there are redelivered by the broker; acking them raises ClientError."""

    def __init__(self, client: "FailoverClient", args: _SubscribeArgs) -> None:
        self.client = client
        self.args = args
        self.destination = args.destination
        self.ack_mode = args.ack
        # As the protocol's own subscriptions say (known before any connection exists).
        self.ack_confirmed = client.protocol == "stomp"
        self.inner = None
        self.generation = -1
        self.closed = False

    def receive(self, timeout: float = 5.0) -> Received | None:
        deadline = self.client._clock() + timeout
        while True:
            if not self.client._wait_connected(max(deadline - self.client._clock(), 0.0), raise_timeout=False):
                return None
            inner, generation = self.client._current_sub(self)
            remaining = deadline - self.client._clock()
            try:
                return inner.receive(max(remaining, 0.0))
            except CONNECTION_ERRORS as exc:
                if not self.client._connection_failed(generation, exc):
                    raise
                if not self.client._wait_connected(deadline - self.client._clock(), raise_timeout=False):
                    return None

    def receive_n(self, n: int, timeout: float = 5.0) -> list[Received]:
        deadline = self.client._clock() + timeout
        got: list[Received] = []
        while len(got) < n:
            message = self.receive(max(deadline - self.client._clock(), 0.0))
            if message is None:
                break
            got.append(message)
        return got

    def drain(self, quiet: float = 0.5) -> list[Received]:
        got: list[Received] = []
        while (message := self.receive(quiet)) is not None:
            got.append(message)
        return got

    def _settle(self, what: str, message: Received) -> None:
        inner, generation = self.client._current_sub(self, self.client._operation_timeout())
        if message.subscription is not inner:
            raise ClientError(f"cannot {what} message {message.message_id}: it was delivered on a connection "
                              "lost since; the broker redelivers it on the new connection")
        try:
            getattr(inner, what)(message)
        except CONNECTION_ERRORS as exc:
            lost = self.client._connection_failed(generation, exc)
            if lost:
                raise InDoubt(f"{what.upper()} of {message.message_id}: connection lost before the "
                              f"confirmation ({exc}); the broker may redeliver it", operation=what,
                              destination=self.destination) from None
            raise

    def ack(self, message: Received) -> None:
        self._settle("ack", message)

    def nack(self, message: Received) -> None:
        self._settle("nack", message)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.client._subscriptions.remove(self)
        inner = self.inner
        if inner is not None and self.client._inner is not None and self.client._inner.connected:
            try:
                inner.close()
            except CONNECTION_ERRORS as exc:
                self.client.exchange.note(f"-- unsubscribe {self.destination} not confirmed: {exc}")


class FailoverClient:
    """A `Client` over a list of brokers, reconnecting per A-MQ FT chapter 2."""

    def __init__(self, failover: FailoverURI | str, protocol: str, *,
                 listener: Callable[[TransportEvent], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None, connect: Callable[..., Client] = connect_inner,
                 monitor_interval: float = 0.02, client_id: str | None = None, **connect_options) -> None:
        self.failover = parse_failover_uri(failover) if isinstance(failover, str) else failover
        self.options = self.failover.options
        self.protocol = protocol
        self.schedule = ReconnectSchedule(self.options)
        self.order = UriOrder(self.failover, rng)
        self.exchange = ExchangeLog()
        self.events: list[TransportEvent] = []
        self.listener = listener
        # Same client id on every broker: durable subscriptions and MQTT sessions key on it.
        self.client_id = client_id or f"brokerconf-{uuid.uuid4().hex[:12]}"
        self._connect = connect
        self._connect_options = connect_options
        self._clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._wake = threading.Event()
        self._sleep = sleep or self._interruptible_sleep
        self._monitor_interval = monitor_interval
        self._inner: Client | None = None
        self._backup: tuple[BrokerURI, Client] | None = None
        self.uri: BrokerURI | None = None
        self.generation = 0
        self._lost: str | None = None  # reason, while reconnecting
        self._failure: Exception | None = None  # reconnecting gave up
        self._closed = False
        self._subscriptions: list[FailoverSubscription] = []
        self._in_flight_bytes = 0
        self._transactions: dict[str, int] = {}
        self._connect_first()
        self._monitor = threading.Thread(target=self._monitor_loop, name=f"failover-{self.client_id}", daemon=True)
        self._monitor.start()

    # ------------------------------------------------------------------ events

    def _emit(self, kind: str, uri: BrokerURI | None = None, reason: str = "", attempts: int = 0) -> None:
        event = TransportEvent(kind, self._clock(), time.time(), str(uri) if uri else None, reason, attempts)
        self.events.append(event)
        self.exchange.note(f"-- transport {kind} {event.uri or ''} {reason}".rstrip())
        if kind in ("warning", "failed"):
            log.warning("failover %s: %s", kind, reason)
        if self.listener is not None:
            try:
                self.listener(event)
            except Exception:  # noqa: BLE001 - a broken listener must not break the transport
                log.exception("failover listener raised on %s", event)

    # ------------------------------------------------------------------ connecting

    def _interruptible_sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)

    def _open(self, uri: BrokerURI) -> Client:
        options = {**self._connect_options, **uri.connect_options(self.protocol)}
        protocol = uri.protocol or self.protocol
        if protocol != self.protocol:
            raise ValueError(f"{uri} speaks {protocol}, but this client speaks {self.protocol}: "
                             "use tcp://HOST:PORT or a matching scheme")
        return self._connect(uri.host, uri.port, protocol, client_id=self.client_id, **options)

    def _one_pass(self, failed: BrokerURI | None) -> Callable[[int], tuple[BrokerURI, Client] | None]:
        def attempt(number: int) -> tuple[BrokerURI, Client] | None:
            backup = self._take_backup()
            if backup is not None:
                return backup
            self._read_update_uris()
            self._hear_announcements()
            for uri in self.order.connect_list(failed):
                if self._closed:
                    return None
                try:
                    return uri, self._open(uri)
                except CONNECTION_ERRORS as exc:
                    self.exchange.note(f"-- connect {uri} (attempt {number}) failed: {exc}")
            return None
        return attempt

    def _hear_announcements(self) -> None:
        """A multicast agent (A-MQ FT 2.2.2.4): add the services announced in its group. Listens for
        three of ActiveMQ's 500 ms announcement intervals, so every live broker is heard."""
        if not self.failover.agent:
            return
        from .multicast_agent import listen

        try:
            heard = listen(self.failover.agent, 1.5)
        except OSError as exc:
            self.exchange.note(f"-- discovery {self.failover.agent}: cannot listen: {exc}")
            return
        uris = []
        for service in heard:
            # the query of an announced URI holds the connector's own, broker-side options (ActiveMQ
            # announces e.g. stomp://h:p?transport.closeAsync=false): a client takes its address
            address = service.split("?", 1)[0]
            try:
                uris.append(parse_broker_uri(address, list(self.failover.nested)))
            except ValueError as exc:
                self.exchange.note(f"-- discovery {self.failover.agent}: announced {service!r} unusable: {exc}")
        added = self.order.add(uris)
        if added:
            self.exchange.note(f"-- discovery {self.failover.agent} heard {', '.join(map(str, added))}")

    def _read_update_uris(self) -> None:
        url = self.options.update_uris_url
        if not url:
            return
        try:
            added = self.order.add(read_update_uris(url))
        except (OSError, ValueError) as exc:
            self.exchange.note(f"-- updateURIsURL {url} not read: {exc}")
            return
        if added:
            self.exchange.note(f"-- updateURIsURL {url} added {', '.join(map(str, added))}")

    def _connect_first(self) -> None:
        try:
            uri, inner = self.schedule.run(self._one_pass(None), startup=True, sleep=self._sleep,
                                           cancelled=lambda: self._closed, on_warning=self._warn)
        except FailoverExhausted as exc:
            listed = ", ".join(map(str, self.order.uris)) or "no broker"
            where = f" (heard in {self.failover.agent})" if self.failover.agent else ""
            raise FailoverExhausted(f"could not connect to any of {listed}{where}: {exc}") from None
        self._install(uri, inner)
        self._emit("resumed", uri, "connected")

    def _warn(self, failures: int) -> None:
        self._emit("warning", None, f"no connection after {failures} attempt(s); still retrying", failures)

    def _install(self, uri: BrokerURI, inner: Client) -> None:
        with self._cond:
            self._inner = inner
            self.uri = uri
            self.generation += 1
            self._lost = None
            self._cond.notify_all()

    def _take_backup(self) -> tuple[BrokerURI, Client] | None:
        backup, self._backup = self._backup, None
        if backup is not None and getattr(backup[1], "connected", False):
            return backup
        return None

    # ------------------------------------------------------------------ failure handling

    def _connection_failed(self, generation: int, exc: BaseException) -> bool:
        """An operation on connection ``generation`` failed with ``exc``. Returns True when the
        connection is gone (the monitor reconnects), False when the broker refused while the
        connection stayed up (the caller re-raises)."""
        with self._cond:
            if generation != self.generation:
                return True
            inner = self._inner
            if inner is not None and getattr(inner, "connected", False) and not isinstance(exc, (OSError, NotSent)):
                return False
            if self._lost is None:
                self._lost = str(exc)
                self._wake.set()
                self._cond.notify_all()
            return True

    def _wait_connected(self, timeout: float | None, *, raise_timeout: bool = True) -> bool:
        """Wait until connected; False (or FailoverTimeout) after ``timeout`` seconds (None = forever)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise ClientError("the failover client is closed")
                if self._failure is not None:
                    raise FailoverExhausted(f"reconnecting gave up: {self._failure}")
                if self._lost is None and self._inner is not None:
                    return True
                remaining = None if deadline is None else deadline - self._clock()
                if remaining is not None and remaining <= 0:
                    if raise_timeout:
                        raise FailoverTimeout(f"no broker connection within timeout={self.options.timeout} ms "
                                              f"(lost: {self._lost}); the operation was not sent")
                    return False
                self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))

    def _operation_timeout(self) -> float | None:
        return None if self.options.timeout < 0 else self.options.timeout / 1000.0

    def _current(self) -> tuple[Client, int]:
        self._wait_connected(self._operation_timeout())
        with self._cond:
            return self._inner, self.generation

    def _current_sub(self, sub: FailoverSubscription, timeout: float | None = None):
        """The subscription's live inner subscription; `_restore` re-creates it before a new
        connection is installed, so once connected it belongs to the current connection."""
        self._wait_connected(timeout)
        with self._cond:
            return sub.inner, sub.generation

    # ------------------------------------------------------------------ monitor

    def _monitor_loop(self) -> None:
        try:
            self._monitor_rounds()
        except Exception as exc:  # noqa: BLE001 - reported to every waiting operation, not swallowed
            # Without the monitor nobody reconnects: a consumer would see only empty receives,
            # forever and without an error (the container run of experiment 2 once lost a
            # consumer that way, to an exception the STOMP adapter did not translate). Failing the
            # client turns that into an error its operations raise, so the caller can replace it.
            log.exception("failover monitor of %s stopped", self.client_id)
            self._give_up(self.uri, f"the failover monitor stopped on an unexpected {exc!r} "
                                    "(a bug in a client adapter: report it with the exchange log); open a new client")

    def _monitor_rounds(self) -> None:
        priority_attempt, next_probe = 0, None
        while not self._closed:
            self._wake.wait(self._monitor_interval)
            self._wake.clear()
            if self._closed:
                return
            with self._cond:
                inner, lost = self._inner, self._lost
                if lost is None and inner is not None and not getattr(inner, "connected", True):
                    self._lost = lost = "the connection to the broker was lost"
            if lost is not None:
                self._reconnect(lost)
                priority_attempt, next_probe = 0, None
            elif self.order.priority_candidates(self.uri):
                # A-MQ FT 2.1.3: keep trying the priority broker, backing off like reconnects do.
                if next_probe is None:
                    priority_attempt = 1
                    next_probe = self._clock() + self.schedule.delay_ms(priority_attempt) / 1000.0
                elif self._clock() >= next_probe:
                    if self._probe_priority():
                        priority_attempt, next_probe = 0, None
                    else:
                        priority_attempt += 1
                        next_probe = self._clock() + self.schedule.delay_ms(priority_attempt) / 1000.0
            elif self.options.backup and self._backup is None and len(self.failover.uris) > 1:
                self._build_backup()

    def _reconnect(self, reason: str) -> None:
        failed, old = self.uri, self._inner
        self._emit("interrupted", failed, reason)
        self._close_quietly(old)
        if self.options.max_reconnect_attempts == 0:
            self._give_up(failed, "maxReconnectAttempts=0: failover is disabled")
            return
        try:
            uri, inner = self.schedule.run(self._one_pass(failed), startup=False, sleep=self._sleep,
                                           cancelled=lambda: self._closed, on_warning=self._warn)
        except InterruptedError:
            return
        except FailoverExhausted as exc:
            self._give_up(failed, str(exc))
            return
        try:
            self._restore(inner)
        except CONNECTION_ERRORS as exc:
            self.exchange.note(f"-- restoring subscriptions on {uri} failed: {exc}")
            self._close_quietly(inner)
            self._wake.set()  # try again on the next monitor round
            return
        self._install(uri, inner)
        self._emit("resumed", uri, f"reconnected after: {reason}")

    def _give_up(self, failed: BrokerURI | None, reason: str) -> None:
        with self._cond:
            self._failure = FailoverExhausted(reason)
            self._cond.notify_all()
        self._emit("failed", failed, reason)

    def _restore(self, inner: Client) -> None:
        """Re-create every subscription on ``inner`` (ActiveMQ ConnectionStateTracker.restore)."""
        generation = self.generation + 1
        for sub in list(self._subscriptions):
            sub.inner = inner.subscribe(sub.args.destination, ack=sub.args.ack, **sub.args.options)
            sub.generation = generation

    def _probe_priority(self) -> bool:
        for uri in self.order.priority_candidates(self.uri):
            try:
                inner = self._open(uri)
            except CONNECTION_ERRORS:
                continue
            try:
                self._restore_switch(uri, inner)
            except CONNECTION_ERRORS as exc:
                self.exchange.note(f"-- switching to priority {uri} failed: {exc}")
                self._close_quietly(inner)
                continue
            return True
        return False

    def _restore_switch(self, uri: BrokerURI, inner: Client) -> None:
        # A-MQ FT 2.1.3: the client moves back to the priority broker by itself. The old
        # connection closes; what it delivered but did not get acknowledged is redelivered.
        with self._cond:
            old, previous = self._inner, self.uri
            self._restore(inner)
            self._install(uri, inner)
        self._close_quietly(old)
        self._emit("switched", uri, f"back to priority URI from {previous}")

    def _build_backup(self) -> None:
        for uri in self.order.connect_list(self.uri):
            if self.uri is not None and uri.same_endpoint(self.uri):
                continue
            try:
                self._backup = (uri, self._open(uri))
                self.exchange.note(f"-- backup connection ready to {uri}")
            except CONNECTION_ERRORS:
                continue
            return

    def _close_quietly(self, inner: Client | None) -> None:
        if inner is None:
            return
        try:
            inner.close()
        except Exception as exc:  # noqa: BLE001 - the connection is already broken
            self.exchange.note(f"-- closing the old connection: {exc!r}")

    # ------------------------------------------------------------------ Client API

    def send(self, destination: str, body: bytes | str = b"", properties: dict[str, object] | None = None, *,
             transaction: str | None = None, **kwargs) -> None:
        size = len(body.encode() if isinstance(body, str) else body)
        while True:
            inner, generation = self._current()
            if transaction is not None:
                self._check_transaction(transaction, generation)
            if not getattr(inner, "connected", True):
                # Gone before anything was written: not in doubt, just wait for the reconnect.
                self._connection_failed(generation, ConnectionError("not connected"))
                continue
            tracked = (self.options.track_messages and transaction is None
                       and self._in_flight_bytes + size <= self.options.max_cache_size)
            if tracked:
                self._in_flight_bytes += size
            try:
                inner.send(destination, body, properties, transaction=transaction, **kwargs)
                return
            except NotSent as exc:
                # Never reached the broker, so nothing is in doubt: send it again once reconnected.
                if not self._connection_failed(generation, exc):
                    raise
                self.exchange.note(f"-- SEND to {destination} not written ({exc}); sending after reconnect")
            except CONNECTION_ERRORS as exc:
                if not self._connection_failed(generation, exc):
                    raise
                if not tracked:
                    why = ("trackMessages=false" if not self.options.track_messages else
                           "in a transaction" if transaction else f"over maxCacheSize={self.options.max_cache_size} bytes")
                    raise InDoubt(f"SEND to {destination}: connection lost before the broker confirmed it ({exc}); "
                                  f"not replayed ({why}), so it may or may not have arrived",
                                  operation="send", destination=destination, properties=properties) from None
                self.exchange.note(f"-- SEND to {destination} cut off ({exc}); replaying after reconnect")
            finally:
                if tracked:
                    self._in_flight_bytes -= size

    def subscribe(self, destination: str, *, ack: AckMode = "auto", **options) -> FailoverSubscription:
        sub = FailoverSubscription(self, _SubscribeArgs(destination, ack, options))
        while True:
            inner, generation = self._current()
            try:
                with self._cond:
                    if generation != self.generation:
                        continue
                    sub.inner = inner.subscribe(destination, ack=ack, **options)
                    sub.generation = generation
                    self._subscriptions.append(sub)
                return sub
            except CONNECTION_ERRORS as exc:
                if not self._connection_failed(generation, exc):
                    raise
                # Not registered yet: the monitor will not restore it, so subscribe again.

    def unsubscribe_durable(self, destination: str, durable_name: str) -> None:
        self._retrying(lambda inner: inner.unsubscribe_durable(destination, durable_name))

    def _retrying(self, call: Callable[[Client], object]) -> object:
        while True:
            inner, generation = self._current()
            try:
                return call(inner)
            except CONNECTION_ERRORS as exc:
                if not self._connection_failed(generation, exc):
                    raise

    def _check_transaction(self, transaction: str, generation: int) -> None:
        if self._transactions.get(transaction) != generation:
            raise ClientError(f"transaction {transaction} was begun on a connection lost since; the broker "
                              "rolled it back (ActiveMQ raises TransactionRolledBackException): begin a new one")

    def begin(self) -> str:
        while True:
            inner, generation = self._current()
            try:
                transaction = inner.begin()
            except CONNECTION_ERRORS as exc:
                if not self._connection_failed(generation, exc):
                    raise
                continue
            self._transactions[transaction] = generation
            return transaction

    def commit(self, transaction: str) -> None:
        inner, generation = self._current()
        self._check_transaction(transaction, generation)
        try:
            inner.commit(transaction)
        except CONNECTION_ERRORS as exc:
            if self._connection_failed(generation, exc):
                raise InDoubt(f"COMMIT {transaction}: connection lost before the confirmation ({exc})",
                              operation="commit") from None
            raise
        finally:
            self._transactions.pop(transaction, None)

    def abort(self, transaction: str) -> None:
        inner, generation = self._current()
        if self._transactions.pop(transaction, None) != generation:
            return  # the broker dropped it with the old connection: aborted either way
        try:
            inner.abort(transaction)
        except CONNECTION_ERRORS as exc:
            if not self._connection_failed(generation, exc):
                raise

    @property
    def connected(self) -> bool:
        with self._cond:
            return self._lost is None and self._inner is not None and not self._closed

    @property
    def backup_uri(self) -> BrokerURI | None:
        """The endpoint of the second connection held ready (``backup=true``), if one is open."""
        backup = self._backup
        return backup[0] if backup is not None else None

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._wake.set()
        if self._monitor is not threading.current_thread():
            self._monitor.join(10)
        self._close_quietly(self._inner)
        if self._backup is not None:
            self._close_quietly(self._backup[1])
            self._backup = None

    def __enter__(self) -> "FailoverClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FailoverClient({self.protocol}, on {self.uri}, generation {self.generation})"


def connect_failover(uri: str | FailoverURI, protocol: str, **options) -> FailoverClient:
    """Open a failover client: ``connect_failover("failover:(stomp://h:1,stomp://h:2)?randomize=false", "stomp")``.

    ``options`` go to `FailoverClient` (listener, clock, sleep, rng) and on to every inner
    `conformance.clients.connect` call (login, passcode, client_id, timeout...)."""
    return FailoverClient(uri, protocol, **options)
