"""A message store in a PostgreSQL database: the reference broker's side of the A-MQ guide's
JDBC master/slave (3.2), where every broker of a group uses the same tables and a lease in the
same database decides who is master (reference_broker/ha/lease.py).

Like ActiveMQ's plain ``jdbcPersistenceAdapter`` (the one the guide requires, not the journaled
one) the database is the store: nothing is kept on a broker's disk. The engine's calls are
buffered and written at `flush` in one transaction (the group commit the journal does with one
fsync), so a receipt leaves only after the database has committed the batch. Tables:

* ``brokerconf_messages``: ``store_key``, ``message_id`` (the key), ``seq`` (the position; an
  add of a live id replaces it in place, keeping its place), ``redelivery``, ``body`` (the
  journal's binary message encoding, ``store/journal.py encode_message``);
* ``brokerconf_durable``: ``sub_key`` -> its metadata as JSON.

Every flush is bounded in time (store/bounded_db.py): a database that stops answering fails the
flush with `StoreError` (the batch is not confirmed to anyone) instead of holding the broker's
event loop, and so does every later call: like the journal after a failed write, a store that
failed once is unusable (its connection may have committed or not), and the master/slave runner
gives the store up with its lease.
"""

from __future__ import annotations

import json
import logging

from reference_broker.engine.message import Message
from reference_broker.store.base import RecoveredState, StoreError, StoreStalled
from reference_broker.store.bounded_db import BoundedConnection, DatabaseTimeout, dsn_without_password, one_line
from reference_broker.store.journal import decode_message, encode_message

__all__ = ["DatabaseStore", "create_schema", "SCHEMA_BUDGET_S"]

log = logging.getLogger("reference_broker.store")

MESSAGES = "brokerconf_messages"
DURABLE = "brokerconf_durable"

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {MESSAGES} (store_key text NOT NULL, message_id text NOT NULL, "
    "seq bigserial, redelivery integer NOT NULL DEFAULT 0, body bytea NOT NULL, "
    "PRIMARY KEY (store_key, message_id))",
    f"CREATE INDEX IF NOT EXISTS {MESSAGES}_order ON {MESSAGES} (store_key, seq)",
    f"CREATE TABLE IF NOT EXISTS {DURABLE} (sub_key text PRIMARY KEY, metadata text NOT NULL)",
)


#: how long a broker starting up waits for the database to create the tables: no lease runs yet
#: and no client waits, so this budget is about a slow database (a first DDL commit waits for its
#: fsync, a new connection for a forked backend), not about anything the lease must bound
SCHEMA_BUDGET_S = 15.0


def create_schema(dsn: str, budget_s: float = SCHEMA_BUDGET_S, connect=None) -> None:
    """Create the tables if they do not exist yet, on a connection of its own. The master/slave
    runner calls it once at start-up, before it tries the lock: then the store a new master opens
    inside its lease (`DatabaseStore`, bounded by the lease) finds them there and only reads the
    catalogue, instead of writing and syncing it while the lease runs. Raises `DatabaseTimeout`
    or the driver's error."""
    db = BoundedConnection(dsn, connect)
    try:
        db.call(budget_s, lambda conn: [conn.execute(statement) for statement in _SCHEMA])
    finally:
        db.close()


