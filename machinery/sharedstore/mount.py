"""The FUSE client of one host: ``python -m machinery.sharedstore.mount --server HOST:PORT --client NAME
-o soft,timeo=20,retrans=2,lookupcache=none,sync MOUNTPOINT`` (runs in the foreground until
``fusermount3 -u MOUNTPOINT``).

Every operation, data and POSIX record locks alike, is a request to the store (`rpc.StoreLink`):
nothing is answered locally. Locks arrive through FUSE's ``lock`` operation (fcntl F_GETLK,
F_SETLK, F_SETLKW; Java's FileChannel.tryLock is F_SETLK), identified by the kernel's lock-owner
cookie, so two hosts exclude each other by the store's lock table alone.

Bindings: mfusepy (PyPI), libfuse 3 through ctypes. It exposes the high-level ``lock`` operation
with the kernel's lock owner; pyfuse3 (the other maintained binding) has no lock operations at all
and needs a C build against libfuse3-dev, fusepy only speaks libfuse 2.

Mount options in FUSE terms: ``lookupcache=none`` -> entry, negative-entry and attribute timeouts 0
(every lookup and stat goes to the store); ``sync`` -> direct I/O on every open file and a commit
on the store before a write is answered.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import itertools
import os
import sys
import threading

os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")   # mfusepy would take libfuse 2 first if both were there

import mfusepy  # noqa: E402

from .leases import READ, UNLOCK, WRITE  # noqa: E402
from .mountopts import MountOptionError, MountOptions  # noqa: E402
from .rpc import StoreLink  # noqa: E402

_KINDS = {fcntl.F_RDLCK: READ, fcntl.F_WRLCK: WRITE, fcntl.F_UNLCK: UNLOCK}
_TYPES = {v: k for k, v in _KINDS.items()}


class StoreOperations(mfusepy.Operations):
    use_ns = True

    def __init__(self, link: StoreLink, options: MountOptions) -> None:
        self.link = link
        self.options = options
        self._handles: dict[int, tuple[str, int]] = {}   # fh -> (path, session generation)
        # lock owners that set a lock through each open file, and owners seen in a flush: see `release`
        self._lockers: dict[int, set[int]] = {}
        self._flushers: set[int] = set()
        self._fhs = itertools.count(1)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ helpers

    def _call(self, op: str, data: bytes = b"", **args):
        try:
            return self.link.session_call(op, data, **args)
        except OSError as exc:
            raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

    def _handle(self, fi) -> tuple[str, int]:
        handle = self._handles.get(fi.fh)
        if handle is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return handle

    def _stateful(self, op: str, fi, data: bytes = b"", **args):
        """A request on an open file: EIO once the lease it was opened under has expired."""
        path, generation = self._handle(fi)
        return self._call(op, data, generation=generation, path=path, **args)

    def _open(self, path: str, fi) -> int:
        _, generation = self.link.ensure_session()
        with self._lock:
            fh = next(self._fhs)
            self._handles[fh] = (path, generation)
        fi.fh = fh
        if self.options.sync:
            fi.direct_io = 1
        return 0

    # ------------------------------------------------------------------ lifecycle

    def init(self, path) -> None:
        # the first hello may wait for the network: not on the thread that finishes mounting
        threading.Thread(target=self._start_heartbeat, name="lease-start", daemon=True).start()

    def _start_heartbeat(self) -> None:
        try:
            self.link.start_heartbeat()
        except OSError as exc:
            self.link.log(f"could not open a session yet: {exc}")

    def destroy(self, path) -> None:
        self.link.stop()

    # ------------------------------------------------------------------ metadata

    def getattr(self, path, fh=None):
        reply, _ = self._call("getattr", path=path)
        st = dict(reply["stat"])
        for key in ("st_atime", "st_mtime", "st_ctime"):
            st[key] = st.pop(f"{key}_ns")
        st.pop("st_ino", None)
        return st

    def readdir(self, path, fh):
        reply, _ = self._call("readdir", path=path)
        return [".", "..", *reply["names"]]

    def statfs(self, path):
        reply, _ = self._call("statfs")
        return reply["statfs"]

    def chmod(self, path, mode):
        self._call("chmod", path=path, mode=mode)
        return 0

    def chown(self, path, uid, gid):
        return 0   # the store keeps the server's owner; the brokers run as one user

    def utimens(self, path, times=None):
        self._call("utimens", path=path, ns=list(times) if times else None)
        return 0

    def mkdir(self, path, mode):
        self._call("mkdir", path=path, mode=mode)
        return 0

    def rmdir(self, path):
        self._call("rmdir", path=path)
        return 0

    def unlink(self, path):
        self._call("unlink", path=path)
        return 0

    def rename(self, old, new):
        self._call("rename", old=old, new=new)
        # Files opened through this mount follow their file (an NFS file handle survives a
        # rename): a journal that writes a segment as NAME.tmp and renames it to NAME while it
        # keeps writing through the same descriptor must reach NAME, not ENOENT. A rename made
        # by another host is not seen here (the path-keyed model's known limit, __init__.py).
        with self._lock:
            for fh, (path, generation) in list(self._handles.items()):
                if path == old or path.startswith(old.rstrip("/") + "/"):
                    self._handles[fh] = (new + path[len(old):], generation)
        return 0

    def truncate(self, path, length, fh=None):
        self._call("truncate", path=path, length=length)
        return 0

    # ------------------------------------------------------------------ files

    def create(self, path, mode, fi=None):
        self._call("create", path=path, mode=mode & 0o7777, excl=bool(fi.flags & os.O_EXCL))
        return self._open(path, fi)

    def open(self, path, fi):
        self._call("getattr", path=path)   # the file must exist (lookupcache=none: asked every time)
        return self._open(path, fi)

    def read(self, path, size, offset, fi):
        _, data = self._stateful("read", fi, size=size, offset=offset)
        return data

    def write(self, path, data, offset, fi):
        reply, _ = self._stateful("write", fi, data, offset=offset, sync=self.options.sync)
        return int(reply["written"])

    def fsync(self, path, datasync, fi):
        self._stateful("fsync", fi)
        return 0

    def flush(self, path, fi):
        # a close(): the kernel names the closing process's lock owner, and libfuse then unlocks that
        # owner's POSIX locks through `lock` (close releases a process's record locks, fcntl(2))
        with self._lock:
            self._flushers.add(int(fi.lock_owner))
        return 0

    def release(self, path, fi):
        """The last close of an open file description. Its open-file-description locks (F_OFD_SETLK,
        owned by the description, not the process) must go now, but the kernel does not send their
        unlock to a FUSE file system: it leaves unlock-on-close to the flush, which names the process's
        owner (fs/fuse/file.c, fuse_setlk and FL_CLOSE_POSIX). So the owners that locked through this
        description and never closed anything -- descriptions, not processes -- are released here."""
        with self._lock:
            handle = self._handles.pop(fi.fh, None)
            owners = self._lockers.pop(fi.fh, set()) - self._flushers
        if handle is not None and owners and handle[1] == self.link.generation:
            for owner in owners:
                try:
                    self.link.session_call("release", generation=handle[1], path=handle[0], owner=owner)
                except OSError:
                    pass   # the lease went meanwhile: the store dropped the locks itself
        return 0

    # ------------------------------------------------------------------ record locks

    def lock(self, path, fi, cmd, lock):
        fl = ctypes.cast(lock, ctypes.POINTER(mfusepy.c_flock_t)).contents
        kind = _KINDS.get(fl.l_type)
        if kind is None:
            raise mfusepy.FuseOSError(errno.EINVAL)
        # libfuse hands the range as start and length (0: to the end of the file)
        start, end = fl.l_start, (None if fl.l_len == 0 else fl.l_start + fl.l_len - 1)
        owner = int(fi.lock_owner)
        file_path, generation = self._handle(fi)
        if cmd == fcntl.F_GETLK:
            reply, _ = self._call("getlk", generation=generation, path=file_path, owner=owner, kind=kind,
                                  start=start, end=end)
            fl.l_type = _TYPES[reply["kind"]]
            if reply["kind"] != UNLOCK:
                fl.l_start = reply["start"]
                fl.l_len = 0 if reply["end"] is None else reply["end"] - reply["start"] + 1
                fl.l_pid = reply.get("pid", 0)
            return 0
        if cmd not in (fcntl.F_SETLK, fcntl.F_SETLKW):
            raise mfusepy.FuseOSError(errno.EINVAL)
        if kind == UNLOCK and generation != self.link.generation:
            return 0   # the lease those locks were under has expired: nothing left to release
        delay = 0.1
        while True:
            try:
                self._call("setlk", generation=generation, path=file_path, owner=owner, kind=kind,
                           start=start, end=end, pid=fl.l_pid)
                if kind != UNLOCK:
                    with self._lock:
                        self._lockers.setdefault(fi.fh, set()).add(owner)
                return 0
            except mfusepy.FuseOSError as exc:
                if exc.errno != errno.EAGAIN or cmd != fcntl.F_SETLKW or self.link.stopping.is_set():
                    raise
            # F_SETLKW: the NFSv4 client polls for a blocked lock, backing off (to 1 s here)
            self.link.stopping.wait(delay)
            delay = min(delay * 2, 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m machinery.sharedstore.mount", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="HOST:PORT to dial for the store (the host's proxy)")
    parser.add_argument("--client", required=True, help="this host's name (its lease and locks on the store)")
    parser.add_argument("-o", dest="options", default="", help="NFS mount options, e.g. soft,timeo=20,retrans=2")
    parser.add_argument("mountpoint")
    args = parser.parse_args(argv)
    try:
        options = MountOptions.parse(args.options)
    except MountOptionError as exc:
        parser.error(str(exc))
    if not os.path.isdir(args.mountpoint):
        parser.error(f"mountpoint {args.mountpoint!r} is not a directory")
    host, sep, port = args.server.rpartition(":")
    if not sep or not port.isdigit():
        parser.error(f"--server {args.server!r}: expected HOST:PORT")
    link = StoreLink(args.server, args.client, options)
    timeouts = {}
    if options.lookupcache == "none":
        timeouts = {"entry_timeout": 0, "negative_timeout": 0, "attr_timeout": 0}
    mfusepy.FUSE(StoreOperations(link, options), args.mountpoint, raw_fi=True, foreground=True,
                 fsname=f"sharedstore:{args.client}", subtype="sharedstore", **timeouts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
