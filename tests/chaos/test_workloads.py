"""Workloads (chaos/workloads/) against an in-process reference broker: the histories they write
show every acknowledged send received exactly once after the drain."""

from __future__ import annotations

import collections
import functools

import pytest

from chaos.history import History, read_history
from chaos.workloads import GroupedQueueWorkload, QueueWorkload, TopicFanoutWorkload, outcome_of
from chaos.workloads.queue import DrainIncomplete
from conformance.clients import ClientError, connect
from conformance.scenario import Scenario
from conformance.targets.reference.target import InProcessReference
from reports.checkers.total_queue import check_total_queue


@pytest.fixture
def broker():
    handle = InProcessReference(Scenario(name="w", protocols=("stomp",)))
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def history(tmp_path):
    with History(tmp_path / "history.jsonl", run="w1", target="reference", node="A") as h:
        yield h


def factory(broker):
    return functools.partial(connect, "127.0.0.1", broker.ports["stomp"], "stomp", timeout=5.0)


def consumed_ids(events) -> collections.Counter:
    """Dequeues as the total-queue checker sees them with client acks: ok acks plus drains."""
    seen = collections.Counter()
    for e in events:
        if e["type"] == "ok" and e["f"] == "ack":
            seen[e["value"]["id"]] += 1
        if e["type"] == "ok" and e["f"] == "drain":
            seen.update(v["id"] for v in e["value"])
    return seen


def assert_well_formed(events) -> None:
    open_ops: dict = {}
    retired = set()
    for e in events:
        p = e["process"]
        if p == "nemesis":
            continue
        if e["type"] == "invoke":
            assert p not in open_ops and p not in retired, f"process {p} invoked twice / after info: {e}"
            open_ops[p] = e
        else:
            assert open_ops.pop(p)["f"] == e["f"], f"completion without its invoke: {e}"
            if e["type"] == "info":
                retired.add(p)
    assert not open_ops, f"operations left open: {open_ops}"


def test_queue_every_acknowledged_send_is_received_exactly_once(broker, history):
    workload = QueueWorkload(history, factory(broker), destination="queue://w.q", producers=3, consumers=2,
                             rate=100, receive_timeout=0.2)
    workload.start()
    while workload.sent_ok < 150 and not workload.errors:
        workload._stop_producers.wait(0.05)
    workload.stop()
    drained = workload.drain(quiet=0.5)
    assert workload.errors == []
    events = read_history(history.path)
    assert_well_formed(events)
    sent = [e["value"] for e in events if e["type"] == "ok" and e["f"] == "send"]
    assert len(sent) >= 150
    seen = consumed_ids(events)
    assert {v["id"] for v in sent} == set(seen), "lost or unexpected messages"
    assert max(seen.values()) == 1, f"duplicates: {[i for i, n in seen.items() if n > 1]}"
    assert all(e["run"] == "w1" and e["target"] == "reference" for e in events)
    # ids are {run}-{producer}-{seq}, sequence numbers run per producer without gaps
    for p in range(3):
        seqs = sorted(v["seq"] for v in sent if v["producer"] == p)
        assert seqs == list(range(len(seqs)))
        assert all(v["id"] == f"w1-{p}-{v['seq']}" for v in sent if v["producer"] == p)
    assert len(set(e["process"] for e in events if e["f"] == "drain")) == 1
    assert len(drained) == sum(len(e["value"]) for e in events if e["f"] == "drain" and e["type"] == "ok")


def test_grouped_producers_carry_group_ids_end_to_end(broker, history):
    workload = GroupedQueueWorkload(history, factory(broker), destination="queue://w.g", groups=("a", "b"),
                                    producers=2, consumers=0, rate=None)
    workload.start()
    while workload.sent_ok < 20 and not workload.errors:
        workload._stop_producers.wait(0.02)
    workload.stop()
    drained = workload.drain(quiet=0.5)
    events = read_history(history.path)
    sent = {e["value"]["id"]: e["value"] for e in events if e["type"] == "ok" and e["f"] == "send"}
    assert all(v["group"] == ("a", "b")[v["seq"] % 2] for v in sent.values())
    assert {d["id"]: d["group"] for d in drained} == {i: v["group"] for i, v in sent.items()}


def test_topic_fanout_every_subscriber_gets_every_message(broker, history):
    workload = TopicFanoutWorkload(history, factory(broker), destination="topic://w.t", subscribers=3,
                                   producers=2, rate=200, receive_timeout=0.2)
    workload.start()
    while workload.sent_ok < 60 and not workload.errors:
        workload._stop_producers.wait(0.05)
    workload.stop()
    workload.drain(quiet=0.5)
    assert workload.errors == []
    events = read_history(history.path)
    assert_well_formed(events)
    sent = {e["value"]["id"] for e in events if e["type"] == "ok" and e["f"] == "send"}
    per_subscriber = collections.defaultdict(collections.Counter)
    for e in events:
        if e["type"] == "ok" and e["f"] == "receive":
            per_subscriber[e["value"]["subscriber"]][e["value"]["id"]] += 1
        if e["type"] == "ok" and e["f"] == "drain":
            for v in e["value"]:
                per_subscriber[v["subscriber"]][v["id"]] += 1
    assert sorted(per_subscriber) == [0, 1, 2]
    for subscriber, seen in per_subscriber.items():
        assert set(seen) == sent and max(seen.values()) == 1, f"subscriber {subscriber}"


