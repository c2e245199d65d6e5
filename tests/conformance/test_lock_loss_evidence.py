"""What a shared-store group keeps of its logs (each node's, then the simulated NFS store's) and
the lines a lock-loss suite prints of them, so a run whose outcome differs from the others'
carries its timeline into the report (suites/experiment_support.key_log_lines)."""

from __future__ import annotations

from conformance.targets.runtime.shared_group import group_log_tail
from suites.experiment_support import key_log_lines


class _Node:
    def __init__(self, name: str, log: str) -> None:
        self.name, self._log = name, log

    def log_tail(self, lines: int) -> str:
        return self._log


class _Rig:
    def log_tail(self, lines: int) -> str:
        return "11:00:05 store: lease of A (session 1) expired (its lease ran out); its locks are released"


def test_the_group_keeps_each_nodes_log_then_the_store_servers():
    nodes = {"A": _Node("A", "a line"), "B": _Node("B", "b line")}
    kept = group_log_tail(nodes, _Rig(), 10)
    assert kept.splitlines() == ["--- node A ---", "a line", "--- node B ---", "b line", "--- store server ---",
                                 "11:00:05 store: lease of A (session 1) expired (its lease ran out); its locks are released"]
    assert "store server" not in group_log_tail(nodes, object(), 10), "a rig without a log (a database's links)"
    assert "store server" not in group_log_tail(nodes, None, 10)


def test_key_lines_say_who_held_the_store_and_leave_the_per_connection_noise_out(tmp_path):
    log = tmp_path / "broker-log-tail.txt"
    log.write_text("\n".join([
        "--- node A ---",
        "10:00:01 | INFO  | Apache ActiveMQ 5.17.2 (A) started | BrokerService",
        "10:00:20 | WARN  | Transport Connection to: tcp://127.0.0.1:1 failed: broker is being stopped",
        "10:00:20 | INFO  | Suppressing reply to: MessageAck {commandId = 4}",
        "\tat org.apache.activemq.broker.LockableServiceSupport.keepLockAlive(LockableServiceSupport.java:153)",
        "10:00:20 | INFO  | Apache ActiveMQ 5.17.2 (A) is shutting down | BrokerService",
        "--- node B ---",
        "10:00:02 | INFO  | Database /m/B/kahadb/lock is locked by another server. This broker is now in slave mode",
        "10:00:09 | INFO  | some unrelated line",
        "--- store server ---",
        "10:00:07 store: lease of A (session 1) expired (its lease ran out); its locks are released",
    ]))
    assert key_log_lines(log).splitlines() == [
        "key lines of broker-log-tail.txt:",
        "--- node A ---",
        "10:00:01 | INFO  | Apache ActiveMQ 5.17.2 (A) started | BrokerService",
        "10:00:20 | INFO  | Apache ActiveMQ 5.17.2 (A) is shutting down | BrokerService",
        "--- node B ---",
        "10:00:02 | INFO  | Database /m/B/kahadb/lock is locked by another server. This broker is now in slave mode",
        "--- store server ---",
        "10:00:07 store: lease of A (session 1) expired (its lease ran out); its locks are released",
    ]
    assert key_log_lines(log, per_section=1).splitlines()[1:4] == [
        "--- node A ---", "(1 earlier lines in broker-log-tail.txt)",
        "10:00:20 | INFO  | Apache ActiveMQ 5.17.2 (A) is shutting down | BrokerService"], "each section's last lines"
    assert key_log_lines(tmp_path / "missing.txt").startswith("(no broker logs kept:")


def test_key_lines_count_a_repeated_line_once_and_keep_the_store_servers_lock_grants(tmp_path):
    giving_up = "| ERROR | A, no longer able to keep the exclusive lock so giving up being a master | Support"
    log = tmp_path / "broker-log-tail.txt"
    log.write_text("\n".join([
        "--- node A ---",
        *(f"2026-12-01 13:01:49,94{i} {giving_up}" for i in range(3)),
        "2026-12-01 13:01:50,817 | INFO  | Connector stomp stopped | TransportConnector",
        f"2026-12-01 13:01:51,939 {giving_up}",
        "--- store server ---",
        "10:00:08 store: exclusive lock on /kahadb/lock [0..] granted to B (session 2)",
    ]))
    assert key_log_lines(log).splitlines()[1:] == [
        "--- node A ---",
        f"2026-12-01 13:01:49,940 {giving_up}",
        "  (the line above 2 more times)",
        "2026-12-01 13:01:50,817 | INFO  | Connector stomp stopped | TransportConnector",
        f"2026-12-01 13:01:51,939 {giving_up}",
        "--- store server ---",
        "10:00:08 store: exclusive lock on /kahadb/lock [0..] granted to B (session 2)",
    ]
