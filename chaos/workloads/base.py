"""What the workloads share: process ids, pacing, message values, and how a client error maps
onto ok / fail / info.

Never guess an outcome (issue 5, "sends whose outcome is unknown are info"): only an error that
says the broker refused the operation, or that nothing was written, is ``fail``; a timeout or a
lost connection is ``info``, and the process that saw it retires (chaos/history.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable

from conformance.clients import Client, ClientError, Received, Unsupported
from conformance.clients.failover import InDoubt

ClientFactory = Callable[[], Client]

#: message properties every workload message carries (history value fields, on the wire)
ID, PRODUCER, SEQ = "bc_id", "bc_producer", "bc_seq"
#: the message group a grouped workload sent the message in, as our own property too: a broker
#: may group by JMSXGroupID without echoing it on delivery (ActiveMQ 5.17's STOMP MESSAGE frames,
#: REFERENCES.md; Artemis 2.40's over STOMP, seen in the clustered-grouping run), and the checkers
#: need to know which group each delivery belonged to
GROUP = "bc_group"

# Phrases the adapters (conformance/clients/*) use when the broker refused the operation or it
# was never written: the outcome is known. Everything else is in doubt.
_REFUSED = ("answered ERROR", "refused it", "settled it as", "not connected", "could not queue it")
# ...unless the refusal reports a failed write to the broker's storage: the message may be in the
# journal already, with only the sync failing. Seen on Artemis 2.40 when its NFS lease expired:
# ERROR "Error sending reply: ... IOException during checkSync ...: Input/output error" for a SEND
# whose message the backup then delivered (chaos/experiments/artemis-nfs-lease-expiry.toml).
# ActiveMQ 5.17 in the same spot answers "SuppressReplyException: ShutdownBrokerInitiated" (its
# DefaultIOExceptionHandler stopping the broker over the journal's IOException, which the ERROR
# frame's first line does not name), and its slave then delivered that message too.
_STORAGE_FAILURE = ("IOException", "Input/output error", "I/O error", "ShutdownBrokerInitiated")


def outcome_of(exc: BaseException) -> str:
    """``fail`` when the error proves the operation did not happen, else ``info``."""
    if isinstance(exc, Unsupported):
        return "fail"  # the adapter refused before writing anything
    if isinstance(exc, InDoubt):
        return "info"  # its text may quote an earlier refusal; what it says is that it is in doubt
    text = str(exc)
    if isinstance(exc, ClientError) and any(p in text for p in _REFUSED) and not any(
            p in text for p in _STORAGE_FAILURE):
        return "fail"
    return "info"


class ProcessIds:
    """Jepsen-style process numbers: a worker takes a new one when its process retires."""

    def __init__(self) -> None:
        self._next = itertools.count()
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            return next(self._next)


class Pacer:
    """At most ``rate`` operations per second for one worker (None: as fast as it can);
    waits on the stop event so stop() is prompt."""

    def __init__(self, rate: float | None, stop: threading.Event) -> None:
        self.interval = 0.0 if not rate else 1.0 / rate
        self.stop = stop
        self.next_at = time.monotonic()

    def wait(self) -> bool:
        """False once stopped."""
        if self.interval:
            delay = self.next_at - time.monotonic()
            self.next_at = max(self.next_at + self.interval, time.monotonic() - self.interval)
            if delay > 0:
                return not self.stop.wait(delay)
        return not self.stop.is_set()


def received_value(message: Received, **extra) -> dict:
    """A received message as a history value: the workload's own fields when present (a foreign
    message keeps its body, so a checker can call it unexpected)."""
    props = message.properties
    value: dict = {"id": props.get(ID), "producer": _int(props.get(PRODUCER)), "seq": _int(props.get(SEQ)),
                   "destination": message.destination}
    group = message.group_id if message.group_id is not None else props.get(GROUP)
    if group is not None:
        value["group"] = str(group)
    if value["id"] is None:
        value["body"] = message.text[:200]
    if message.redelivered:
        value["redelivered"] = True
    value.update(extra)
    return value


def _int(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def close_quietly(client: Client | None) -> None:
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - the connection may be gone already; nothing to save
            pass


def endpoint_of(client: Client | None) -> str | None:
    """``host:port`` of the broker ``client`` is connected to now: a failover client's current
    endpoint (``client.uri``), else a plain client's own address; None when it does not say."""
    if client is None:
        return None
    uri = getattr(client, "uri", None)
    if uri is not None:
        return f"{uri.host}:{uri.port}"
    address = getattr(client, "address", None)
    if isinstance(address, tuple) and len(address) == 2:
        return f"{address[0]}:{address[1]}"
    return None


class NodeNames:
    """Which node served an operation, for the history's ``node`` field (issue 18: the
    split-brain checker needs it): the node's name when the experiment gave the map of client
    addresses to node names, else the ``host:port`` the client is connected to, else None.

    Read when the operation completes: a failover client that reconnected while the operation
    was in flight names the broker that answered, not the one it was sent to first."""

    def __init__(self, names: dict[str, str] | None = None) -> None:
        self.names = dict(names or {})

    def __call__(self, client: Client | None) -> str | None:
        try:
            endpoint = endpoint_of(client)
        except Exception:  # noqa: BLE001 - naming the node must never stop the workload
            return None
        if endpoint is None:
            return None
        return self.names.get(endpoint, endpoint)
