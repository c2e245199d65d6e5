"""The master/slave runner (reference_broker/ha/runner.py) when its journal fails or stalls: a
master whose store fails while serving gives mastership up (as when its lock goes), and a new master
whose recovery stalls on the file system waits as a slave again instead of exiting."""

from __future__ import annotations

import asyncio
import errno
import threading

from reference_broker.config import build_config
from reference_broker.engine.message import Message
from reference_broker.ha.runner import MasterSlaveRunner
from reference_broker.store import journal as journal_module
from reference_broker.store.base import StoreError
from reference_broker.store.journal import JournalStore
from tests.reference_broker.test_locker import FakeLocker, Script


def _config(tmp_path, io_timeout_ms: int = 5000):
    return build_config({"name": "t", "stomp": "127.0.0.1:0", "http": None, "data": str(tmp_path),
                         "store": {"kind": "journal", "lock_keep_alive_period": 1000, "io_timeout_ms": io_timeout_ms,
                                   "locker": {"lock_acquire_sleep_interval": 500}}})


def _message(i: int) -> Message:
    return Message(message_id=f"m{i}", destination="queue://orders", body=b"x", persistent=True)


def test_a_master_whose_store_fails_gives_up_mastership_and_serves_again_later(tmp_path, monkeypatch):
    real_write_all = journal_module._write_all
    failures = []

    def write_all(fd, data):
        if not failures:
            failures.append("EIO")
            raise OSError(errno.EIO, "Input/output error")
        real_write_all(fd, data)

    monkeypatch.setattr(journal_module, "_write_all", write_all)
    locker = FakeLocker()
    script = Script(limit=12)
    runner = MasterSlaveRunner(_config(tmp_path), locker=locker, wait=script)
    served = []

    def on_master(server) -> None:
        served.append(server)
        script.events.append("master")
        if len(served) == 1:  # the first mastership's first write fails
            try:
                server.store.add("queue://orders", _message(1))
                server.store.flush()
            except StoreError:
                pass

    runner.on_master = on_master
    asyncio.run(runner.run(asyncio.Event()))
    assert len(served) == 2, f"FT-SHARED-2: the master whose store failed did not give up and serve again: {script.events}"
    assert served[0].store_failed.is_set(), "the first server's store failure was not recorded"
    assert locker.releases == 2, "the lock is given back when the store fails, and on stop"


def test_a_new_master_whose_recovery_stalls_waits_as_a_slave_again(tmp_path, monkeypatch):
    with JournalStore(tmp_path / "journal") as store:  # something to recover (a segment header to read)
        store.add("queue://orders", _message(1))
        store.flush()
    gate = threading.Event()
    calls = []
    real_read_head = journal_module._read_head

    def read_head(path):
        calls.append(path)
        if len(calls) == 1:
            gate.wait(30)  # the file system stops answering for the first read
        return real_read_head(path)

    monkeypatch.setattr(journal_module, "_read_head", read_head)
    locker = FakeLocker()
    script = Script(limit=6)
    runner = MasterSlaveRunner(_config(tmp_path, io_timeout_ms=200), locker=locker, wait=script)
    served = []

    def on_master(server) -> None:
        served.append(server)
        gate.set()

    runner.on_master = on_master
    try:
        asyncio.run(runner.run(asyncio.Event()))
    finally:
        gate.set()
    assert locker.attempts >= 2, f"the runner did not try the lock again after the stalled recovery: {script.events}"
    assert len(served) == 1, f"the second attempt should serve: {script.events}"
    with JournalStore(tmp_path / "journal") as store:
        assert [m.message_id for m in store.recover().messages["queue://orders"]] == ["m1"], \
            "the stalled recovery must not have damaged the journal"
