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

Which losses are documented discards (`judge`, as `brokerconf chaos run` decides): a slow
subscriber's (its ``subscribe`` value says ``"slow": true``, or the run record lists it); when
the broker's per-subscription counters were recorded, any subscriber's, as long as its counter
(paired by rank, `pair_discards`) says exactly how many. Messages whose destination is a queue
are left out (total_queue.py judges them). Positions are the ops' ``index``.

One implementation (issue 17): `facts` runs where the history is (a Spark task reads the run's
lines for it; `brokerconf chaos run` passes its events), `judge` where the run's settings are.
The window logic walks the events in Python: topic runs are small chaos runs; a columnar form
is future work.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable

from .protocol import Checker
from .result import INVALID, UNKNOWN, VALID, CheckResult, RunKey

NAME = "topic_fanout"
_DETAIL = {
    "missing": "acknowledged send published while subscriber {s} was subscribed, never received by it",
    "unexpected": "subscriber {s} received it, but no send of it was attempted (or every attempt failed)",
    "duplicated": "subscriber {s} received it {n} times",
    "out_of_window": "subscriber {s} received it, but it was published before that subscription existed "
                     "(a subscription recovery policy may replay it)",
}


@dataclass
class _Send:
    id: str
    producer: object
    seq: int | None
    invoked: int  # op index
    outcome: str | None = None  # ok / fail / info; None while pending
    completed: int | None = None  # op index of the completion


@dataclass
class _Window:
    process: object
    subscribed: int  # op index of the subscribe's ok
    subscribe_invoked: int
    closed: int | None = None
    clean: bool = False
    received: list[tuple[str, object, int | None, int]] = field(default_factory=list)  # (id, producer, seq, op)


def _subscriber_of(value) -> object | None:
    if isinstance(value, list):
        value = value[0] if value else None
    if not isinstance(value, dict):
        return None
    for key in ("subscriber", "consumer"):
        if value.get(key) is not None and value[key] != -1:  # -1: the queue workload's drain
            return value[key]
    return None


def _on_queue(m: dict) -> bool:
    destination = m.get("destination")
    return isinstance(destination, str) and not destination.startswith("topic://")


def _messages(value) -> list[dict]:
    if isinstance(value, dict):
        return [value] if ("id" in value or "body" in value) and not _on_queue(value) else []
    if isinstance(value, list):
        return [m for m in value if isinstance(m, dict) and not _on_queue(m)]
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


def is_topic_run(events: list[dict]) -> bool:
    """A run with a subscription (or a message) on a topic: the only runs this checker judges."""
    for e in events:
        if e.get("process") == "nemesis":
            continue
        value = e.get("value")
        if e.get("f") == "subscribe" and isinstance(value, dict) and str(value.get("destination", "")).startswith("topic://"):
            return True
    return False


