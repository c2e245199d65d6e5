"""A lease in a database as the master/slave lock (A-MQ "Fault Tolerant Messaging" guide, 3.2:
the brokers of a JDBC group are master or slave by a lock on a database table).

A row lock held by an open transaction (ActiveMQ's older ``DefaultDatabaseLocker``) outlives a
master that is cut off from the database but still runs, and a TCP connection to a database can
take minutes to die. ActiveMQ's ``LeaseDatabaseLocker`` holds the lock as a lease instead, and
this locker has its semantics (REFERENCES.md, "Lockers"):

* one row (``id = 1``) names the holder and the time its lease ends, in milliseconds since the
  epoch (ActiveMQ's ``ACTIVEMQ_LOCK`` table: ``BROKER_NAME``, ``TIME``);
* a slave's attempt (every ``lock_acquire_sleep_interval``) takes the row only when the lease has
  ended, setting itself holder for one lease;
* the lease lasts ``lock_acquire_sleep_interval`` (ActiveMQ uses the same setting for both: a
  slave polling at that interval sees an abandoned lease end within about two intervals);
* the master renews it at each keep-alive check (``lock_keep_alive_period``, which must be shorter
  than the lease), by updating the row where it is still the holder, so a renewal can never take
  a lease another broker got in the meantime;
* clocks: the times are the brokers' own clocks. When ``max_allowable_diff_from_db_time`` is above
  zero and the database's clock differs from ours by more than that, ActiveMQ shifts its own time
  by the difference; so do we. At 0 (ActiveMQ's default) no adjustment is made, and a broker
  whose clock runs ahead can take a lease that has not ended (tests show it: the option exists
  for that).

One rule ActiveMQ leaves to timing, this locker makes explicit, because the harness cuts database
links on purpose: **a master whose lease lapses stops before another broker can take over.** Every
call to the database is bounded by the time the lease has left (less a margin for the broker to
close its listeners): a renewal that has not answered by then counts as failed, the runner
abandons the store, and only then can the lease end for the others. (store/bounded_db.py: libpq has no
client-side query timeout, and a database that is paused or behind a partition never answers).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..store.bounded_db import BoundedConnection, DatabaseTimeout, dsn_without_password, one_line
from .locker import LockerError

__all__ = ["LeaseDatabaseLocker"]

log = logging.getLogger("reference_broker.ha")

#: what the master keeps of its lease to stop serving before it ends (close listeners, abort)
STOP_MARGIN_S = 0.5
TABLE = "brokerconf_lock"


class LeaseDatabaseLocker:
    """The `Locker` (reference_broker.ha.locker) of a JDBC-style group, on PostgreSQL.

    ``connect(dsn)`` opens a DB-API connection in autocommit mode (psycopg by default); ``clock``
    is this broker's clock in seconds (a seam for the clock-difference tests)."""

    def __init__(self, dsn: str, *, holder: str, lease_ms: int, max_allowable_diff_from_db_time_ms: int = 0,
                 connect: Callable[[str], Any] | None = None, clock: Callable[[], float] = time.time) -> None:
        if lease_ms <= 0:
            raise ValueError("the lease (lock_acquire_sleep_interval) must be > 0 ms")
        self.dsn = dsn
        self.holder = holder
        self.lease_s = lease_ms / 1000
        self.max_diff_s = max_allowable_diff_from_db_time_ms / 1000
        self._db = BoundedConnection(dsn, connect)
        self._clock = clock
        self._offset_s = 0.0  # added to our clock when the database's differs too much
        self._lease_end: float | None = None  # on our (offset) clock, while held
        # True from a successful acquire until release: the table may name us even after we
        # counted the lease lost (a renewal abandoned unanswered can still commit later)
        self._may_be_named = False

    # ------------------------------------------------------------------ Locker

    @property
    def held(self) -> bool:
        return self._lease_end is not None

    def describe(self) -> str:
        return f"lease on the database lock table {TABLE} ({dsn_without_password(self.dsn)})"

    def try_acquire(self) -> bool:
        """One attempt by a slave: take the lease if it has ended (or was never taken)."""
        if self.held:
            return True
        try:
            return self._db.call(self.lease_s, self._acquire)
        except DatabaseTimeout as exc:
            raise LockerError(110, str(exc)) from None
        except Exception as exc:  # a driver error: the database cannot be reached or refused us
            self._db.close()
            raise LockerError(5, f"cannot try the {self.describe()}: {one_line(exc)}") from None

    def keep_alive(self) -> bool:
        """The master's check: renew the lease while still its holder, within what is left of it."""
        if self._lease_end is None:
            return False
        left = self._lease_end - self._now() - STOP_MARGIN_S
        if left <= 0:
            log.error("the lease ran out before it could be renewed")
            self._lease_end = None
            return False
        try:
            renewed = self._db.call(left, self._renew)
        except DatabaseTimeout:
            log.error("the database did not answer the lease renewal within the %.1f s the lease had left", left)
            renewed = False
        except Exception as exc:
            log.error("cannot renew the lease: %s", one_line(exc))
            self._db.close()
            renewed = False
        if not renewed:
            self._lease_end = None
        return renewed

    def release(self) -> None:
        """Give the lease back (ActiveMQ: holder cleared, time 0), if we can reach the database; a
        lease we cannot clear ends by itself. Also after a lost lease: the row is cleared only
        where it still names us."""
        named, self._lease_end, self._may_be_named = self._may_be_named, None, False
        if named:
            try:
                self._db.call(self.lease_s, lambda conn: conn.execute(
                    f"UPDATE {TABLE} SET holder = NULL, lease_end_ms = 0 WHERE id = 1 AND holder = %s", (self.holder,)))
            except Exception as exc:  # noqa: BLE001 - releasing is best effort by design
                log.warning("could not clear the lease (it will end by itself): %s", one_line(exc))
        self._db.close()

    # ------------------------------------------------------------------ statements

    def _acquire(self, conn) -> bool:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id integer PRIMARY KEY, holder text, lease_end_ms bigint)")
        conn.execute(f"INSERT INTO {TABLE} (id, holder, lease_end_ms) VALUES (1, NULL, 0) ON CONFLICT (id) DO NOTHING")
        self._adjust_clock(conn)
        now = self._now()
        cursor = conn.execute(
            f"UPDATE {TABLE} SET holder = %s, lease_end_ms = %s WHERE id = 1 AND (lease_end_ms IS NULL OR lease_end_ms < %s)",
            (self.holder, _ms(now + self.lease_s), _ms(now)))
        if cursor.rowcount == 1:
            self._lease_end = now + self.lease_s
            self._may_be_named = True
            return True
        return False

    def _renew(self, conn) -> bool:
        # "now" is read before the statement goes out: the lease we count on is never longer
        # than the one the database records
        now = self._now()
        cursor = conn.execute(f"UPDATE {TABLE} SET lease_end_ms = %s WHERE id = 1 AND holder = %s",
                              (_ms(now + self.lease_s), self.holder))
        if cursor.rowcount != 1:
            row = conn.execute(f"SELECT holder FROM {TABLE} WHERE id = 1").fetchone()
            log.error("the lease is no longer ours: the lock table names %s", row[0] if row else "nobody")
            return False
        self._lease_end = now + self.lease_s
        return True

    def _adjust_clock(self, conn) -> None:
        if self.max_diff_s <= 0:
            return
        db_s = float(conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])
        diff = db_s - self._clock()
        if abs(diff) > self.max_diff_s:
            if abs(diff - self._offset_s) > 0.001:
                log.warning("the database clock differs from ours by %.3f s (allowed %.3f s): using its time",
                            diff, self.max_diff_s)
            self._offset_s = diff
        else:
            self._offset_s = 0.0

    def _now(self) -> float:
        return self._clock() + self._offset_s


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
