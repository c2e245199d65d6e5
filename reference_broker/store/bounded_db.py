"""One database connection whose every call has a deadline.

libpq has no client-side query timeout, and a database that is paused or behind a network
partition never answers: a broker that waited on it would hold its event loop (the store) or
outlive its lease (the locker). `BoundedConnection.call` runs the operation on a worker thread and
waits at most the given budget; past it the connection is abandoned by shutting its socket down,
which wakes the blocked thread, and `DatabaseTimeout` is raised. The next call reconnects.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable

__all__ = ["BoundedConnection", "DatabaseTimeout", "psycopg_connect", "dsn_without_password", "one_line"]


class DatabaseTimeout(Exception):
    """The database did not answer within the call's budget."""


def psycopg_connect(dsn: str, connect_timeout_s: int):
    import psycopg  # imported here: only brokers configured with a database need it

    return psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s)


def dsn_without_password(dsn: str) -> str:
    """The DSN for messages and logs."""
    return " ".join(part for part in dsn.split() if not part.startswith("password="))


def one_line(exc: BaseException) -> str:
    """A driver error for a log line: its type and the first line of its text."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class BoundedConnection:
    """``call(budget_s, operation)`` -> ``operation(connection)``, within ``budget_s`` seconds.
    ``connect(dsn, connect_timeout_s)`` opens an autocommit DB-API connection (psycopg's)."""

    def __init__(self, dsn: str, connect: Callable[[str, int], Any] | None = None) -> None:
        self.dsn = dsn
        self._connect = connect or psycopg_connect
        self._conn = None

    def call(self, budget_s: float, operation: Callable[[Any], Any]):
        result: dict = {}

        def work() -> None:
            try:
                if self._conn is None:
                    self._conn = self._connect(self.dsn, max(2, int(budget_s + 0.999)))
                result["value"] = operation(self._conn)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                result["error"] = exc

        worker = threading.Thread(target=work, name="bounded-db-call", daemon=True)
        worker.start()
        worker.join(budget_s)
        if worker.is_alive():
            self.abandon()
            worker.join(1.0)
            raise DatabaseTimeout(f"the database did not answer within {budget_s:.1f} s "
                                  f"({dsn_without_password(self.dsn)})")
        if "error" in result:
            raise result["error"]
        return result["value"]

    def abandon(self) -> None:
        """Wake a thread blocked on the connection by shutting its socket down, and forget it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            sock = socket.socket(fileno=socket.dup(conn.pgconn.socket))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()
        except Exception:  # noqa: BLE001 - already closed or never opened
            pass

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