def facts(history: Iterable[dict], *, topic_only: bool = True) -> dict | None:
    """Per subscriber: windows, drained, expected, received, cut_off, the ops bounding its
    windows and each missing message (id, producer, seq, and the ops: send, subscribe, close);
    the run's other findings (unexpected, duplicated, out_of_window, with their ops); the
    subscribers marked slow in the history. None when the run has no topic subscription (unless
    not ``topic_only``: a caller that knows the run is a topic run, whatever its values say)."""
    events = [e if "index" in e else {**e, "index": i} for i, e in enumerate(history)]
    if topic_only and not is_topic_run(events):
        return None
    events = [e for e in events if e.get("process") != "nemesis"]
    sends: dict[str, _Send] = {}
    open_sends: dict[object, _Send] = {}
    subscriber_of: dict[object, object] = {}
    slow: set[str] = set()
    windows: list[_Window] = []
    current: dict[object, _Window] = {}
    subscribe_invoked: dict[object, int] = {}
    stray: dict[object, list[tuple[str, object, int | None, int]]] = defaultdict(list)  # received outside a window

    def close(process, pos: int, clean: bool) -> None:
        window = current.pop(process, None)
        if window is not None:
            window.closed, window.clean = pos, clean

    for e in events:
        pos = e["index"]
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
                if isinstance(value, dict) and value.get("slow") is True and value.get("subscriber") is not None:
                    slow.add(str(value["subscriber"]))
            elif kind == "ok":
                close(process, pos, clean=False)  # a resubscribe opens a new window
                window = _Window(process, pos, subscribe_invoked.get(process, pos))
                windows.append(window)
                current[process] = window
        elif f == "connect" and kind == "invoke":
            close(process, pos, clean=False)  # the old connection is gone
        elif f in ("receive", "drain") and kind in ("ok", "info") and value:
            got = [(_message_id(m), m.get("producer"), m.get("seq"), pos) for m in _messages(value)]
            if process in current:
                current[process].received += got
            else:
                stray[process] += got
        if f == "drain" and kind in ("ok", "info"):
            close(process, pos, clean=(kind == "ok"))
        elif kind == "info":
            close(process, pos, clean=False)  # the process retires (chaos/history.py)

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
    subscribers: dict[str, dict] = {}
    findings: list[dict] = []
    for sub, sub_windows in sorted(by_subscriber.items()):
        received: Counter[str] = Counter()
        got_ops: dict[str, list[int]] = defaultdict(list)
        for got in [w.received for w in sub_windows] + [g for p, g in stray.items() if name(p) == sub]:
            for i, _, _, op in got:
                received[i] += 1
                got_ops[i].append(op)
        expected: dict[str, tuple[_Send, _Window]] = {}
        may: set[str] = set()
        cut_off = 0
        for w in sub_windows:
            end = w.closed if w.closed is not None else float("inf")
            first = bisect.bisect_right(invoked_at, w.subscribed)
            in_window = [s for s in ordered[first:bisect.bisect_left(invoked_at, end)] if s.outcome != "fail"]
            # Invoked before the subscribe completed but completed after it was invoked: may have matched.
            overlapping = [s for s in ordered[:first] if s.outcome != "fail"
                           and (s.completed is None or s.completed > w.subscribe_invoked)]
            may.update(s.id for s in in_window + overlapping)
            acked = [s for s in in_window if s.outcome == "ok"]
            if w.clean:
                for s in acked:
                    expected.setdefault(s.id, (s, w))
                continue
            last_seq: dict[object, int] = {}
            for _, producer, seq, _ in w.received:
                if seq is not None:
                    last_seq[producer] = max(seq, last_seq.get(producer, seq))
            for s in acked:
                if s.seq is not None and s.seq <= last_seq.get(s.producer, -1):
                    expected.setdefault(s.id, (s, w))
                elif s.id not in received:
                    cut_off += 1  # the tail of a cut subscription: may have died with the connection
        missing = [{"id": i, "producer": s.producer, "seq": s.seq, "ops": [s.invoked, w.subscribed]
                    + ([w.closed] if w.closed is not None else [])}
                   for i, (s, w) in expected.items() if i not in received]
        # producer, then sequence order: the eviction pattern reads straight off the list
        missing.sort(key=lambda m: (str(m["producer"]), m["seq"] or 0, m["id"]))
        last = max(sub_windows, key=lambda w: w.subscribed) if sub_windows else None
        subscribers[sub] = {"windows": len(sub_windows), "drained": bool(last and last.clean),
                            "expected": len(expected), "received": len(received), "cut_off": cut_off,
                            "window_ops": sorted(o for w in sub_windows for o in (w.subscribed, w.closed) if o is not None),
                            "missing": missing}
        for i, n in sorted(received.items()):
            ops = sorted(got_ops[i])
            if i not in attempted:
                findings.append({"kind": "unexpected", "subscriber": sub, "id": i, "n": n, "ops": ops})
            elif i not in may:
                findings.append({"kind": "out_of_window", "subscriber": sub, "id": i, "n": n,
                                 "ops": [sends[i].invoked, *ops]})
            if n > 1:
                findings.append({"kind": "duplicated", "subscriber": sub, "id": i, "n": n, "ops": ops})
    return {"attempted": len(attempted), "acknowledged": len(acknowledged), "subscribers": subscribers,
            "findings": findings, "slow": sorted(slow)}


