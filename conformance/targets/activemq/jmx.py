"""Read MBean attributes from a broker JVM over JMX, through a small Java helper.

Python has no JMX/RMI client, so `JmxClient` runs ``JmxQuery.java`` (next to this module) and
talks to it over pipes: one request line in, one JSON line out. The helper starts on the first
query, stays up for further queries (then a query is one JMX round trip, a few milliseconds) and is
stopped by `close()` through its own Popen handle: stdin is closed, then SIGTERM / SIGKILL.

The helper is compiled once (`compiled_helper`, with the JDK's javac, into ``.tools/jmx-helper/``
under the source's digest) and started from its class: every ActiveMQ broker a run launches starts
one, and Java's single-file source launcher compiled it again each time, about 1.5 s of CPU
against 0.3 s from the class (measured on the test machine), while a CI run's first twenty
minutes are CPU-bound. Without javac the source launcher still runs it.

`query_once()` runs the same program for a single query (a fresh JVM each time) for tools that
ask rarely.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from conformance.targets.activemq.paths import find_java
from machinery.tether import launch
from machinery.tools_cache import TOOLS_DIR

HELPER_SOURCE = Path(__file__).with_name("JmxQuery.java")
# Small, quick-starting helper JVM: it only relays a few attributes.
_HELPER_JVM_FLAGS = ("-Xmx48m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class JmxError(RuntimeError):
    """The JMX helper could not start, connect or answer; the message says which and why."""


@dataclass
class MBean:
    name: str  # canonical ObjectName
    attributes: dict
    missing: list[str] = field(default_factory=list)  # asked for, but the MBean has no such readable attribute


@dataclass
class QueryTiming:
    """How long queries took (seconds): evidence for the cost of reading counters."""

    startup: float | None = None  # helper JVM start + compile + JMX connect
    count: int = 0
    total: float = 0.0
    last: float = 0.0
    slowest: float = 0.0

    def record(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.last = seconds
        self.slowest = max(self.slowest, seconds)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


@functools.lru_cache(maxsize=None)
def compiled_helper(java: str) -> Path | None:
    """The directory holding ``JmxQuery.class`` compiled from `HELPER_SOURCE` by the javac beside
    ``java``: ``.tools/jmx-helper/<source digest>``, made on first use. Several test workers may ask
    at once: each compiles into a directory of its own and renames it into place; the first rename
    wins and the others' copies are dropped. None when there is no javac (a JRE) or it fails: the
    caller then runs the source itself."""
    javac = Path(java).resolve().with_name("javac")
    if not javac.is_file():
        return None
    digest = hashlib.sha256(HELPER_SOURCE.read_bytes()).hexdigest()[:16]
    home = TOOLS_DIR / "jmx-helper"
    target = home / digest
    if (target / "JmxQuery.class").is_file():
        return target
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=home))
    try:
        done = subprocess.run([str(javac), "-d", str(scratch), str(HELPER_SOURCE)], capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not (scratch / "JmxQuery.class").is_file():
            return None
        try:
            scratch.rename(target)
        except OSError:  # another worker's copy is in place already
            pass
        return target if (target / "JmxQuery.class").is_file() else None
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _helper_command(service_url: str, *extra: str) -> list[str]:
    java = find_java()
    if java is None:
        raise JmxError("no Java runtime for the JMX helper (looked at $BROKERCONF_JAVA, /usr/lib/jvm/default-java, "
                       "PATH, $JAVA_HOME); install it with `apt-get install default-jre-headless`")
    if not HELPER_SOURCE.is_file():
        raise JmxError(f"the JMX helper source {HELPER_SOURCE} is missing; reinstall brokerconf from a checkout "
                       "(the .java file ships next to conformance/targets/activemq/jmx.py)")
    classes = compiled_helper(java)
    program = ["-cp", str(classes), "JmxQuery"] if classes is not None else [str(HELPER_SOURCE)]
    return [java, *_HELPER_JVM_FLAGS, *program, service_url, *extra]


def _parse_mbeans(answer: dict, what: str) -> list[MBean]:
    if not answer.get("ok"):
        raise JmxError(f"JMX query {what} failed: {answer.get('error')}")
    return [MBean(m["name"], m.get("attributes", {}), m.get("missing", [])) for m in answer.get("mbeans", [])]


def query_once(service_url: str, pattern: str, attributes: list[str] | str = "*", timeout: float = 20.0) -> list[MBean]:
    """One query in a fresh helper JVM (about a second); prefer `JmxClient` for repeated queries."""
    attrs = attributes if isinstance(attributes, str) else ",".join(attributes)
    try:
        done = subprocess.run(_helper_command(service_url, pattern, attrs), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise JmxError(f"JMX helper did not answer within {timeout} s for {pattern!r} at {service_url}") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if not lines:
        raise JmxError(f"JMX helper exited with {done.returncode} and no answer; stderr:\n{done.stderr[-2000:]}")
    answer = json.loads(lines[-1])
    if answer.get("ready") is False:
        raise JmxError(f"JMX helper could not connect: {answer.get('error')}")
    return _parse_mbeans(answer, repr(pattern))


class JmxClient:
    """A long-running JMX helper for one JVM (``service:jmx:rmi:///jndi/rmi://HOST:PORT/jmxrmi``).

    Thread-safe: queries are serialised. ``log_path`` receives the helper's stderr (compile errors,
    Java exceptions).
    """

    def __init__(self, service_url: str, *, log_path: Path | None = None, connect_timeout: float = 30.0,
                 query_timeout: float = 10.0) -> None:
        self.service_url = service_url
        self.log_path = log_path
        self.connect_timeout = connect_timeout
        self.query_timeout = query_timeout
        self.timing = QueryTiming()
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Lock()
        self._next_id = 0
        self._log_fh = None
        self._finalizer: weakref.finalize | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """PID of the helper JVM while it runs (it starts on the first query)."""
        return self._proc.pid if self.running else None

    # ----------------------------------------------------------------- lifecycle
    def _start(self) -> None:
        command = _helper_command(self.service_url)
        self._close_log()
        self._log_fh = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self._lines = queue.Queue()
        started = time.monotonic()
        self._proc = launch(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_fh,
                            text=True, encoding="utf-8", bufsize=1, start_new_session=True, close_fds=True)
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        threading.Thread(target=_pump, args=(self._proc.stdout, self._lines), daemon=True,
                         name=f"jmx-helper-{self._proc.pid}").start()
        # The first line says whether the helper reached the JVM.
        hello = self._read_line(started + self.connect_timeout, "start and connect")
        if not hello.get("ready"):
            self.close()
            raise JmxError(f"JMX helper could not connect to {self.service_url}: {hello.get('error')}")
        self.timing.startup = time.monotonic() - started

    def close(self, timeout: float = 5.0) -> None:
        """Stop the helper (EOF on stdin, then SIGTERM, then SIGKILL). Idempotent."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout)
                except (OSError, subprocess.TimeoutExpired):
                    proc.terminate()
                    try:
                        proc.wait(timeout)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(timeout)
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._proc = None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log_fh not in (None, subprocess.DEVNULL):
            self._log_fh.close()
        self._log_fh = None

    # ----------------------------------------------------------------- queries
    def query(self, pattern: str, attributes: list[str] | str = "*") -> list[MBean]:
        """Attributes of every MBean matching the ObjectName ``pattern`` (``"*"``: all readable ones)."""
        attrs = attributes if isinstance(attributes, str) else ",".join(attributes)
        if "\t" in pattern or "\n" in pattern or "\t" in attrs or "\n" in attrs:
            raise ValueError(f"JMX pattern / attribute names may not contain tabs or newlines: {pattern!r} {attrs!r}")
        with self._lock:
            if not self.running:
                self._start()
            self._next_id += 1
            request_id = str(self._next_id)
            started = time.monotonic()
            try:
                self._proc.stdin.write(f"{request_id}\t{pattern}\t{attrs}\n")
                self._proc.stdin.flush()
            except OSError as e:
                self.close()
                raise JmxError(f"JMX helper went away before query {pattern!r}: {e}{self._stderr_hint()}") from None
            while True:
                answer = self._read_line(started + self.query_timeout, f"query {pattern!r}")
                if answer.get("id") == request_id:
                    break  # defensive: answers are in request order, so this is the first one
            self.timing.record(time.monotonic() - started)
        return _parse_mbeans(answer, repr(pattern))

    def _read_line(self, deadline: float, what: str) -> dict:
        try:
            line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            hint = self._stderr_hint()
            self.close()  # a stuck helper (broker gone, RMI hanging) is replaced on the next query
            raise JmxError(f"JMX helper did not answer ({what}) in time at {self.service_url}{hint}") from None
        if line is None:
            rc = self._proc.poll() if self._proc else None
            self.close()
            raise JmxError(f"JMX helper exited (code {rc}) during {what}{self._stderr_hint()}")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise JmxError(f"JMX helper printed something that is not JSON during {what}: {line[:300]!r}") from None

    def _stderr_hint(self) -> str:
        if not self.log_path:
            return ""
        try:
            text = Path(self.log_path).read_text(encoding="utf-8", errors="replace")[-1500:]
        except OSError:
            return ""
        return f"; helper stderr ({self.log_path}):\n{text}" if text.strip() else ""

    def __enter__(self) -> "JmxClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pump(stream, lines: queue.Queue) -> None:
    try:
        for line in stream:
            if line.strip():
                lines.put(line)
    except (OSError, ValueError):
        pass  # the stream was closed by close()
    lines.put(None)


def _kill(proc: subprocess.Popen) -> None:
    """Finalizer: never leave a helper JVM behind if its owner forgot close()."""
    try:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        pass
