"""The shared-store server: one per experiment, holding the data directory and the lock table.

``python -m machinery.sharedstore.server --root DIR [--port 0] [--lease 10] [--vers 4|3]`` prints
``listening HOST:PORT`` on stdout once it serves, then logs lease expiries on stderr.

Every request of a client session renews its lease (`leases.LeaseTable.touch`); a request of an
expired session is answered ``{"expired": true}`` and changes nothing. Control requests
(``expire``, ``state``) come from the harness and the nemesis, straight to the server (not
through a host's proxy).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import signal
import sys
import time
from collections import deque

from . import wire
from .leases import UNLOCK, WRITE, ExpiredSession, LeaseTable, NoLease, Session

SESSION_OPS = {"renew", "getattr", "readdir", "create", "mkdir", "unlink", "rmdir", "rename", "truncate",
               "chmod", "utimens", "read", "write", "fsync", "statfs", "setlk", "getlk", "release"}


class StoreServer:
    def __init__(self, root: str, lease: float | None, clock=time.monotonic) -> None:
        self.root = os.path.realpath(root)
        self.table = LeaseTable(lease=lease, clock=clock, on_expire=self._log_expiry)
        self.clock = clock
        #: the last refused lock requests (client, path, start, server clock): what an NFS
        #: server's lock log shows of a slave polling for the master's lock (A-MQ FT 3.1,
        #: lockAcquireSleepInterval); bounded, a poll every few ms would otherwise grow it for ever
        self.refused_locks: deque[tuple[str, str, int, float]] = deque(maxlen=2000)
        #: the last granted lock requests, the same way (when a slave got the lock: A-MQ FT 3.1)
        self.granted_locks: deque[tuple[str, str, int, float]] = deque(maxlen=2000)

    # ------------------------------------------------------------------ paths

    def _real(self, path: str) -> str:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise OSError(errno.EACCES, f"path {path!r} leaves the store")
        return os.path.join(self.root, *parts)

    # ------------------------------------------------------------------ dispatch

    def handle(self, req: dict, data: bytes) -> tuple[dict, bytes]:
        op = req.get("op")
        try:
            if op == "hello":
                session = self.table.open_session(str(req["client"]))
                return {"session": session.id, "lease": self.table.lease}, b""
            if op == "expire":
                return {"expired_sessions": self.expire_client(str(req["client"]))}, b""
            if op == "state":
                return self.state(), b""
            if op not in SESSION_OPS:
                return {"errno": errno.EINVAL, "error": f"unknown op {op!r}"}, b""
            session = self.table.touch(int(req["session"]))
            return getattr(self, f"op_{op}")(session.id, req, data)
        except ExpiredSession as exc:
            return {"expired": True, "error": str(exc)}, b""
        except NoLease as exc:
            return {"errno": errno.EINVAL, "error": str(exc)}, b""
        except OSError as exc:
            return {"errno": exc.errno or errno.EIO, "error": str(exc)}, b""

    def expire_client(self, client: str) -> list[int]:
        live = [s for s in self.table.sessions_of(client) if not s.expired]
        for session in live:
            self.table.expire(session.id, "by request")
        return [s.id for s in live]

    @staticmethod
    def _log_expiry(session: Session, why: str) -> None:
        log(f"lease of {session.client} (session {session.id}) expired ({why}); its locks are released")

    def state(self) -> dict:
        self.table.expire_due()
        return {
            "lease": self.table.lease,
            "sessions": [{"id": s.id, "client": s.client, "expired": s.expired} for s in self.table.sessions.values()],
            "locks": [{"path": l.path, "client": self.table.sessions[l.owner[0]].client, "session": l.owner[0],
                       "owner": l.owner[1], "kind": l.kind, "start": l.start, "end": l.end}
                      for l in self.table.locks],
            "expiries": [list(e) for e in self.table.expiries],
            "refused_locks": [list(r) for r in self.refused_locks],
            "granted_locks": [list(g) for g in self.granted_locks],
        }

    # ------------------------------------------------------------------ data ops (path based, like NFS file handles)

    def op_renew(self, sid, req, data):
        return {}, b""

    def op_getattr(self, sid, req, data):
        st = os.lstat(self._real(req["path"]))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_ino")
        return {"stat": {k: getattr(st, k) for k in keys}}, b""

    def op_readdir(self, sid, req, data):
        return {"names": sorted(os.listdir(self._real(req["path"])))}, b""

    def op_create(self, sid, req, data):
        fd = os.open(self._real(req["path"]), os.O_CREAT | os.O_WRONLY | (os.O_EXCL if req.get("excl") else 0),
                     req.get("mode", 0o644))
        os.close(fd)
        return {}, b""

    def op_mkdir(self, sid, req, data):
        os.mkdir(self._real(req["path"]), req.get("mode", 0o755))
        return {}, b""

    def op_unlink(self, sid, req, data):
        os.unlink(self._real(req["path"]))
        return {}, b""

    def op_rmdir(self, sid, req, data):
        os.rmdir(self._real(req["path"]))
        return {}, b""

    def op_rename(self, sid, req, data):
        os.rename(self._real(req["old"]), self._real(req["new"]))
        return {}, b""

    def op_truncate(self, sid, req, data):
        os.truncate(self._real(req["path"]), int(req["length"]))
        return {}, b""

    def op_chmod(self, sid, req, data):
        os.chmod(self._real(req["path"]), int(req["mode"]))
        return {}, b""

    def op_utimens(self, sid, req, data):
        times = req.get("ns")
        os.utime(self._real(req["path"]), ns=tuple(times) if times else None)
        return {}, b""

    def op_read(self, sid, req, data):
        fd = os.open(self._real(req["path"]), os.O_RDONLY)
        try:
            return {}, os.pread(fd, int(req["size"]), int(req["offset"]))
        finally:
            os.close(fd)

    def op_write(self, sid, req, data):
        fd = os.open(self._real(req["path"]), os.O_WRONLY)
        try:
            written = os.pwrite(fd, data, int(req["offset"]))
            if req.get("sync"):
                os.fsync(fd)   # the mount's `sync`: the write is stable before it is answered
            return {"written": written}, b""
        finally:
            os.close(fd)

    def op_fsync(self, sid, req, data):
        fd = os.open(self._real(req["path"]), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return {}, b""

    def op_statfs(self, sid, req, data):
        st = os.statvfs(self.root)
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_namemax")
        return {"statfs": {k: getattr(st, k) for k in keys}}, b""

    # ------------------------------------------------------------------ locks

    def op_setlk(self, sid, req, data):
        self._real(req["path"])  # validates the path
        owner, start, end = (sid, int(req["owner"])), int(req["start"]), req.get("end")
        client = self.table.sessions[sid].client
        newly_exclusive = req["kind"] == WRITE and not self.table.holds(req["path"], owner, WRITE, start, end)
        blocker = self.table.set_lock(req["path"], owner, req["kind"], start, end, int(req.get("pid", 0)))
        if blocker is None:
            if req["kind"] != UNLOCK:
                self.granted_locks.append((client, req["path"], start, self.clock()))
            if newly_exclusive:  # who holds the store when: the store's side of a takeover
                log(f"exclusive lock on {req['path']} [{start}..{'' if end is None else end}] granted to {client} "
                    f"(session {sid})")
            return {}, b""
        self.refused_locks.append((client, req["path"], start, self.clock()))
        return {"errno": errno.EAGAIN, "error": f"locked by another host ({blocker.kind} {blocker.start}..{blocker.end})"}, b""

    def op_getlk(self, sid, req, data):
        blocker = self.table.conflict(req["path"], (sid, int(req["owner"])), req["kind"], int(req["start"]), req.get("end"))
        if blocker is None:
            return {"kind": UNLOCK}, b""
        return {"kind": blocker.kind, "start": blocker.start, "end": blocker.end, "pid": blocker.pid}, b""

    def op_release(self, sid, req, data):
        self.table.release_owner(sid, req.get("owner"), req.get("path"))
        return {}, b""


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} store: {message}", file=sys.stderr, flush=True)


async def serve(store: StoreServer, host: str, port: int) -> None:
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                req, data = await wire.read_frame(reader)
                reply, payload = store.handle(req, data)
                reply["xid"] = req.get("xid")
                writer.write(wire.encode(reply, payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, wire.ProtocolError, ValueError):
            pass
        finally:
            writer.close()

    async def expiry_loop() -> None:
        # lease expiry happens whether or not anyone asks (RFC 7530 9.6.3: the server frees the
        # expired client's locks so others can have them); checked ten times per lease
        period = (store.table.lease or 1) / 10
        while True:
            store.table.expire_due()  # logged by the table's on_expire
            await asyncio.sleep(period)

    server = await asyncio.start_server(client, host, port)
    bound = server.sockets[0].getsockname()
    print(f"listening {bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    expiry = asyncio.create_task(expiry_loop()) if store.table.lease is not None else None
    async with server:
        await stop.wait()
    if expiry is not None:
        expiry.cancel()


def lease_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lease: not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--lease: must be > 0 seconds, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m machinery.sharedstore.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the data directory the store serves")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lease", type=lease_arg, default=10.0,
                        help="NFSv4 lease time in seconds (ignored with --vers 3)")
    parser.add_argument("--vers", type=int, choices=(3, 4), default=4,
                        help="4: leases, an expired client's locks are released; 3: locks never expire")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is not a directory")
    store = StoreServer(args.root, lease=None if args.vers == 3 else args.lease)
    asyncio.run(serve(store, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
