"""The store server's state about its clients: leases and POSIX byte-range locks. Pure logic with
an injected clock, so the unit tests drive time by hand.

NFSv4 (RFC 7530, section 9.5 "Lease Renewal" and 9.6 "Crash Recovery"): a client holds a lease,
renewed by any request it makes; when the lease runs out the server may release the client's
locks and other clients may take them; the expired client's old state is gone and its later
requests on that state fail (NFS4ERR_EXPIRED) -- it starts a new session, and its lost locks stay
lost. NFSv3 (NLM): locks belong to the client until its status monitor reports a reboot; a client
that crashed or was cut off never reports, so its locks are never released (the guide's
negative: the slave never takes over).

Locks follow fcntl(2) record locks: per owner (here: a session and the kernel's lock owner
cookie), read locks shared, write locks exclusive, ranges split and replaced by the same owner's
later requests, ``end`` inclusive (None: to the end of the file).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

READ, WRITE, UNLOCK = "read", "write", "unlock"


class ExpiredSession(Exception):
    """The session's lease ran out (or was expired by hand): its state is gone (NFS4ERR_EXPIRED)."""


class NoLease(Exception):
    """An operation that needs leases on a server that has none (NFSv3)."""


@dataclass
class Session:
    id: int
    client: str
    expires: float | None   # None: never (NFSv3)
    expired: bool = False


@dataclass(frozen=True)
class Lock:
    path: str
    owner: tuple[int, int]    # (session id, lock owner cookie)
    kind: str                 # READ or WRITE
    start: int
    end: int | None           # inclusive; None = to the end of the file
    pid: int = 0

    def overlaps(self, start: int, end: int | None) -> bool:
        self_end = float("inf") if self.end is None else self.end
        other_end = float("inf") if end is None else end
        return self.start <= other_end and start <= self_end


@dataclass
class LeaseTable:
    """Sessions and their locks. ``lease`` seconds (None: NFSv3, no leases)."""

    lease: float | None
    clock: Callable[[], float]
    sessions: dict[int, Session] = field(default_factory=dict)
    locks: list[Lock] = field(default_factory=list)
    #: (client, session id, when) of every expiry, for the server's log and the tests
    expiries: list[tuple[str, int, float]] = field(default_factory=list)
    #: called with (session, why) at each expiry, whatever found it due: the expiry loop, the
    #: nemesis's request, or another client's request (`touch`, `conflict`), which is usually
    #: first (a slave polling for the lock)
    on_expire: Callable[[Session, str], None] = lambda session, why: None
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    # ------------------------------------------------------------------ sessions

    def open_session(self, client: str) -> Session:
        """A client (re)introduces itself: a new session. The client's earlier sessions end and their
        locks go (a rebooted NFSv4 client with a new verifier; an NLM client's reboot notice)."""
        for old in [s for s in self.sessions.values() if s.client == client]:
            self._drop(old)
        session = Session(next(self._ids), client, self._deadline())
        self.sessions[session.id] = session
        return session

    def _deadline(self) -> float | None:
        return None if self.lease is None else self.clock() + self.lease

    def touch(self, session_id: int) -> Session:
        """Any request of a live session renews its lease (RFC 7530 9.5: implicit renewal); one of an
        expired or unknown session raises `ExpiredSession`."""
        self.expire_due()
        session = self.sessions.get(session_id)
        if session is None or session.expired:
            raise ExpiredSession(f"session {session_id} has expired")
        session.expires = self._deadline()
        return session

    def expire_due(self) -> list[Session]:
        """Expire every session whose lease ran out; their locks are released. Returns them."""
        if self.lease is None:
            return []
        now = self.clock()
        due = [s for s in self.sessions.values() if not s.expired and s.expires is not None and s.expires <= now]
        for session in due:
            self.expire(session.id, "its lease ran out")
        return due

    def expire(self, session_id: int, why: str = "by request") -> Session:
        """End a session's lease now (the nemesis's server-side expiry); NFSv3 has no lease to end."""
        if self.lease is None:
            raise NoLease("NFSv3 has no leases: a client's locks stay until it reports a reboot")
        session = self.sessions[session_id]
        if not session.expired:
            session.expired = True
            self.locks = [lock for lock in self.locks if lock.owner[0] != session.id]
            self.expiries.append((session.client, session.id, self.clock()))
            self.on_expire(session, why)
        return session

    def _drop(self, session: Session) -> None:
        self.sessions.pop(session.id, None)
        self.locks = [lock for lock in self.locks if lock.owner[0] != session.id]

    def sessions_of(self, client: str) -> list[Session]:
        return [s for s in self.sessions.values() if s.client == client]

    # ------------------------------------------------------------------ locks

    def conflict(self, path: str, owner: tuple[int, int], kind: str, start: int, end: int | None) -> Lock | None:
        """The first lock of another owner that a ``kind`` lock on [start, end] would conflict with."""
        self.expire_due()
        for lock in self.locks:
            if lock.path == path and lock.owner != owner and lock.overlaps(start, end) \
                    and WRITE in (lock.kind, kind):
                return lock
        return None

    def set_lock(self, path: str, owner: tuple[int, int], kind: str, start: int, end: int | None,
                 pid: int = 0) -> Lock | None:
        """F_SETLK: take, change or (``UNLOCK``) release [start, end] for ``owner``. Returns the
        conflicting lock (nothing changed) or None (done)."""
        self.touch(owner[0])
        if kind != UNLOCK:
            blocker = self.conflict(path, owner, kind, start, end)
            if blocker is not None:
                return blocker
        kept: list[Lock] = []
        for lock in self.locks:
            if lock.path != path or lock.owner != owner or not lock.overlaps(start, end):
                kept.append(lock)
                continue
            # the same owner's lock: keep the parts outside [start, end] (fcntl(2) splits ranges)
            if lock.start < start:
                kept.append(Lock(path, owner, lock.kind, lock.start, start - 1, lock.pid))
            if end is not None and (lock.end is None or lock.end > end):
                kept.append(Lock(path, owner, lock.kind, end + 1, lock.end, lock.pid))
        if kind != UNLOCK:
            kept.append(Lock(path, owner, kind, start, end, pid))
        self.locks = kept
        return None

    def release_owner(self, session_id: int, owner_cookie: int | None = None, path: str | None = None) -> None:
        """Drop every lock of a session, or of one owner in it, or of that owner on one file."""
        self.locks = [lock for lock in self.locks
                      if not (lock.owner[0] == session_id and (owner_cookie is None or lock.owner[1] == owner_cookie)
                              and (path is None or lock.path == path))]

    def holds(self, path: str, owner: tuple[int, int], kind: str, start: int, end: int | None) -> bool:
        """Whether ``owner`` already holds a ``kind`` lock overlapping [start, end] of ``path``."""
        return any(lock.path == path and lock.owner == owner and lock.kind == kind and lock.overlaps(start, end)
                   for lock in self.locks)

    def locks_of(self, client: str) -> list[Lock]:
        ids = {s.id for s in self.sessions_of(client)}
        return [lock for lock in self.locks if lock.owner[0] in ids]
