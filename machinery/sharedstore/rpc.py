"""The client end of a host's storage link: each request waits, retransmits and gives up exactly as
the mount options say (`mountopts`), and a heartbeat renews the lease when the host is idle.

One TCP connection per calling thread (FUSE runs operations on several threads, and one blocked
request must not hold up the heartbeat). A try that gets no answer within its wait closes its
connection; the next try dials again (through the host's proxy), so a partition, a reset or a
latency longer than the wait all look like an unanswered NFS request. A soft mount fails with EIO
after its last retransmission; a hard one logs "not responding, still trying" and goes on for ever.

Lease state (RFC 7530 9.6.3, and the Linux client's lost-lock handling, where a file whose lock
was lost answers EIO): when the server says the session expired, the link opens a new session
(`generation` goes up) and everything tied to the old one -- open files, locks -- is stale: the
mount answers EIO for it. Path operations (lookups, creating files) simply go on in the new session.
"""

from __future__ import annotations

import errno
import itertools
import socket
import sys
import threading
import time

from machinery.waiting import Deadline

from . import wire
from .mountopts import MountOptions


class SessionExpired(Exception):
    """The server no longer knows the session the request ran in; `StoreLink.generation` moved on."""


class StoreLink:
    def __init__(self, address: str, client: str, options: MountOptions, *, log=None) -> None:
        host, _, port = address.rpartition(":")
        self.address = (host.strip("[]"), int(port))
        self.client = client
        self.options = options
        self.log = log or (lambda message: print(f"{time.strftime('%H:%M:%S')} mount {client}: {message}",
                                                 file=sys.stderr, flush=True))
        self._local = threading.local()
        self._xids = itertools.count(1)
        self._session_lock = threading.Lock()
        self.session: int | None = None
        self.lease: float | None = None
        self.generation = 0
        self.stopping = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # ------------------------------------------------------------------ one request, with retries

    def _socket(self, timeout: float) -> socket.socket:
        sock = getattr(self._local, "sock", None)
        if sock is None:
            sock = socket.create_connection(self.address, timeout=max(timeout, 0.001))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._local.sock = sock
        return sock

    def _drop_socket(self) -> None:
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _try(self, frame: bytes, xid: int, wait: float) -> tuple[dict, bytes] | None:
        """One transmission; the reply, or None when none came within ``wait`` seconds."""
        deadline = Deadline(wait)
        try:
            sock = self._socket(wait)
            sock.settimeout(max(deadline.remaining(), 0.001))
            sock.sendall(frame)
            # a reader, not a `wait_until`: each round blocks in recv for what is left of the wait
            while True:
                sock.settimeout(max(deadline.remaining(), 0.001))
                reply, data = wire.recv_frame(sock)
                if reply.get("xid") == xid:
                    return reply, data
                # an answer to an abandoned earlier try on this connection: not ours
        except (OSError, wire.ProtocolError, ValueError):
            self._drop_socket()
        # refused or reset at once: the wait still runs out before the retransmission, as an
        # NFS client's timer does, so the schedule is the options' and not the network's
        left = deadline.remaining()
        if left > 0:
            self.stopping.wait(left)
        return None

    def call(self, op: str, data: bytes = b"", **args) -> tuple[dict, bytes]:
        """Send one request until answered (hard) or until the retransmissions are spent (soft: EIO).
        Raises `SessionExpired` or OSError(errno) as the server answers."""
        xid = next(self._xids)
        frame = wire.encode({"op": op, "xid": xid, **args}, data)
        tries, warned = 0, False
        while True:
            wait = min(self.options.timeo * (tries + 1), 600) / 10.0   # mountopts.MountOptions.waits
            answer = self._try(frame, xid, wait)
            if answer is not None:
                if warned:
                    self.log("server OK")
                reply, payload = answer
                if reply.get("expired"):
                    raise SessionExpired(reply.get("error", "session expired"))
                if reply.get("errno"):
                    raise OSError(reply["errno"], reply.get("error", ""))
                return reply, payload
            tries += 1
            if self.stopping.is_set():
                raise OSError(errno.EIO, f"{op}: the mount is stopping")
            if tries > self.options.retrans:
                if self.options.soft:
                    self.log(f"server not responding, timed out ({op} after {tries} tries)")
                    raise OSError(errno.EIO, f"{op}: server not responding, timed out")
                if not warned:
                    self.log("server not responding, still trying")
                    warned = True

    # ------------------------------------------------------------------ sessions

    def ensure_session(self) -> tuple[int, int]:
        """(session, generation), opening a session first when there is none."""
        with self._session_lock:
            if self.session is None:
                reply, _ = self.call("hello", client=self.client)
                self.session, self.lease = int(reply["session"]), reply.get("lease")
            return self.session, self.generation

    def _lost(self, session: int) -> None:
        with self._session_lock:
            if self.session == session:
                self.log(f"lease of session {session} expired: its open files and locks are lost")
                self.session = None
                self.generation += 1

    def session_call(self, op: str, data: bytes = b"", *, generation: int | None = None, **args) -> tuple[dict, bytes]:
        """A request in the current session. ``generation``: the request belongs to state of that
        session generation (an open file, a lock): if the session has moved on, EIO at once.
        Without it (path operations) an expired session is replaced and the request sent again."""
        for _ in range(2):
            session, current = self.ensure_session()
            if generation is not None and generation != current:
                raise OSError(errno.EIO, f"{op}: the lease this file was opened under expired; its state is lost")
            try:
                return self.call(op, data, session=session, **args)
            except SessionExpired:
                self._lost(session)
                if generation is not None:
                    raise OSError(errno.EIO, f"{op}: lease expired, state lost") from None
        raise OSError(errno.EIO, f"{op}: lease expired twice in a row")

    # ------------------------------------------------------------------ heartbeat

    def start_heartbeat(self) -> None:
        """Renew the lease every two thirds of it (the Linux NFSv4 client's renewal period), so an
        idle host keeps its locks. NFSv3 has no lease to renew."""
        self.ensure_session()
        if self.lease is None:
            return

        def beat() -> None:
            while not self.stopping.wait(self.lease * 2 / 3):
                try:
                    self.session_call("renew")
                except OSError:
                    pass   # soft timeout: tried again next period; the lease may run out meanwhile

        self._heartbeat = threading.Thread(target=beat, name="lease-heartbeat", daemon=True)
        self._heartbeat.start()

    def stop(self) -> None:
        self.stopping.set()