def test_unknown_outcome_retires_the_process_and_the_producer_goes_on(history):
    """A fake client whose every third send times out: info, then a new process id."""

    class FlakyClient:
        protocol = "stomp"
        calls = 0

        def send(self, destination, body=b"", properties=None, **kw):
            FlakyClient.calls += 1
            if FlakyClient.calls % 3 == 0:
                raise ClientError("SEND: no RECEIPT within 5s; the outcome is unknown")
            if FlakyClient.calls % 5 == 0:
                raise ClientError("SEND: the broker answered ERROR: queue full")

        def close(self):
            pass

    workload = QueueWorkload(history, FlakyClient, producers=1, consumers=0, rate=None)
    workload.start()
    while FlakyClient.calls < 30:
        workload._stop_producers.wait(0.01)
    workload.stop()
    events = read_history(history.path)
    assert_well_formed(events)
    sends = [e for e in events if e["f"] == "send" and e["type"] != "invoke"]
    infos = [e for e in sends if e["type"] == "info"]
    fails = [e for e in sends if e["type"] == "fail"]
    assert infos and fails
    for info in infos:
        later = [e for e in events if e["index"] > info["index"] and e["type"] == "invoke"]
        assert all(e["process"] != info["process"] for e in later)
    processes = [e["process"] for e in events if e["f"] == "send" and e["type"] == "invoke"]
    assert len(set(processes)) == len(infos) + (0 if sends[-1]["type"] == "info" else 1)
    assert [e["value"]["seq"] for e in events if e["f"] == "send" and e["type"] == "invoke"] == \
        list(range(len(processes))), "sequence numbers belong to the producer, across processes"


def test_outcome_classification():
    assert outcome_of(ClientError("SEND x: the broker answered ERROR: nope")) == "fail"
    assert outcome_of(ClientError("SEND x: not connected (closed)")) == "fail"
    assert outcome_of(ClientError("SEND x: no RECEIPT within 5s; the outcome is unknown")) == "info"
    assert outcome_of(ClientError("SEND x: connection lost before the receipt: reset")) == "info"


def test_outcome_in_doubt_even_when_the_text_quotes_a_refusal():
    """Both seen in one Artemis lease-expiry run, each send's message later delivered by the
    backup: the total_queue checker called them "unexpected" while they were in doubt."""
    from conformance.clients.failover import InDoubt

    in_doubt = InDoubt("SEND to queue://q: connection lost before the broker confirmed it (SEND ...: the broker "
                       "answered ERROR: Error sending reply); not replayed (trackMessages=false), so it may or may "
                       "not have arrived", operation="send", destination="queue://q")
    assert outcome_of(in_doubt) == "info"
    sync_failed = ClientError("SEND queue://q: the broker answered ERROR: Error sending reply: class "
                              "java.io.IOException during checkSync on .../activemq-data-1.amq: Input/output error")
    assert outcome_of(sync_failed) == "info", "a failed journal sync does not prove the message was not written"
    shutting_down = ClientError("SEND queue://q: the broker answered ERROR: org.apache.activemq.broker."
                                "SuppressReplyException: ShutdownBrokerInitiated: java.util.concurrent.ExecutionException")
    assert outcome_of(shutting_down) == "info", "ActiveMQ stopping over a journal IOException: the send is in doubt"
    assert outcome_of(ClientError("SEND x: the broker answered ERROR: not authorized")) == "fail"
    assert outcome_of(TimeoutError()) == "info"


def test_drain_before_stop_is_refused(broker, history):
    workload = QueueWorkload(history, factory(broker), producers=0, consumers=0)
    with pytest.raises(RuntimeError, match="stop"):
        workload.drain()


def test_drain_that_never_connects_raises_drain_incomplete_and_the_history_has_no_drain(tmp_path):
    def refuse():
        raise ConnectionRefusedError("nothing listens")

    with History(tmp_path / "h.jsonl", run="w2", target="reference", node="A") as h:
        workload = QueueWorkload(h, refuse, producers=0, consumers=0, reconnect_delay=0.01)
        workload.stop()
        with pytest.raises(DrainIncomplete, match="did not complete in 3 attempts") as caught:
            workload.drain()
    assert caught.value.drained == []
    events = read_history(tmp_path / "h.jsonl")
    assert [e["type"] for e in events if e["f"] == "connect"] == ["invoke", "fail"] * 3
    assert check_total_queue(events).valid == "unknown"  # judged, never "true"


