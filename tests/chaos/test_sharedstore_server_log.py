"""The store server's log (its lease expiries) outlives the server: a lock-loss run keeps it with
the brokers' logs (conformance/targets/runtime/shared_group.group_log_tail), read after the run
stopped its store."""

from __future__ import annotations

import time
from pathlib import Path

from machinery.sharedstore.control import control
from machinery.sharedstore.harness import StoreServerProcess


def test_the_store_servers_log_is_kept_after_it_stopped():
    server = StoreServerProcess(lease=30.0).start()
    try:
        control(server.address, {"op": "hello", "client": "A"})
        assert control(server.address, {"op": "expire", "client": "A"})["expired_sessions"]
        path = Path(server.log.name)
    finally:
        server.stop()
    assert not path.exists(), "the log file itself goes with the server"
    text = server.log_text()
    assert "lease of A" in text and "expired (by request)" in text, text


def test_the_log_says_when_a_lease_ran_out_and_who_got_the_lock_next():
    """A takeover's store side, as the server logs it: the master's exclusive lock, its lease running
    out (found by the expiry loop or by the slave's poll: `on_expire` reports both), the slave's
    lock; the slave's refused polls are not logged."""
    server = StoreServerProcess(lease=1.0).start()
    try:
        a = control(server.address, {"op": "hello", "client": "A"})["session"]
        b = control(server.address, {"op": "hello", "client": "B"})["session"]

        def locked(session: int) -> bool:
            try:
                control(server.address, {"op": "setlk", "session": session, "path": "/lock", "owner": 1,
                                         "kind": "write", "start": 0, "end": 0})
            except RuntimeError as refused:  # "locked by another host"
                assert "locked by another host" in str(refused), refused
                return False
            return True

        assert locked(a)
        assert not locked(b), "A holds it"
        deadline = time.monotonic() + 10
        while not locked(b):  # B's polls also keep its own lease
            assert time.monotonic() < deadline, "B never got the lock"
            time.sleep(0.05)
    finally:
        server.stop()
    lines = server.log_text().splitlines()
    assert [line.split(" store: ")[1] for line in lines] == [
        "exclusive lock on /lock [0..0] granted to A (session 1)",
        "lease of A (session 1) expired (its lease ran out); its locks are released",
        "exclusive lock on /lock [0..0] granted to B (session 2)"], lines