# ---------------------------------------------------------------------- judging


def pair_discards(observed: dict[str, int], broker: list[int]) -> dict[str, int] | None:
    """Each subscriber's broker counter. The broker does not say which connection a subscription
    belongs to, so counters pair with subscribers by rank (most with most); None when the numbers
    of subscriptions differ. reports/judge.py pairs the counters of `chaos run` with this one."""
    if len(broker) != len(observed):
        return None
    ranked = sorted(observed, key=lambda name: (observed[name], name))
    return dict(zip(ranked, sorted(broker)))


def losses(facts_: dict) -> dict[str, int]:
    return {name: len(s["missing"]) for name, s in facts_["subscribers"].items()}


def gaps(sub: dict) -> dict[str, list[list[int]]]:
    """Missing sequence numbers per producer as inclusive ranges."""
    seqs: dict[str, list[int]] = defaultdict(list)
    for m in sub["missing"]:
        if m["seq"] is not None:
            seqs[str(m["producer"])].append(m["seq"])
    return {producer: _ranges(values) for producer, values in sorted(seqs.items())}


def verdict(facts_: dict, allowed: set[str], paired: dict[str, int] | None) -> tuple[bool | str, str]:
    """The verdict with the documented discards ``allowed`` and the broker counters ``paired``."""
    problems: list[str] = []
    for name, s in sorted(facts_["subscribers"].items()):
        if s["missing"] and name not in allowed:
            problems.append(f"subscriber {name} missed {len(s['missing'])} acknowledged message(s)")
    unexpected = {f["id"] for f in facts_["findings"] if f["kind"] == "unexpected"}
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected message(s)")
    observed = losses(facts_)
    for name, count in sorted((paired or {}).items()):
        if count != observed.get(name, 0):
            where = "" if name in observed else " (no such subscriber in the history)"
            problems.append(f"subscriber {name}: the broker counted {count} discarded, the history shows "
                            f"{observed.get(name, 0)} missing{where}")
    if problems:
        return INVALID, "; ".join(problems)
    undrained = sorted(name for name, s in facts_["subscribers"].items() if not s["drained"])
    if not facts_["subscribers"]:
        return UNKNOWN, "the history has no subscriptions: nothing to check"
    if undrained:
        return UNKNOWN, (f"subscriber(s) {', '.join(undrained)} have no final ok drain: messages still on their way "
                         "would look missing; drain each subscription after stop()")
    return VALID, ""


def documented(facts_: dict, broker_discards: list[int] | None, slow: set[str]) -> tuple[set[str], dict | None]:
    """(subscribers whose losses are documented, counters paired with subscribers) as `brokerconf
    chaos run` decides: with paired counters every subscriber may lose what its counter says."""
    paired = None if broker_discards is None else pair_discards(losses(facts_), broker_discards)
    return (set(facts_["subscribers"]) if paired is not None else set(slow)), paired


def anomaly(key: RunKey, checker: str, kind: str, finding: dict, detail: str | None = None) -> dict:
    return {"run": key[0], "target": key[1], "checker": checker, "kind": kind, "message_id": finding["id"],
            "ops": finding["ops"], "detail": detail or _DETAIL[finding["kind"]].format(s=finding["subscriber"],
                                                                                     n=finding.get("n"))}


