"""A stand-in for a master broker on one host's mount: ``python -m machinery.sharedstore.holder ROOT``
reads commands on stdin, one a line, and answers each with ``ok SECONDS`` or ``err ERRNAME SECONDS``
(how long the call took):

- ``open``: open ROOT/lock and ROOT/journal (creating them);
- ``lock``: F_SETLK a write lock on the whole lock file (what a shared-file locker's tryLock does);
- ``write``: write a record at the start of the journal.
"""

import errno
import fcntl
import os
import sys
import time


def main() -> None:
    root = sys.argv[1]
    lock_fd = data_fd = None
    for line in sys.stdin:
        command = line.strip()
        started = time.monotonic()
        try:
            if command == "open":
                lock_fd = os.open(os.path.join(root, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
                data_fd = os.open(os.path.join(root, "journal"), os.O_RDWR | os.O_CREAT, 0o644)
            elif command == "lock":
                fcntl.lockf(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            elif command == "write":
                os.pwrite(data_fd, b"record\n", 0)
            else:
                raise OSError(errno.EINVAL, f"unknown command {command!r}")
            status = "ok"
        except (OSError, TypeError) as exc:
            status = f"err {errno.errorcode.get(getattr(exc, 'errno', None), 'EBADF')}"
        print(f"{status} {time.monotonic() - started:.3f}", flush=True)


if __name__ == "__main__":
    main()
