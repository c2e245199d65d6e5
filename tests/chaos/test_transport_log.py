"""chaos/transport_log.py: the failover transport's events of a run, on the history's clock."""
from __future__ import annotations

import json
import threading
import time

from chaos.transport_log import TransportLog, worker_of_thread
from conformance.clients.failover import TransportEvent


def event(kind: str, at_s: float, uri: str | None = "stomp://127.0.0.1:61613", reason: str = "") -> TransportEvent:
    return TransportEvent(kind, at_s, time.time(), uri, reason)


def test_worker_threads_are_named_by_their_role_and_index():
    assert worker_of_thread("bc-queue-consumer-0") == "consumer-0"
    assert worker_of_thread("bc-grouped-queue-producer-12") == "producer-12"
    assert worker_of_thread("bc-topic-consumer-3") == "consumer-3"
    assert worker_of_thread("MainThread") == "drain"  # the final drain runs on the caller's thread


def test_events_are_written_on_the_history_clock_and_counted_per_worker(tmp_path):
    path = tmp_path / "transport.jsonl"
    log = TransportLog(path, start_ns=5_000_000_000)  # the run started at monotonic 5 s
    consumer, producer = log.listener("consumer-0"), log.listener("producer-1")
    consumer(event("interrupted", 7.25, reason="connection lost"))
    producer(event("interrupted", 7.5))
    consumer(event("resumed", 9.0, uri="stomp://127.0.0.1:61614"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]  # flushed as they happen
    log.close()
    assert [(e["time"], e["worker"], e["kind"]) for e in lines] == [
        (2_250_000_000, "consumer-0", "interrupted"), (2_500_000_000, "producer-1", "interrupted"),
        (4_000_000_000, "consumer-0", "resumed")]
    assert lines[0]["reason"] == "connection lost" and lines[2]["uri"] == "stomp://127.0.0.1:61614"
    assert log.summary() == {"consumer-0": {"interrupted": 1, "resumed": 1}, "producer-1": {"interrupted": 1}}


def test_an_event_after_the_run_closed_the_log_is_counted_but_not_written(tmp_path):
    path = tmp_path / "transport.jsonl"
    log = TransportLog(path, start_ns=0)
    log.close()
    log.record("consumer-0", event("failed", 1.0))  # a client's monitor reporting late must not raise
    assert path.read_text() == "" and log.summary() == {"consumer-0": {"failed": 1}}


def test_events_from_many_threads_stay_whole_lines(tmp_path):
    path = tmp_path / "transport.jsonl"
    log = TransportLog(path, start_ns=0)

    def report(worker: str) -> None:
        for i in range(200):
            log.record(worker, event("warning", 1.0 + i, reason="x" * 500))

    threads = [threading.Thread(target=report, args=(f"consumer-{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 800 and {e["worker"] for e in lines} == {f"consumer-{n}" for n in range(4)}
    assert log.summary() == {f"consumer-{n}": {"warning": 200} for n in range(4)}
