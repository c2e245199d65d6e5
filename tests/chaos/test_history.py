"""The history format (chaos/history.py): round trip, pairing rules, crash safety, concurrency."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from chaos.history import History, HistoryError, HistoryFormatError, message_value, read_history

ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "h.jsonl"
    with History(path, run="r1", target="reference", node="A") as history:
        value = message_value("r1-0-0", 0, 0, "queue://q", group="g1")
        op = history.invoke(0, "send", value)
        history.ok(op)
        op = history.invoke(1, "send", message_value("r1-1-0", 1, 0, "queue://q"))
        history.fail(op, "the broker answered ERROR")
        op = history.invoke(2, "receive", None, node="B")
        history.ok(op, value)
        history.nemesis("kill", {"phase": "start"})
    events = read_history(path)
    assert [e["index"] for e in events] == list(range(7))
    assert [e["type"] for e in events] == ["invoke", "ok", "invoke", "fail", "invoke", "ok", "info"]
    assert events[0] == {"index": 0, "time": events[0]["time"], "process": 0, "type": "invoke", "f": "send",
                         "value": {"id": "r1-0-0", "producer": 0, "seq": 0, "destination": "queue://q",
                                   "group": "g1"},
                         "target": "reference", "node": "A", "run": "r1"}
    assert events[1]["value"] == events[0]["value"], "ok defaults to the invoked value"
    assert events[3]["error"] == "the broker answered ERROR"
    assert "group" not in events[2]["value"], "no group key when the message has no group"
    assert events[4]["node"] == "B" and events[5]["node"] == "B", "per-operation node override"
    assert events[6]["process"] == "nemesis" and events[6]["type"] == "info"
    times = [e["time"] for e in events]
    assert times == sorted(times) and times[0] >= 0


def test_info_retires_the_process(tmp_path):
    with History(tmp_path / "h.jsonl", run="r") as history:
        op = history.invoke(3, "send", {"id": "x"})
        history.info(op, "no RECEIPT within 5s; the outcome is unknown")
        assert history.retired(3)
        with pytest.raises(HistoryError, match="process 3 .*new process id"):
            history.invoke(3, "send", {"id": "y"})
        history.ok(history.invoke(4, "send", {"id": "y"}))  # the workload's replacement process
    assert [e["process"] for e in read_history(tmp_path / "h.jsonl")] == [3, 3, 4, 4]


def test_one_open_operation_per_process_and_one_completion_per_invoke(tmp_path):
    with History(tmp_path / "h.jsonl", run="r") as history:
        op = history.invoke(0, "send", 1)
        with pytest.raises(HistoryError, match="still open"):
            history.invoke(0, "send", 2)
        history.ok(op)
        with pytest.raises(HistoryError, match="already completed"):
            history.fail(op, "again")
        assert history.pending == []


def test_refuses_to_append_to_an_existing_history(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"index": 0}\n')
    with pytest.raises(HistoryError, match="already has content"):
        History(path, run="r")


def test_malformed_line_is_reported_with_file_and_line(tmp_path):
    path = tmp_path / "h.jsonl"
    good = {"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send", "value": None}
    path.write_text(json.dumps(good) + "\n" + "{not json\n")
    with pytest.raises(HistoryFormatError, match=rf"{path.name}:2: not valid JSON"):
        read_history(path)
    path.write_text(json.dumps({**good, "type": "done"}) + "\n")
    with pytest.raises(HistoryFormatError, match=r":1: type 'done'"):
        read_history(path)
    path.write_text(json.dumps({**good, "process": "client"}) + "\n")
    with pytest.raises(HistoryFormatError, match=r":1: process must be"):
        read_history(path)


def test_torn_last_line_can_be_tolerated(tmp_path):
    path = tmp_path / "h.jsonl"
    good = {"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "send", "value": None}
    path.write_text(json.dumps(good) + "\n" + '{"index": 1, "ti')
    with pytest.raises(HistoryFormatError, match=":2:"):
        read_history(path)
    assert read_history(path, tolerate_torn_tail=True) == [good]


_WRITER = """
import sys
from chaos.history import History
history = History(sys.argv[1], run="crash")
n = 0
while True:
    op = history.invoke(n, "send", {"id": f"crash-0-{n}", "pad": "x" * 300})
    history.ok(op)
    n += 1
    if n == 500:
        print("ready", flush=True)
"""


def test_sigkill_of_the_writer_loses_no_recorded_line(tmp_path):
    path = tmp_path / "h.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # this test's own child, by its PID
        proc.wait(10)
        proc.stdout.close()
    # The kernel may cut the write in progress at a page boundary (chaos/history.py, about 1 kill
    # in 75 here): only an unterminated last line may be dropped, and it must be the beginning of
    # the next event. Every terminated line is read strictly.
    data = path.read_bytes()
    tail = data[data.rfind(b"\n") + 1:]
    events = read_history(path, tolerate_torn_tail=True)
    if tail:
        next_event = b'{"index":%d,' % len(events)
        assert next_event.startswith(tail) or tail.startswith(next_event), tail[:80]
    assert len(events) >= 1000
    assert [e["index"] for e in events] == list(range(len(events)))
    # Every ok that made it to the file has its invoke before it.
    invoked = {e["process"] for e in events if e["type"] == "invoke"}
    assert {e["process"] for e in events if e["type"] == "ok"} <= invoked


def test_concurrent_writers_get_unique_ordered_indexes(tmp_path):
    path = tmp_path / "h.jsonl"
    threads_n, ops_n = 8, 300
    with History(path, run="r") as history:
        def work(t: int) -> None:
            for i in range(ops_n):
                op = history.invoke(t, "send", {"id": f"r-{t}-{i}"})
                history.ok(op)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for t in threads:
            t.start()
        history.nemesis("pause", {"phase": "start"})
        for t in threads:
            t.join()
    events = read_history(path)
    assert len(events) == threads_n * ops_n * 2 + 1
    assert [e["index"] for e in events] == list(range(len(events)))
    times = [e["time"] for e in events]
    assert times == sorted(times), "index order is time order"
    for t in range(threads_n):
        mine = [e for e in events if e["process"] == t]
        assert [e["type"] for e in mine] == ["invoke", "ok"] * ops_n
        assert [e["value"]["id"] for e in mine[::2]] == [f"r-{t}-{i}" for i in range(ops_n)]


def test_odd_values_are_recorded_not_raised(tmp_path):
    with History(tmp_path / "h.jsonl", run="r") as history:
        op = history.invoke(0, "send", {"body": b"\x00raw"})
        history.info(op, ConnectionResetError("reset by peer"))
    events = read_history(tmp_path / "h.jsonl")
    assert events[0]["value"] == {"body": "b'\\x00raw'"}
    assert events[1]["error"] == "reset by peer"


def test_a_completion_may_name_the_node_that_served_it(tmp_path):
    """Issue 18: the node of a completion overrides the invoke's (and the history's default)."""
    with History(tmp_path / "h.jsonl", run="r", target="t", node="A") as h:
        sent = h.ok(h.invoke(0, "send", {"id": "m"}), node="B")
        failed = h.fail(h.invoke(0, "send", {"id": "n"}), "refused")
        unknown = h.info(h.invoke(0, "send", {"id": "o"}), "timeout", node="C")
    assert (sent["node"], failed["node"], unknown["node"]) == ("B", "A", "C")
    assert [e["node"] for e in read_history(tmp_path / "h.jsonl")] == ["A", "B", "A", "A", "A", "C"]
