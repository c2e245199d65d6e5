"""The machine's record of listening ports brokerconf processes picked recently, so that two of
them never hand out the same port while the first pick is not yet bound.

`free_ports` tests a port by binding it and closing it again; the broker (or fault proxy) that
gets it binds it seconds later. Six suite workers and two chaos runs pick side by side, each from
the same range, so one could pick a port another had picked a moment before and not yet bound
(seen: an Artemis JVM's web server found its port 21216 taken, and the broker stopped itself).
A pick also stays in the record while its broker is down for a restart and the port looks free.

The record is one small JSON file (port -> when the reservation ends, epoch seconds) beside a
lock file, both in the machine's temporary directory: every process that picks reads it under an
exclusive ``flock``, leaves out ports still reserved, adds its own picks and drops expired ones,
so the file never holds more than the picks of the last `RESERVE_FOR` seconds. An unreadable or
half-written file (a process killed mid-write cannot leave one: the new file replaces the old in
one rename) is taken as empty.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

#: seconds a picked port stays reserved: a broker's whole life in a test module (a shared cluster
#: serves a module for minutes, and is restarted on its ports) rather than just until its first
#: bind. At the picks' rate in a six-worker run (a few thousand an hour) this keeps a few hundred
#: of the ~22000 ports of the range reserved.
RESERVE_FOR = 900.0

#: the record and its lock (module attributes: tests point them at their own temporary directory)
RECORD = Path(tempfile.gettempdir()) / "brokerconf-port-picks.json"
LOCK = Path(tempfile.gettempdir()) / "brokerconf-port-picks.lock"


@contextmanager
def _locked():
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(now: float) -> dict[int, float]:
    try:
        raw = json.loads(RECORD.read_text())
        return {int(port): float(until) for port, until in raw.items() if float(until) > now}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _write(reserved: dict[int, float]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=RECORD.name, dir=RECORD.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({str(port): until for port, until in reserved.items()}, f)
        os.replace(tmp, RECORD)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pick_unreserved(candidates: Iterable[int], n: int, usable: Callable[[int], bool]) -> list[int]:
    """Up to ``n`` ports from ``candidates`` that no brokerconf process reserved in the last
    `RESERVE_FOR` seconds and for which ``usable(port)`` is true (it binds the port to test it),
    reserved for this process from now on. Fewer than ``n`` when the candidates run out."""
    with _locked():
        now = time.time()
        reserved = _read(now)
        picked: list[int] = []
        for port in candidates:
            if len(picked) == n:
                break
            if port in reserved or not usable(port):
                continue
            picked.append(port)
        for port in picked:
            reserved[port] = now + RESERVE_FOR
        _write(reserved)
        return picked
