"""The store server's log (its lease expiries) outlives the server: a lock-loss run keeps it with
the brokers' logs (conformance/targets/runtime/shared_group.group_log_tail), read after the run
stopped its store."""

from __future__ import annotations

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
    assert "lease of A" in text and "expired by request" in text, text
