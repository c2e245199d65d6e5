"""The store's bounded file I/O (reference_broker/store/bounded_io.py) and the journal on it, with a
fake file whose write blocks the way a write on a cut NFS mount does (until released), so no FUSE
or network is needed. Waits are on events and conditions; no assertion is about speed."""

from __future__ import annotations

import os
import socket
import time
import threading

import pytest

from reference_broker.config import ConfigError, build_config
from reference_broker.engine.message import Message
from reference_broker.store import journal as journal_module
from reference_broker.store.base import SyncPolicy
from reference_broker.store.bounded_io import BoundedIO, IOStalled
from reference_broker.store.journal import JournalIOError, JournalStallError, JournalStore

TIMEOUT_S = 0.3


class BlockingFile:
    """``write`` blocks once ``block()`` was called, until ``release()``: a file on a file system
    that stopped answering. Records what happened so the tests can check the order."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.returned = threading.Event()
        self.calls: list[str] = []

    def block(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def write(self, data: bytes) -> int:
        self.calls.append("write")
        self.entered.set()
        self.gate.wait()
        self.returned.set()
        return len(data)


def test_call_returns_the_operations_result_and_raises_its_error():
    io = BoundedIO(5.0)
    try:
        assert io.call(lambda: 41 + 1, "sum") == 42
        with pytest.raises(ZeroDivisionError):
            io.call(lambda: 1 / 0, "divide")
        assert io.call(lambda: threading.current_thread().name, "where") == "store-io", "runs on the worker"
        assert io.stalled is None, "an operation's own error is not a stall"
    finally:
        io.close()


def test_a_blocked_write_stalls_the_executor_and_every_later_call_fails_at_once():
    f = BlockingFile()
    io = BoundedIO(TIMEOUT_S)
    try:
        f.block()
        with pytest.raises(IOStalled, match=r"fake write did not return within 0.3 s"):
            io.call(lambda: f.write(b"x"), "fake write")
        assert io.stalled == "fake write"
        ran = []
        with pytest.raises(IOStalled, match="an earlier fake write has not returned"):
            io.call(lambda: ran.append(1), "second write")
        assert ran == [], "a stalled executor must not start another operation"
    finally:
        f.release()
        io.close()


def test_checkpoint_stops_an_operation_that_comes_back_after_its_deadline():
    f = BlockingFile()
    io = BoundedIO(TIMEOUT_S)
    after = threading.Event()
    finished = threading.Event()

    def write_then_sync():
        try:
            f.write(b"batch")
            io.checkpoint()
            f.calls.append("sync")  # must not happen: the caller gave up on this batch
        finally:
            finished.set()

    f.block()
    with pytest.raises(IOStalled):
        io.call(write_then_sync, "write and sync")
    io.after_stall(after.set)
    assert not after.is_set(), "cleanup must wait for the stuck call"
    f.release()
    assert finished.wait(10) and after.wait(10), "the stuck call and then the cleanup ran once released"
    assert f.calls == ["write"], f"nothing after the late write: {f.calls}"
    io.close()


def test_after_stall_runs_at_once_when_nothing_is_stuck():
    io = BoundedIO(5.0)
    done = []
    io.after_stall(lambda: done.append(threading.current_thread().name))
    assert done == [threading.current_thread().name]
    io.close()


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s must be above 0"):
        BoundedIO(0)


def message(i: int) -> Message:
    return Message(message_id=f"m{i}", destination="queue://orders", body=f"body-{i}".encode(), persistent=True)


@pytest.fixture
def blocking_journal(tmp_path, monkeypatch):
    """A journal whose segment writes go through a BlockingFile (then to the real file)."""
    f = BlockingFile()
    real_write_all = journal_module._write_all

    def write_all(fd, data):
        f.write(data)
        real_write_all(fd, data)

    monkeypatch.setattr(journal_module, "_write_all", write_all)
    failures: list[BaseException] = []
    store = JournalStore(tmp_path / "journal", sync=SyncPolicy.ALWAYS, io_timeout_s=TIMEOUT_S,
                         on_failure=failures.append)
    store.recover()
    yield store, f, failures
    f.release()
    store.abandon()


def test_journal_flush_that_stalls_fails_the_store_once_and_keeps_what_was_flushed(blocking_journal, tmp_path):
    store, f, failures = blocking_journal
    store.add("queue://orders", message(1))
    store.flush()  # confirmed: its receipt could leave
    store.add("queue://orders", message(2))
    f.block()
    with pytest.raises(JournalStallError, match="journal write did not return within 0.3 s"):
        store.flush()
    assert len(failures) == 1 and isinstance(failures[0], JournalStallError), failures
    with pytest.raises(JournalIOError, match="failed earlier and is unusable"):
        store.add("queue://orders", message(3))
    with pytest.raises(JournalIOError):
        store.flush()
    assert len(failures) == 1, "on_failure is called once"

    store.abandon()  # what the broker does next; the stuck write still holds the segment's fd
    f.release()
    assert f.returned.wait(10)
    recovered = JournalStore(tmp_path / "journal", lock=False)
    try:
        ids = [m.message_id for m in recovered.recover().messages.get("queue://orders", [])]
    finally:
        recovered.close()
    assert ids[:1] == ["m1"], f"the flushed message must survive the stall: {ids}"
    assert "m3" not in ids, f"nothing accepted after the failure was written: {ids}"


def test_journal_syncs_nothing_after_a_stalled_write_returns(blocking_journal, monkeypatch):
    store, f, _ = blocking_journal
    syncs = []
    real = journal_module._fdatasync
    monkeypatch.setattr(journal_module, "_fdatasync", lambda fd: (syncs.append(fd), real(fd)))
    store.add("queue://orders", message(1))
    f.block()
    with pytest.raises(JournalStallError):
        store.flush()
    store.abandon()  # queues the files' close behind the stuck write, then lets the worker end
    f.release()
    worker = store._io._thread
    worker.join(10)
    assert not worker.is_alive(), "the worker ends once the stuck write returned"
    assert syncs == [], f"the late write must not be followed by a sync: {syncs}"


def test_abandon_during_a_stall_closes_the_segment_only_after_the_write_returned(blocking_journal):
    store, f, _ = blocking_journal
    store.add("queue://orders", message(1))
    store.flush()
    fd = store._fd
    store.add("queue://orders", message(2))
    f.block()
    with pytest.raises(JournalStallError):
        store.flush()
    store.abandon()
    os.fstat(fd)  # still open: the stuck write is using it, its number must not be reused yet
    f.release()
    worker = store._io._thread
    worker.join(10)
    assert not worker.is_alive(), "the worker ends once the stuck write returned"
    with pytest.raises(OSError):
        os.fstat(fd)


def test_journal_without_a_deadline_writes_on_the_callers_thread(tmp_path, monkeypatch):
    threads = []
    real_write_all = journal_module._write_all
    monkeypatch.setattr(journal_module, "_write_all",
                        lambda fd, data: (threads.append(threading.current_thread()), real_write_all(fd, data)))
    with JournalStore(tmp_path / "j") as store:
        store.add("queue://orders", message(1))
        store.flush()
    assert threads and all(t is threading.current_thread() for t in threads)


def test_io_timeout_option_default_and_bad_value_named():
    assert build_config({}).store.io_timeout_ms == 5000
    assert build_config({"store": {"io_timeout_ms": 250}}).store.io_timeout_ms == 250
    with pytest.raises(ConfigError, match=r"invalid value for 'store\.io_timeout_ms': .*at least 100"):
        build_config({"store": {"io_timeout_ms": 50}})


# --------------------------------------------------------------------------- a broker on a stalling journal


def test_broker_whose_journal_stalls_stops_serving_without_receipting_the_stalled_send(
        tmp_path, monkeypatch, broker_factory, raw_factory, caplog):
    """In-process counterpart of tests/reference_broker/test_journal_nfs_stall.py: the persistent
    send whose write stalls gets no RECEIPT, its connection and the listener are closed, and what
    was receipted before is in the journal."""
    f = BlockingFile()
    real_write_all = journal_module._write_all

    def write_all(fd, data):
        f.write(data)
        real_write_all(fd, data)

    monkeypatch.setattr(journal_module, "_write_all", write_all)
    directory = tmp_path / "journal"
    running = broker_factory(store={"kind": "journal", "directory": str(directory), "io_timeout_ms": 300})
    client = raw_factory(running.address)
    assert client.connect().command == "CONNECTED"
    client.send_frame("SEND", {"destination": "/queue/orders", "persistent": "true", "receipt": "r1"}, b"one")
    assert client.expect("RECEIPT").get("receipt-id") == "r1"

    f.block()
    try:
        client.send_frame("SEND", {"destination": "/queue/orders", "persistent": "true", "receipt": "r2"}, b"two")
        frames = client.wait_closed(timeout=30)
        assert not [fr for fr in frames if fr.command == "RECEIPT"], f"a stalled write was receipted: {frames}"
        deadline = time.monotonic() + 30
        refused = False
        while not refused and time.monotonic() < deadline:
            try:
                socket.create_connection(running.address, timeout=2).close()
                time.sleep(0.05)
            except ConnectionRefusedError:
                refused = True
        assert refused, "the broker whose store failed still accepts connections"
        assert "its message store failed" in caplog.text
    finally:
        f.release()
    running.stop()
    recovered = JournalStore(directory, lock=False)
    try:
        bodies = [m.body for m in recovered.recover().messages.get("queue://orders", [])]
    finally:
        recovered.close()
    assert bodies[:1] == [b"one"], f"the receipted message must be in the journal: {bodies}"


def test_recovery_read_that_stalls_fails_the_store(tmp_path, monkeypatch):
    directory = tmp_path / "journal"
    with JournalStore(directory) as store:
        store.add("queue://orders", message(1))
        store.flush()
    f = BlockingFile()
    real_read_head = journal_module._read_head
    monkeypatch.setattr(journal_module, "_read_head", lambda path: (f.write(b""), real_read_head(path))[1])
    f.block()
    store = JournalStore(directory, io_timeout_s=TIMEOUT_S, lock=False)
    try:
        with pytest.raises(JournalStallError, match="journal recovery: read a segment header did not return"):
            store.recover()
        with pytest.raises(JournalIOError, match="failed earlier"):
            store.recover()
    finally:
        f.release()
        store.abandon()


def test_a_long_replay_is_not_cut_short_by_the_deadline(tmp_path, monkeypatch):
    """Only file system calls are bounded: a replay slower than the deadline (a big journal, a slow
    CPU) still recovers."""
    directory = tmp_path / "journal"
    with JournalStore(directory) as store:
        for i in range(5):
            store.add("queue://orders", message(i))
        store.flush()
    slow = threading.Event()
    real_apply = JournalStore._apply

    def slow_apply(self, *args):
        slow.wait(TIMEOUT_S / 2)  # five records: more than twice the deadline in all
        return real_apply(self, *args)

    monkeypatch.setattr(JournalStore, "_apply", slow_apply)
    store = JournalStore(directory, io_timeout_s=TIMEOUT_S, lock=False)
    try:
        assert [m.message_id for m in store.recover().messages["queue://orders"]] == [f"m{i}" for i in range(5)]
    finally:
        store.close()
