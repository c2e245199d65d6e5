"""Process plumbing every launcher needs: free loopback ports, stopping a process group by its
leader's PID (never by name), stopping what a start launched when a signal interrupts its wait,
peak RSS, and the tail of log files."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
from pathlib import Path
from typing import Callable, TypeVar

from machinery.port_picks import pick_unreserved

T = TypeVar("T")

#: Listening ports are picked from here up to the start of the kernel's ephemeral range.
LISTEN_PORTS_FROM = 10000
_DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range
_pick = random.SystemRandom()  # not the seedable module RNG: tests seed that one


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (inclusive)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 for brokers to listen on (held open together so
    they differ).

    They come from below the kernel's ephemeral range. A port is picked some seconds before a
    JVM binds it, and in between every outgoing connection (a bridge dialling its peer, a
    readiness probe) takes an ephemeral local port. CI saw broker A's OpenWire port (40175, in
    that range) taken while the network's other broker started, most likely that way. Ports
    outside the range are only ever taken by another listener, and the listeners there are
    brokerconf's own: the machine's record of recent picks (port_picks.py) keeps two processes
    from picking the same one. Falls back to the kernel's choice when too few are free there."""
    low, _ = ephemeral_port_range()
    socks: list[socket.socket] = []

    def bound(port: int) -> bool:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            return False
        socks.append(s)
        return True

    try:
        if low - LISTEN_PORTS_FROM >= 100 * n:
            candidates = _pick.sample(range(LISTEN_PORTS_FROM, low), min(low - LISTEN_PORTS_FROM, 50 * n))
            pick_unreserved(candidates, n, bound)
        while len(socks) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop_if_interrupted(wait: Callable[[], T], stop: Callable[[], object]) -> T:
    """``wait()``'s result; when a signal interrupts it (KeyboardInterrupt from SIGINT, SystemExit
    from the SIGTERM handlers of the CLI and the plugin), ``stop()`` first, then the signal goes on.

    For a ``start()`` that has launched a process and waits for it to be ready: its caller gets
    the handle only when start returns, so nobody else could stop the process (seen in CI: a run
    interrupted while a store server started left it behind). A plain function on purpose, not a
    ``@contextmanager``: pytest crashed rendering a KeyboardInterrupt raised through one
    (``TypeError`` in ``_getentrysource``; tests/conformance/test_signals.py)."""
    try:
        return wait()
    except (KeyboardInterrupt, SystemExit):
        stop()
        raise


def kill_group(proc: subprocess.Popen) -> None:
    """Finalizer: SIGKILL a still-running broker group (never a reaped PID)."""
    try:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired, OSError):
        pass


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM the process group led by `proc`, wait up to `timeout`, then SIGKILL it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leader not reaped yet: its pgid is not reused
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def peak_rss(pid: int) -> int:
    """Peak resident set size (VmHWM) of a live process in bytes; 0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except Exception:  # noqa: BLE001 - gone or not ours: nothing to report
        return 0


def tail_files(paths, lines: int, bytes_per_line: int = 400) -> str:
    """The last `lines` lines of the given files read in order (missing files are skipped)."""
    parts = []
    for path in paths:
        try:
            with open(Path(path), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max(65536, lines * bytes_per_line)))
                text = f.read().decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text:
            parts.append(text)
    return "\n".join("\n".join(parts).splitlines()[-lines:])