class DatabaseStore:
    """A `MessageStore` (store/base.py) on PostgreSQL. ``call_timeout_s`` bounds each call,
    including the first (connect and create the tables if they are missing: `create_schema`
    made them ahead where a broker runs as master or slave)."""

    def __init__(self, dsn: str, *, call_timeout_s: float = 10.0, connect=None) -> None:
        self.dsn = dsn
        self.call_timeout_s = call_timeout_s
        self._db = BoundedConnection(dsn, connect)
        self._pending: list[tuple[str, tuple]] = []
        self._failed: BaseException | None = None
        self._closed = False
        self._abandoned = False
        self._committed_batches = 0
        self._run(lambda conn: [conn.execute(statement) for statement in _SCHEMA], "create the tables")

    # ------------------------------------------------------------------ MessageStore

    def add(self, store_key: str, message: Message) -> None:
        self._queue(f"INSERT INTO {MESSAGES} (store_key, message_id, body) VALUES (%s, %s, %s) "
                    "ON CONFLICT (store_key, message_id) DO UPDATE SET body = excluded.body, redelivery = 0",
                    (store_key, message.message_id, encode_message(message)))

    def remove(self, store_key: str, message_id: str) -> None:
        self._queue(f"DELETE FROM {MESSAGES} WHERE store_key = %s AND message_id = %s", (store_key, message_id))

    def update_redelivery(self, store_key: str, message_id: str, count: int) -> None:
        self._queue(f"UPDATE {MESSAGES} SET redelivery = %s WHERE store_key = %s AND message_id = %s",
                    (count, store_key, message_id))

    def add_durable_subscription(self, sub_key: str, metadata: dict) -> None:
        self._queue(f"INSERT INTO {DURABLE} (sub_key, metadata) VALUES (%s, %s) "
                    "ON CONFLICT (sub_key) DO UPDATE SET metadata = excluded.metadata",
                    (sub_key, json.dumps(metadata)))

    def remove_durable_subscription(self, sub_key: str) -> None:
        self._queue(f"DELETE FROM {DURABLE} WHERE sub_key = %s", (sub_key,))
        self._queue(f"DELETE FROM {MESSAGES} WHERE store_key = %s", (sub_key,))

    def flush(self) -> None:
        """Write the batch in one transaction; cheap when nothing is pending."""
        if not self._pending or self._abandoned:
            return
        batch, self._pending = self._pending, []

        def write(conn) -> None:
            with conn.transaction():
                with conn.cursor() as cursor:
                    for statement, params in batch:
                        cursor.execute(statement, params)

        self._run(write, f"commit a batch of {len(batch)} changes")
        self._committed_batches += 1

    def recover(self) -> RecoveredState:
        def read(conn) -> RecoveredState:
            state = RecoveredState()
            rows = conn.execute(f"SELECT store_key, message_id, redelivery, body FROM {MESSAGES} "
                                "ORDER BY store_key, seq").fetchall()
            for store_key, message_id, redelivery, body in rows:
                data = bytes(body)
                state.messages.setdefault(store_key, []).append(decode_message(data, 0, len(data)))
                if redelivery:
                    state.redelivery_counts[(store_key, message_id)] = redelivery
            for sub_key, metadata in conn.execute(f"SELECT sub_key, metadata FROM {DURABLE}").fetchall():
                state.durable_subscriptions[sub_key] = json.loads(metadata)
            return state

        return self._run(read, "read the stored messages")

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._failed is None and not self._abandoned:
                self.flush()
        finally:
            self._closed = True
            self._db.close()

    def abandon(self) -> None:
        """Drop what is pending and every later write (the master lost its lease): what was not
        committed was never confirmed, and only the new master may write now."""
        self._abandoned = True
        self._pending.clear()
        self._closed = True
        self._db.abandon()

    def stats(self) -> dict:
        return {"kind": "database", "database": dsn_without_password(self.dsn), "pending": len(self._pending),
                "committed_batches": self._committed_batches, "failed": str(self._failed) if self._failed else None}

    # ------------------------------------------------------------------ internals

    def _queue(self, statement: str, params: tuple) -> None:
        self._check()
        if not self._abandoned:
            self._pending.append((statement, params))

    def _check(self) -> None:
        if self._failed is not None:
            raise StoreError(f"the database store failed earlier and is unusable: {self._failed}")
        if self._closed and not self._abandoned:
            raise StoreError("the database store is closed")

    def _run(self, operation, what: str):
        self._check()
        try:
            return self._db.call(self.call_timeout_s, operation)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the outcome unknown
            self._failed = exc
            self._db.abandon()
            log.error("database store: could not %s: %s", what, exc)
            # a database that did not answer in time is slow or out of reach, not broken
            error = StoreStalled if isinstance(exc, DatabaseTimeout) else StoreError
            raise error(f"could not {what} in the database ({dsn_without_password(self.dsn)}): "
                        f"{one_line(exc)}") from exc
