"""The columnar checkers (reports/checkers, `registry.facts_of` over `history.Columns`) give the
same facts whatever the row order and whether the string columns arrive plain or dictionary-
encoded chunk by chunk (as Arrow batches from different readers do), on every literal history of
test_checkers.py and on hypothesis-generated histories with planted anomalies; and the literals
do plant every kind of anomaly. No Spark: the flat rows are built here the way fused/load.py
flattens a history (one row per message, ``pos`` null for an op without one).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.checkers import history as checks
from reports.checkers.history import Columns
from reports.checkers.registry import facts_of
from .histories import MS, H, msg
from .test_checkers import LITERALS

MESSAGE_FIELDS = [("id", pa.string()), ("producer", pa.int64()), ("seq", pa.int64()), ("destination", pa.string()),
                  ("group", pa.string()), ("consumer", pa.int64()), ("subscriber", pa.int64()), ("redelivered", pa.bool_())]
#: fused/load.py's FLAT_COLUMNS with the types its Spark schema gives them
FLAT = pa.schema([("run", pa.string()), ("target", pa.string()), ("node", pa.string()), ("file", pa.string()),
                  ("index", pa.int64()), ("time", pa.int64()), ("process", pa.string()), ("type", pa.string()),
                  ("f", pa.string()), ("error", pa.string()), ("pos", pa.int64()), *MESSAGE_FIELDS,
                  ("phase", pa.string()), ("fault", pa.string()), ("started", pa.int64()),
                  ("fault_window", checks.FAULT_WINDOW_TYPE)])
OP_KEYS = ("run", "target", "node", "index", "time", "type", "f", "error")
NEMESIS_FIELDS = ("phase", "fault", "started", "fault_window")
TEXT_COLUMNS = [f.name for f in FLAT if f.type == pa.string()]


def flat_table(events: list[dict], file: str = "/runs/r/history.jsonl") -> pa.Table:
    """History lines as fused/load.py flattens them: a drain's list, ``{"messages": [...]}`` or one
    message object with an id give one row per message; any other value one row with ``pos``
    null; the nemesis fields come from an object value."""
    rows = []
    for e in events:
        op = {k: e.get(k) for k in OP_KEYS}
        op.update(process=str(e["process"]), file=file)
        value = e.get("value")
        if isinstance(value, list):
            messages = value
        elif isinstance(value, dict) and "messages" in value:
            messages = value["messages"]
        else:
            messages = [value] if isinstance(value, dict) and value.get("id") is not None else []
        nemesis = {k: value.get(k) for k in NEMESIS_FIELDS} if isinstance(value, dict) else {}
        if messages:
            rows += [{**op, "pos": i, **{k: m.get(k) for k, _ in MESSAGE_FIELDS}, **nemesis} for i, m in enumerate(messages)]
        else:
            rows.append({**op, "pos": None, **nemesis})
    return pa.Table.from_pylist(rows, schema=FLAT)


def dictionary_chunks(table: pa.Table, pieces: int = 3) -> pa.Table:
    """The string columns dictionary-encoded chunk by chunk: each chunk its own dictionary, as
    Arrow batches from different sources arrive."""
    step = max(1, -(-table.num_rows // pieces))
    batches = [table.slice(i, step) for i in range(0, table.num_rows, step)] or [table]
    columns = {}
    for name in table.column_names:
        chunks = [b.column(name).combine_chunks() for b in batches]
        if name in TEXT_COLUMNS:
            chunks = [c.dictionary_encode() for c in chunks]
        columns[name] = pa.chunked_array(chunks)
    return pa.table(columns)


def normalised(facts: dict) -> str:
    """Facts as JSON (what the driver sees), the lists of findings in a fixed order."""
    facts = json.loads(json.dumps(facts, default=lambda v: v.item()))
    for part in facts.values():
        if isinstance(part, dict) and isinstance(part.get("found"), list):
            part["found"].sort(key=lambda f: json.dumps(f, sort_keys=True))
    return json.dumps(facts, sort_keys=True)


def facts_from_table(table: pa.Table) -> dict:
    return facts_of(Columns(table))


def assert_same_however_given(table: pa.Table, permutation=None) -> dict:
    facts = facts_from_table(table)
    expected = normalised(facts)
    assert normalised(facts_from_table(dictionary_chunks(table))) == expected
    if permutation is not None:
        assert normalised(facts_from_table(table.take(pa.array(permutation)))) == expected
    return facts


# ---------------------------------------------------------------------- literal histories


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_literal_history_gives_the_same_facts_however_its_rows_arrive(name):
    table = flat_table(LITERALS[name].lines)
    assert_same_however_given(table, permutation=np.random.default_rng(len(name)).permutation(table.num_rows))


def test_the_literals_plant_every_kind_of_anomaly():
    """The comparison above is not vacuous: the checkers find every planted kind."""
    found = set()
    for name, h in LITERALS.items():
        facts = facts_from_table(flat_table(h.lines))
        for checker in ("total_queue", "fifo", "groups"):
            found |= {(checker, f["kind"]) for f in facts[checker]["found"]}
        if name.startswith("split_brain"):
            from reports.checkers.split_brain import overlaps
            found |= {("split_brain", "split-brain") for _ in overlaps(facts["split_brain"])}
        if name.startswith("redistribution"):
            from reports.checkers.redistribution import without_consumer
            found |= {("redistribution", f["kind"]) for f in facts["redistribution"]["found"]}
            found |= {("redistribution", f["kind"])
                      for f in without_consumer(facts["redistribution"], facts["redistribution_consumers"], -1)}
        found |= {("group_pinning", f["kind"]) for f in facts["group_pinning"]["found"]}
        if name == "failover_downtime":
            rows = facts["failover_downtime"]["rows"]
            assert [r["client"] for r in rows if r["downtime"] is not None] == ["consumer-0", "producer-0"]
    assert found == {("total_queue", "lost"), ("total_queue", "unexpected"), ("total_queue", "duplicated"),
                     ("total_queue", "recovered"), ("fifo", "reordered"), ("groups", "reordered"), ("groups", "stolen"),
                     ("split_brain", "split-brain"), ("redistribution", "lost"), ("redistribution", "duplicated"),
                     ("redistribution", "no-consumer-node"), ("group_pinning", "moved")}


def test_rows_without_operations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="without any operation"):
        facts_from_table(flat_table([]))


# ---------------------------------------------------------------------- generated histories

Q_A, Q_B, TOPIC = "queue://a", "queue://b", "topic://t"
CLIENT_FS = ("send", "send", "send", "receive", "receive", "receive", "drain", "ack", "close", "connect",
             "subscribe", "unsubscribe", "rebalance", "planted reorder")


@st.composite
def catalogue(draw) -> list[dict]:
    """The messages a history may mention: small seqs and few producers, so that orders invert and
    ids repeat; some without producer or seq, some on a topic, some without destination."""
    out = []
    for i in range(draw(st.integers(1, 10))):
        m = {"id": f"m{i}", "producer": draw(st.sampled_from([0, 0, 1, None])),
             "seq": draw(st.one_of(st.integers(0, 6), st.none())),
             "destination": draw(st.sampled_from([Q_A, Q_A, Q_A, Q_B, TOPIC, None]))}
        group = draw(st.sampled_from([None, "g1", "g1", "g2"]))
        if group is not None:
            m["group"] = group
        out.append(m)
    return out


@st.composite
def histories(draw) -> list[dict]:
    """A run of up to five client processes and a nemesis. A client step completes the process's
    open op if it has one (ok, fail or info), else invokes a new one: receives of unsent or
    already received ids (unexpected, duplicated), sends never received (lost), deliveries out of
    seq order (reordered; also planted: two receives in falling seq order), a group's messages to several processes (stolen), faults healed or
    left open (downtime), drains of a list with a null id."""
    msgs = draw(catalogue())
    # a few runs' shapes: one node or a network, one consumer or competing ones, faults or not
    # (FIFO is judged only for one node and one consumer, a theft only between fault steps)
    nodes = draw(st.sampled_from([["A"], ["A"], ["A", "A", "B"]]))
    consumers = draw(st.sampled_from([[0], [0, 1, 2, None], [None]]))
    processes = draw(st.integers(1, 5))
    fault_odds = draw(st.sampled_from([0, 5, 15]))
    h = H("generated")
    pending: dict[int, tuple] = {}
    for _ in range(draw(st.integers(1, 60))):
        h.now += draw(st.sampled_from([0, 1, 1, 300, 1200])) * MS
        at = h.now / MS
        if fault_odds and draw(st.integers(0, fault_odds)) == 0:
            _nemesis_step(draw, h, at)
            continue
        p = draw(st.integers(0, processes - 1))
        node = draw(st.sampled_from(nodes))
        if p in pending:
            f, value = pending.pop(p)
            outcome = draw(st.sampled_from(["ok", "ok", "ok", "ok", "ok", "fail", "info"]))
            if f in ("receive", "drain") and outcome != "ok":
                value = None
            h.op(p, outcome, f, value, at=at, node=node)
            continue
        f = draw(st.sampled_from(CLIENT_FS))
        m = dict(draw(st.sampled_from(msgs)))
        if f == "planted reorder":  # two receives, the second of a lower (or equal) seq
            group = draw(st.sampled_from([None, "g1"]))
            consumer = draw(st.sampled_from(consumers))
            for seq in (draw(st.integers(3, 6)), draw(st.integers(0, 3))):
                got = msg(f"r{len(h.lines)}", seq=seq, dest=Q_A, group=group,
                          **({} if consumer is None else {"consumer": consumer}))
                h.op(p, "invoke", "receive", None, at=at, node=node)
                h.op(p, "ok", "receive", got, at=at, node=node)
        elif f == "send":
            pending[p] = (f, m)
            h.op(p, "invoke", f, m, at=at, node=node)
        elif f == "receive":
            consumer = draw(st.sampled_from(consumers))
            got = {**m, **({} if consumer is None else {"consumer": consumer})}
            if draw(st.booleans()):
                got["redelivered"] = True
            pending[p] = (f, got)
            h.op(p, "invoke", f, None, at=at, node=node)
        elif f == "drain":
            taken = [dict(x) for x in draw(st.lists(st.sampled_from(msgs), max_size=4))]
            if draw(st.integers(0, 5)) == 0:
                taken.append({"id": None, "producer": 0, "seq": 1, "destination": Q_A})
            pending[p] = (f, taken)
            h.op(p, "invoke", f, None, at=at, node=node)
        else:
            value = m if f == "ack" else None
            pending[p] = (f, value)
            h.op(p, "invoke", f, value, at=at, node=node)
    return h.lines


def _nemesis_step(draw, h: H, at: float) -> None:
    kind = draw(st.sampled_from(["kill", "restart", "partition", "setup"]))
    if kind == "kill":
        h.kill(at=at)
    elif kind == "restart":
        h.restart(at=at, killed_at=max(0.0, at - draw(st.sampled_from([0, 500, 3000]))))
    elif kind == "partition":  # healed only if a later step says so: else open until the run's end
        h.nemesis("partition", "start", at=at)
        h.nemesis("partition", "end", at=at, fault="split")
    else:  # setup is not a fault even with a fault name (common.fault_windows)
        h.nemesis("setup", "start", at=at)
        h.nemesis("setup", "end", at=at, fault="down", started=int(at * MS))


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.randoms(use_true_random=False))
def test_generated_history_gives_the_same_facts_however_its_rows_arrive(events, rnd):
    table = flat_table(events)
    permutation = list(range(table.num_rows))
    rnd.shuffle(permutation)
    assert_same_however_given(table, permutation=permutation)


# ---------------------------------------------------------------------- the numpy helpers' wide-range paths


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-(1 << 62), 1 << 62)), min_size=1, max_size=30))
def test_segment_running_max_restarts_at_each_segment(rows):
    """Values spanning more than 2**62 take the per-segment path; small ones the lifted one."""
    rows.sort(key=lambda r: r[0])
    segment = np.array([s for s, _ in rows])
    values = np.array([v for _, v in rows], dtype=np.int64)
    start = np.concatenate([[True], segment[1:] != segment[:-1]])
    for v in (values, values // (1 << 40)):
        assert checks._segment_running_max(v, start).tolist() == _naive_running_max(v, start)  # pylint: disable=protected-access


def _naive_running_max(values, start):
    out = []
    for v, s in zip(values.tolist(), start.tolist()):
        out.append(v if s else max(out[-1], v))
    return out


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 5, 1 << 40, (1 << 62) - 1]), st.integers(-1, 3)), max_size=30))
def test_row_order_is_index_then_pos_null_first_and_stable(rows):
    index = np.array([i for i, _ in rows], dtype=np.int64)
    pos = np.array([p for _, p in rows], dtype=np.int64)
    order = checks._order(index, pos)  # pylint: disable=protected-access
    expected = sorted(range(len(rows)), key=lambda k: rows[k])
    assert (list(range(len(rows))) if order is None else order.tolist()) == expected
