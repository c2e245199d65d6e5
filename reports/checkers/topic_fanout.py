"""Topic fan-out: did every subscriber get every message published while it was subscribed?

A non-durable topic subscription receives the messages published while it exists; a slow
subscriber may lose the oldest of them when the broker has a pending-message limit (ActiveMQ
Classic, "Slow Consumer Handling": the limit strategies and the oldest-message eviction
default), and the broker counts those per subscription (same document, "Monitoring the Status
of Slow Consumers", the `discarded` statistic). This checker measures from the history what each
subscriber lost and, when given the broker's counters, whether the broker owns up to exactly that.

Definitions, over a history in file order (chaos/workloads/topic.py records it):
* subscriber: the ``subscriber`` (or ``consumer``) index carried by its received messages and by
  its drain's invoke value; a process that never carried one is reported as ``process-N``.
* window: one subscription, from a ``subscribe`` that completed ``ok`` until the same process
  reconnects, subscribes again, ends an operation in ``info`` (it retires), or drains. A window
  closed by an ``ok`` drain is *clean*; any other close is *cut* (the connection went away).
* in window: a send invoked after the window's subscribe completed. Sends completed ``ok`` are
  *acknowledged*; ``info`` sends only *may* have been published: receiving one is fine, missing
  one is not an error. A send whose outcome overlaps the subscribe (invoked before it completed)
  may or may not have matched the new subscription, so it counts as "may" too.
* expected: in a clean window, every acknowledged in-window send. In a cut window, only each
  producer's acknowledged in-window sends up to the last one of that producer the window
  delivered (a topic keeps each producer's order for one subscriber). Messages after it may have
  been dispatched to the dying connection and are legitimately gone with a non-durable
  subscription: they are counted as ``cut_off``, not missing.
* missing: expected but never received by that subscriber. observed discards = len(missing).
* unexpected: received, but no send of that id was attempted (or every attempt failed).
* out_of_window: received, attempted, but published before the subscription it arrived on
  existed. Reported, not an error: subscription recovery policies may replay older messages
  (the same document's example configuration sets such policies).
* duplicated: received more than once by the same subscriber. Reported, not an error.
* gaps: the missing sequence numbers per producer as inclusive ranges, which shows the eviction
  pattern (oldest-first eviction leaves runs of consecutive losses).

Valid iff no subscriber outside ``discards_allowed_for`` misses anything, nothing is
unexpected, and, for each subscriber in ``broker_discards``, the broker's count equals the
observed discards. Without an ``ok`` drain for every subscriber's last subscription the verdict
is "unknown" (messages still on their way would look missing), unless something already proves
it invalid. A subscriber with several subscriptions has one broker counter per subscription
("during the lifetime of the subscription"): pass their sum.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable

VALID, INVALID, UNKNOWN = True, False, "unknown"


@dataclass
class SubscriberReport:
    subscriber: str
    windows: int  # subscriptions made
    drained: bool  # the last subscription ended with an ok drain
    expected: int
    received: int  # distinct ids
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    out_of_window: list[str] = field(default_factory=list)
    cut_off: int = 0
    observed_discards: int = 0
    broker_discards: int | None = None
    gaps: dict[str, list[list[int]]] = field(default_factory=dict)  # producer -> [[first, last], ...]


@dataclass
class TopicFanoutResult:
    valid: bool | str
    attempted: int
    acknowledged: int
    subscribers: dict[str, SubscriberReport] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class _Send:
    id: str
    producer: object
    seq: int | None
    invoked: int  # position in the history
    outcome: str | None = None  # ok / fail / info; None while pending
    completed: int | None = None  # position of the completion


@dataclass
class _Window:
    process: object
    subscribed: int  # position of the subscribe's ok
    subscribe_invoked: int
    closed: int | None = None
    clean: bool = False
    received: list[tuple[str, object, int | None]] = field(default_factory=list)  # (id, producer, seq)


def _subscriber_of(value) -> object | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None
    for key in ("subscriber", "consumer"):
        if value.get(key) is not None and value[key] != -1:  # -1: the queue workload's drain
            return value[key]
    return None


def _messages(value) -> list[dict]:
    if isinstance(value, dict):
        return [value] if ("id" in value or "body" in value) else []
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict)]
    return []


def _message_id(message: dict) -> str:
    if message.get("id") is None:
        # A foreign message (no workload id): keep a recognisable marker so it shows as unexpected.
        return f"<no id: {str(message.get('body', ''))[:40]!r}>"
    return str(message["id"])


def _ranges(seqs: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for s in sorted(seqs):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def check_topic_fanout(history: Iterable[dict], *, broker_discards: dict[str, int] | None = None,
                       discards_allowed_for: set[str] | None = None) -> TopicFanoutResult:
    events = [e for e in history if e.get("process") != "nemesis"]
    allowed = {str(s) for s in (discards_allowed_for or ())}
    broker = {str(k): int(v) for k, v in (broker_discards or {}).items()}

    sends: dict[str, _Send] = {}
    open_sends: dict[object, _Send] = {}
    subscriber_of: dict[object, object] = {}
    windows: list[_Window] = []
    current: dict[object, _Window] = {}
    subscribe_invoked: dict[object, int] = {}
    stray: dict[object, list[tuple[str, object, int | None]]] = defaultdict(list)  # received outside a window

    def close(process, pos: int, clean: bool) -> None:
        window = current.pop(process, None)
        if window is not None:
            window.closed, window.clean = pos, clean

    for pos, e in enumerate(events):
        process, kind, f, value = e.get("process"), e.get("type"), e.get("f"), e.get("value")
        if (s := _subscriber_of(value)) is not None and f in ("receive", "drain", "ack"):
            subscriber_of.setdefault(process, s)
        if f == "send":
            if kind == "invoke":
                for m in _messages(value):
                    send = _Send(_message_id(m), m.get("producer"), m.get("seq"), pos)
                    sends[send.id] = send  # ids name one attempt (chaos/workloads/queue.py)
                    open_sends[process] = send
            elif process in open_sends:
                send = open_sends.pop(process)
                send.outcome, send.completed = kind, pos
        elif f == "subscribe":
            if kind == "invoke":
                subscribe_invoked[process] = pos
            elif kind == "ok":
                close(process, pos, clean=False)  # a resubscribe opens a new window
                window = _Window(process, pos, subscribe_invoked.get(process, pos))
                windows.append(window)
                current[process] = window
        elif f == "connect" and kind == "invoke":
            close(process, pos, clean=False)  # the old connection is gone
        elif f in ("receive", "drain") and kind in ("ok", "info") and value:
            got = [(_message_id(m), m.get("producer"), m.get("seq")) for m in _messages(value)]
            if process in current:
                current[process].received += got
            else:
                stray[process] += got
        if f == "drain" and kind in ("ok", "info"):
            close(process, pos, clean=(kind == "ok"))
        elif kind == "info":
            close(process, pos, clean=False)  # the process retires (chaos/history.py)
    end = len(events)
    for process in list(current):
        close(process, end, clean=False)

    def name(process) -> str:
        s = subscriber_of.get(process)
        return str(s) if s is not None else f"process-{process}"

    attempted = {i for i, s in sends.items() if s.outcome != "fail"}
    acknowledged = {i for i, s in sends.items() if s.outcome == "ok"}
    by_subscriber: dict[str, list[_Window]] = defaultdict(list)
    for w in windows:
        by_subscriber[name(w.process)].append(w)
    for process in stray:
        by_subscriber.setdefault(name(process), [])

    ordered = sorted(sends.values(), key=lambda s: s.invoked)
    invoked_at = [s.invoked for s in ordered]
    reports: dict[str, SubscriberReport] = {}
    for sub, sub_windows in sorted(by_subscriber.items()):
        received: Counter[str] = Counter()
        for w in sub_windows:
            received.update(i for i, _, _ in w.received)
        for process, got in stray.items():
            if name(process) == sub:
                received.update(i for i, _, _ in got)
        expected: set[str] = set()
        may: set[str] = set()
        cut_off = 0
        for w in sub_windows:
            first = bisect.bisect_right(invoked_at, w.subscribed)
            in_window = [s for s in ordered[first:bisect.bisect_left(invoked_at, w.closed)] if s.outcome != "fail"]
            # Invoked before the subscribe completed but completed after it was invoked: may have matched.
            overlapping = [s for s in ordered[:first] if s.outcome != "fail"
                           and (s.completed is None or s.completed > w.subscribe_invoked)]
            may.update(s.id for s in in_window + overlapping)
            acked = [s for s in in_window if s.outcome == "ok"]
            if w.clean:
                expected.update(s.id for s in acked)
                continue
            last_seq: dict[object, int] = {}
            for _, producer, seq in w.received:
                if seq is not None:
                    last_seq[producer] = max(seq, last_seq.get(producer, seq))
            for s in acked:
                if s.seq is not None and s.seq <= last_seq.get(s.producer, -1):
                    expected.add(s.id)
                elif s.id not in received:
                    cut_off += 1  # the tail of a cut subscription: may have died with the connection
        # producer, then sequence order: the eviction pattern reads straight off the list
        missing = sorted(expected - set(received), key=lambda i: (str(sends[i].producer), sends[i].seq or 0, i))
        gaps: dict[str, list[list[int]]] = defaultdict(list)
        seqs: dict[str, list[int]] = defaultdict(list)
        for i in missing:
            if sends[i].seq is not None:
                seqs[str(sends[i].producer)].append(sends[i].seq)
        for producer, ss in sorted(seqs.items()):
            gaps[producer] = _ranges(ss)
        last = max(sub_windows, key=lambda w: w.subscribed) if sub_windows else None
        reports[sub] = SubscriberReport(
            subscriber=sub, windows=len(sub_windows), drained=bool(last and last.clean),
            expected=len(expected), received=len(received), missing=missing,
            unexpected=sorted(i for i in received if i not in attempted),
            duplicated={i: n for i, n in sorted(received.items()) if n > 1},
            out_of_window=sorted(i for i in received if i in attempted and i not in may),
            cut_off=cut_off, observed_discards=len(missing), broker_discards=broker.get(sub), gaps=dict(gaps))

    result = TopicFanoutResult(VALID, len(attempted), len(acknowledged), reports,
                               sorted({i for r in reports.values() for i in r.unexpected}))
    problems: list[str] = []
    for sub, r in reports.items():
        if r.missing and sub not in allowed:
            problems.append(f"subscriber {sub} missed {len(r.missing)} acknowledged message(s)")
    if result.unexpected:
        problems.append(f"{len(result.unexpected)} unexpected message(s)")
    for sub, count in sorted(broker.items()):
        observed = reports[sub].observed_discards if sub in reports else 0
        if count != observed:
            where = "" if sub in reports else " (no such subscriber in the history)"
            problems.append(f"subscriber {sub}: the broker counted {count} discarded, the history shows "
                            f"{observed} missing{where}")
    if problems:
        result.valid, result.reason = INVALID, "; ".join(problems)
        return result
    undrained = sorted(sub for sub, r in reports.items() if not r.drained)
    if not reports:
        result.valid, result.reason = UNKNOWN, "the history has no subscriptions: nothing to check"
    elif undrained:
        result.valid = UNKNOWN
        result.reason = (f"subscriber(s) {', '.join(undrained)} have no final ok drain: messages still on their "
                         "way would look missing; drain each subscription after stop()")
    return result