@pytest.mark.slow
def test_pause_under_load_gives_info_sends_and_loses_no_acknowledged_message(tmp_path):
    """Workload + ProcessNemesis on a broker process: a pause longer than the client timeout
    makes in-doubt sends (info, new process ids); after resume and drain nothing acked is lost."""
    from chaos.nemesis import ProcessNemesis
    from conformance.targets.reference.process import ReferenceBrokerProcess
    from conformance.targets.runtime.node import ProcessNode

    broker = ReferenceBrokerProcess(name="w-pause", http=False).start()
    try:
        make = functools.partial(connect, "127.0.0.1", broker.stomp_port, "stomp", timeout=0.5)
        with History(tmp_path / "h.jsonl", run="p1", target="reference", node="A") as history:
            workload = QueueWorkload(history, make, destination="queue://w.p", producers=2, consumers=1,
                                     rate=50, receive_timeout=0.2)
            with ProcessNemesis(ProcessNode("A", broker), history, node="A") as nemesis:
                workload.start()
                workload._stop_producers.wait(0.5)
                nemesis.invoke("pause")
                workload._stop_producers.wait(1.5)
                nemesis.invoke("resume")
                workload._stop_producers.wait(1.0)
                workload.stop()
            workload.drain(quiet=0.5)
        events = read_history(tmp_path / "h.jsonl")
    finally:
        broker.stop()
    assert_well_formed(events)
    sent_ok = {e["value"]["id"] for e in events if e["type"] == "ok" and e["f"] == "send"}
    in_doubt = {e["value"]["id"] for e in events if e["type"] == "info" and e["f"] == "send"}
    seen = consumed_ids(events)
    # An ack cut off by the pause is in doubt: the broker may have applied it after resume, so
    # that message may be consumed without an ok ack and without showing up in the drain.
    ack_in_doubt = {e["value"]["id"] for e in events if e["type"] == "info" and e["f"] == "ack"}
    assert in_doubt, "a 1.5 s pause with a 0.5 s client timeout must leave sends in doubt"
    lost = sent_ok - set(seen) - ack_in_doubt
    assert not lost, f"lost: {sorted(lost)[:10]}"
    assert set(seen) <= sent_ok | in_doubt, "unexpected messages"
    windows = [w for e in events if e["process"] == "nemesis" for w in e["value"].get("fault_window", [])]
    assert [w["fault"] for w in windows] == ["paused"]


def test_every_completion_names_the_node_that_served_it(broker, tmp_path):
    """Issue 18: send / receive / ack / drain completions carry ``node``, the node's name when the
    workload has the address -> node map."""
    port = broker.ports["stomp"]
    with History(tmp_path / "h.jsonl", run="n1", target="reference") as h:
        workload = QueueWorkload(h, factory(broker), destination="queue://w.node", producers=1, consumers=1,
                                 rate=100, receive_timeout=0.2, node_names={f"127.0.0.1:{port}": "B"})
        workload.start()
        while workload.received_ok < 10 and not workload.errors:
            workload._stop_producers.wait(0.05)
        workload.stop()
        workload.drain(quiet=0.3)
    events = read_history(h.path)
    assert workload.errors == []
    served = [e for e in events if e["f"] in ("send", "receive", "ack", "drain") and e["type"] != "invoke"]
    assert {e["f"] for e in served} == {"send", "receive", "ack", "drain"}
    assert {e["node"] for e in served} == {"B"}, "a completion without the serving node's name"
    # invokes and connects say nothing about a node (no default node on this history)
    assert {e["node"] for e in events if e["type"] == "invoke"} == {None}


def test_a_failover_client_is_named_by_its_current_endpoint_without_a_map(broker, tmp_path):
    from conformance.clients import connect_failover
    port = broker.ports["stomp"]
    uri = f"failover:(tcp://127.0.0.1:{port})?maxReconnectAttempts=0"
    with History(tmp_path / "h.jsonl", run="n2", target="reference") as h:
        workload = QueueWorkload(h, lambda: connect_failover(uri, "stomp"), destination="queue://w.node2",
                                 producers=1, consumers=0, rate=200)
        workload.start()
        while workload.sent_ok < 5 and not workload.errors:
            workload._stop_producers.wait(0.05)
        workload.stop()
    events = read_history(h.path)
    sends = [e for e in events if e["f"] == "send" and e["type"] == "ok"]
    assert sends and {e["node"] for e in sends} == {f"127.0.0.1:{port}"}


def test_node_names_maps_each_list_of_addresses_onto_the_nodes_in_order():
    from chaos.experiment import node_names
    assert node_names(("A", "B"), [("h", 1), ("h", 2)], [("p", 7), ("p", 8)]) == {
        "h:1": "A", "h:2": "B", "p:7": "A", "p:8": "B"}
    with pytest.raises(ValueError, match="1 addresses for 2 nodes"):
        node_names(("A", "B"), [("h", 1)])


def test_stop_after_a_start_interrupted_by_a_signal_does_not_raise(history, monkeypatch):
    """SIGTERM makes brokerconf raise SystemExit from its handler, which can land while
    ``Thread.start`` waits for the new thread (seen in CI: stop() then failed with "cannot join
    thread before it is started" and the run exited 1 instead of 143)."""
    import threading

    def interrupted_start(self):
        raise SystemExit(143)

    workload = QueueWorkload(history, lambda: None, producers=1, consumers=1, join_timeout=1.0)
    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(SystemExit):
        workload.start()
    monkeypatch.undo()
    workload.stop()  # must not raise
    assert not workload.errors
