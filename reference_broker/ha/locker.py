"""Lockers: who may be master of a shared store (A-MQ "Fault Tolerant Messaging" guide, chapter 3).

A locker answers three questions for the master/slave runner (`reference_broker.ha.runner`):
may I take the store now (`try_acquire`, one attempt: a slave calls it every
``lock_acquire_sleep_interval``), do I still hold it (`keep_alive`, the master's check every
``lock_keep_alive_period``), and let it go (`release`). Any backend with those three calls plugs
in (`Locker`): the shared-file locker here; a lease in a database (the guide's 3.2) later.

The shared-file locker (guide 3.1, "File locking requirements")
----------------------------------------------------------------
The lock is a write lock on the whole file ``<store directory>/lock`` (KahaDB's name), taken with
``fcntl`` record locks of the open-file-description kind (``F_OFD_SETLK``), never ``flock``:

* record locks are what a network file system sees: the NFS client sends them to the server
  (NLM for v3, the LOCK operation for v4, leased), and a FUSE file system receives them as its
  ``getlk`` / ``setlk`` operations. ``flock`` is not portable there: on NFS the Linux client
  emulates it with a whole-file record lock (nfs(5), ``local_lock``), and a FUSE file system only
  sees it when it asks for ``flock`` requests (``FUSE_FLOCK_LOCKS``); otherwise the kernel keeps
  it local to one mount, so two hosts would both "hold" it. Java's ``FileChannel.tryLock``, which
  ActiveMQ and Artemis use, is a record lock too, so the three brokers meet on the same lock.
* open-file-description locks belong to the open file, not to the process: two lockers in one
  process exclude each other (a classic ``F_SETLK`` lock would be shared by the whole process and
  silently dropped when any descriptor of the file is closed). Where the kernel lacks them
  (EINVAL), process-owned ``F_SETLK`` locks are used.

`keep_alive` checks what the guide's master checks: the lock file still exists at its path and is
the file we locked (same device and inode: a deleted and recreated file is another lock), and the
lock is still ours, by taking it again on our descriptor. Re-locking a range we hold is a no-op
that succeeds; it fails when another holder has it (our lock was lost, e.g. an NFSv4 lease ran
out) and fails with an I/O error when the server is unreachable (an NFS ``soft`` mount's EIO).
When the lock had lapsed and nobody took it, re-locking regains it, which is what the guide's
master does first ("it tries to regain the lock"). A slave recreates a missing lock file before
locking it (same paragraph), which ``O_CREAT`` does.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["LOCK_FILE_NAME", "Locker", "LockerError", "SharedFileLocker"]

log = logging.getLogger("reference_broker.ha")

#: KahaDB's lock file name in the store directory
LOCK_FILE_NAME = "lock"

# struct flock on Linux (x86_64 and aarch64 alike): short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid, padded to 32 bytes. l_pid must be 0 for open-file-description locks.
_FLOCK = struct.Struct("@hhqqi4x")


class LockerError(OSError):
    """The lock could not be tried at all (the directory is unusable): not "held by another"."""


@runtime_checkable
class Locker(Protocol):
    """Who is master of one store. Implementations are used from one thread."""

    def try_acquire(self) -> bool:
        """One attempt: True when this broker holds the lock now, False when another does.
        Raises `LockerError` when the attempt itself failed (the message says why)."""

    def keep_alive(self) -> bool:
        """The master's periodic check: True while the lock is still ours."""

    def release(self) -> None:
        """Give the lock up (idempotent)."""

    @property
    def held(self) -> bool: ...

    def describe(self) -> str:
        """What is locked, for log lines (``lock file /shared/lock``)."""


class SharedFileLocker:
    """The write lock on ``directory/lock`` (see the module's documentation)."""

    def __init__(self, directory: str | Path, *, holder: str = "") -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE_NAME
        self.holder = holder or f"pid {os.getpid()} on {socket.gethostname()}"
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we locked
        self._ofd = hasattr(fcntl, "F_OFD_SETLK")

    # ------------------------------------------------------------------ the Locker protocol
    @property
    def held(self) -> bool:
        return self._fd is not None

    def describe(self) -> str:
        return f"lock file {self.path}"

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return self.keep_alive()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # O_CREAT: a slave recreates a deleted lock file, then locks it (guide 3.1).
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise LockerError(exc.errno, f"cannot open the {self.describe()}: {exc.strerror}") from None
        try:
            locked = self._lock(fd)
        except OSError as exc:
            os.close(fd)
            raise LockerError(exc.errno, f"cannot lock the {self.describe()}: {exc.strerror}") from None
        if not locked:
            os.close(fd)
            return False
        st = os.fstat(fd)
        self._fd, self._identity = fd, (st.st_dev, st.st_ino)
        try:  # who holds it, for people reading the directory; fixed width, so no truncation
            os.pwrite(fd, f"{self.holder[:200]:<200}\n".encode("utf-8", "replace"), 0)
        except OSError:
            pass  # informational only
        return True

    def keep_alive(self) -> bool:
        fd = self._fd
        if fd is None:
            return False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            log.error("the %s is gone: giving up the lock", self.describe())
            return False
        except OSError as exc:  # e.g. EIO from a soft NFS mount whose server does not answer
            log.error("cannot check the %s: %s", self.describe(), exc.strerror)
            return False
        if (st.st_dev, st.st_ino) != self._identity:
            log.error("the %s was replaced by another file: giving up the lock", self.describe())
            return False
        try:
            if self._lock(fd):
                return True
            log.error("the lock on the %s is held by another broker: giving it up", self.describe())
        except OSError as exc:
            log.error("cannot re-check the lock on the %s: %s", self.describe(), exc.strerror)
        return False

    def release(self) -> None:
        fd, self._fd, self._identity = self._fd, None, None
        if fd is None:
            return
        try:
            self._fcntl(fd, fcntl.F_UNLCK)
        except OSError:
            pass  # closing the descriptor releases it anyway
        os.close(fd)

    # ------------------------------------------------------------------ fcntl
    def _lock(self, fd: int) -> bool:
        """A whole-file write lock without waiting: True taken, False held by another."""
        try:
            self._fcntl(fd, fcntl.F_WRLCK)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise

    def _fcntl(self, fd: int, kind: int) -> None:
        if self._ofd:
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0))
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._ofd = False  # no open-file-description locks here: process-owned ones
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if kind == fcntl.F_WRLCK else fcntl.LOCK_UN)

    def __repr__(self) -> str:
        return f"<SharedFileLocker {self.path} {'held' if self.held else 'not held'}>"