def judge(key: RunKey, facts_: dict | None, *, broker_discards: list[int] | None = None, slow: set[str] = frozenset(),
          record: str | None = None, unreadable: str = "") -> tuple[CheckResult, list[dict]]:
    """One run's result and anomaly rows; ``broker_discards`` and ``slow`` from the run record
    (the history's own slow marks are added), ``unreadable``: why the history's lines could not
    be read for `facts`."""
    if unreadable:
        return CheckResult(NAME, *key, UNKNOWN, unreadable, stats={"anomalies": {}}), []
    if facts_ is None:
        return CheckResult(NAME, *key, UNKNOWN, "no topic subscription in this history", applicable=False,
                           stats={"anomalies": {}}), []
    slow = set(slow) | set(facts_["slow"])
    allowed, paired = documented(facts_, broker_discards, slow)
    rows = []
    for name, s in facts_["subscribers"].items():
        if name not in allowed:
            rows += [anomaly(key, NAME, "missing", {**m, "subscriber": name, "kind": "missing"}) for m in s["missing"]]
    rows += [anomaly(key, NAME, f["kind"], f) for f in facts_["findings"]]
    rows.sort(key=lambda r: (r["kind"], r["message_id"] or ""))
    valid, reason = verdict(facts_, allowed, paired)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    stats = {"attempted": facts_["attempted"], "acknowledged": facts_["acknowledged"],
             "documented_discards_for": sorted(allowed), "broker_record": record,
             "subscribers": {name: {"windows": s["windows"], "drained": s["drained"], "expected": s["expected"],
                                    "received": s["received"], "missing": len(s["missing"]), "cut_off": s["cut_off"],
                                    "broker_discards": (paired or {}).get(name), "gaps": gaps(s)}
                             for name, s in sorted(facts_["subscribers"].items())},
             "anomalies": counts}
    return CheckResult(NAME, *key, valid, reason, stats=stats), rows


# ---------------------------------------------------------------------- over a list of events


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
    """The shape `brokerconf chaos run` writes to verdict.json."""
    valid: bool | str
    attempted: int
    acknowledged: int
    subscribers: dict[str, SubscriberReport] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def check_topic_fanout(history: Iterable[dict], *, broker_discards: dict[str, int] | None = None,
                       discards_allowed_for: set[str] | None = None) -> TopicFanoutResult:
    """`facts` and `verdict` over a history's events, with the caller's documented discards and
    already paired broker counters (brokerconf/chaos_job.py pairs them)."""
    f = facts(history, topic_only=False)
    allowed = {str(s) for s in (discards_allowed_for or ())}
    paired = {str(k): int(v) for k, v in (broker_discards or {}).items()}
    valid, reason = verdict(f, allowed, paired)
    reports = {}
    for name, s in sorted(f["subscribers"].items()):
        mine = [x for x in f["findings"] if x["subscriber"] == name]
        reports[name] = SubscriberReport(
            subscriber=name, windows=s["windows"], drained=s["drained"], expected=s["expected"], received=s["received"],
            missing=[m["id"] for m in s["missing"]],
            unexpected=sorted(x["id"] for x in mine if x["kind"] == "unexpected"),
            duplicated={x["id"]: x["n"] for x in sorted(mine, key=lambda x: x["id"]) if x["kind"] == "duplicated"},
            out_of_window=sorted(x["id"] for x in mine if x["kind"] == "out_of_window"),
            cut_off=s["cut_off"], observed_discards=len(s["missing"]), broker_discards=paired.get(name), gaps=gaps(s))
    unexpected = sorted({x["id"] for x in f["findings"] if x["kind"] == "unexpected"})
    return TopicFanoutResult(valid, f["attempted"], f["acknowledged"], reports, unexpected, reason)


def run_inputs(facts_: dict) -> dict:
    """What the topic checks take from the run record beside their facts (`registry.with_run_record`
    put it there): the broker's discard counters, the slow subscribers, where the record was read,
    and why the history's lines could not be read again (the Spark task says)."""
    record = facts_.get("run_record") or {}
    return {"broker_discards": record.get("broker_discards"), "slow": set(record.get("slow") or ()),
            "record": record.get("path"), "unreadable": facts_.get("topic_unreadable") or ""}


def _as_registered(key: RunKey, facts_: dict, options: dict):
    return (*judge(key, facts_.get(NAME), **run_inputs(facts_), **options), [])


def _topic_run(record) -> str | None:
    return None if record.topic else "not a topic run"


#: the topic workload's own check; its facts are read from the history's events (no ``facts``
#: over columns: the window logic needs the raw values)
CHECKER = Checker(NAME, _as_registered, switch="topic_fanout", applies=_topic_run, evidence_required=True)
