"""The harness's end of the Java client driver (drivers/java): a real ActiveMQ or Artemis client
library in a JVM of its own, driven over JSON lines on its stdin and stdout.

    with JavaDriver.start("activemq-5") as driver:
        conn = driver.connect("failover:(tcp://127.0.0.1:61616)?randomize=false")
        conn.send("q", "hello")
        assert conn.receive("q", 5.0) == "hello"
        driver.events            # [Event("resumed", ...), ...]: the library's transport callbacks

Each command carries an ``id`` and is answered by one line with that id (``ok`` true, or false
with the Java exception's ``error`` and ``class``); event lines (``event``: interrupted, resumed,
failed, exception, error; connection-control: an ActiveMQ broker's dynamic-failover announcement,
with ``connected_brokers`` and ``rebalance``) come whenever the library calls back. Event times are
``System.nanoTime`` in seconds, the CLOCK_MONOTONIC that ``time.monotonic`` reads here, so they
line up with the harness's own measurements (`Event.mono`).

The process is started by `start` and stopped by its handle (`stop`: stdin closed, then SIGTERM,
then SIGKILL, by PID). A missing JDK or an unbuilt driver is reported with what to run
(`availability`); tests turn that into a skip, or a failure where CI requires ``java-clients``.
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.clients.java_build import JavaBuildError, classpath, installed, pinned_clients
from machinery.tether import launch

__all__ = ["DriverError", "Event", "NoAnswer", "JavaConnection", "JavaDriver", "availability", "port_of", "subject"]

REQUIREMENT = "java-clients"
#: bound on a command's answer when the caller gives none; the library's own timeouts are shorter
DEFAULT_REPLY_TIMEOUT = 120.0
READY_TIMEOUT = 60.0  # a JVM starting on a loaded 2-core machine


class DriverError(RuntimeError):
    """A command failed in the Java client (``java_class``: the exception's class) or the driver
    process broke."""

    def __init__(self, message: str, java_class: str | None = None, reply: dict | None = None) -> None:
        super().__init__(message)
        self.java_class = java_class
        self.reply = reply or {}


class NoAnswer(DriverError):
    """A command was still running in the client when the harness stopped waiting for it (the
    command goes on in the driver: a blocked send may still complete later)."""


@dataclass(frozen=True)
class Event:
    kind: str           # interrupted, resumed, failed, exception, error, connection-control
    conn: str
    mono: float         # time.monotonic() scale
    address: str | None = None
    detail: dict = field(default_factory=dict)

    @property
    def port(self) -> int | None:
        return port_of(self.address)


def port_of(address: str | None) -> int | None:
    """The port of a broker address as the libraries print it: ``tcp://127.0.0.1:61616``,
    ``tcp://localhost/127.0.0.1:61616@53412`` (ActiveMQ's remote address: the local port after
    ``@``), ``/127.0.0.1:61616`` (Artemis)."""
    if not address:
        return None
    match = re.search(r":(\d+)(?:@\d+)?(?:\?.*)?$", address.strip())
    return int(match.group(1)) if match else None


def availability(name: str) -> tuple[bool, str]:
    """Whether the driver for pinned client ``name`` can run here, and why not."""
    try:
        client = pinned_clients()[name]
    except (JavaBuildError, KeyError) as exc:
        return False, f"no pinned Java client {name!r}: {exc}"
    return installed(client)


def subject(name: str) -> str:
    """The client's name for the matrix (pins.toml ``subject``)."""
    return pinned_clients()[name].subject


class JavaDriver:
    """One driver process for one pinned client; connections are named and share the process."""

    def __init__(self, name: str, process: subprocess.Popen, log_path: Path | None) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self.events: list[Event] = []
        self._replies: dict[int, queue.Queue] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name=f"java-driver-{name}", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, name: str, *, log_dir: Path | None = None, jvm_options: tuple[str, ...] = ()) -> "JavaDriver":
        ok, reason = availability(name)
        if not ok:
            raise DriverError(reason)
        client = pinned_clients()[name]
        log_path = None
        stderr = subprocess.DEVNULL
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            log_path = log_dir / f"java-driver-{name}.log"
            stderr = open(log_path, "ab")
        command = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_options,
                   "-cp", classpath(client), "brokerconf.driver.Main", client.flavour]
        try:
            process = launch(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                             start_new_session=True)
        finally:
            if stderr is not subprocess.DEVNULL:
                stderr.close()
        driver = cls(name, process, log_path)
        if not driver._ready.wait(READY_TIMEOUT):
            driver.stop()
            raise DriverError(f"the Java driver for {client.subject} did not start within {READY_TIMEOUT:.0f} s"
                              f"{driver.log_tail()}")
        return driver

    # ----------------------------------------------------------------- protocol
    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                continue  # not ours (a library printing to stdout)
            if "id" in message and "event" not in message:
                waiting = self._replies.get(message["id"])
                if waiting is not None:
                    waiting.put(message)
                continue
            kind = message.get("event")
            if kind == "ready":
                self._ready.set()
                continue
            detail = {k: v for k, v in message.items() if k not in ("event", "conn", "mono", "address")}
            self.events.append(Event(kind, message.get("conn", ""), float(message.get("mono", time.monotonic())),
                                     message.get("address"), detail))
        for waiting in list(self._replies.values()):
            waiting.put({"ok": False, "error": "the Java driver process ended", "class": None})

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        """Send one command and wait for its answer; DriverError when it failed."""
        ident = next(self._ids)
        answer: queue.Queue = queue.Queue(maxsize=1)
        self._replies[ident] = answer
        line = json.dumps({"id": ident, "op": op, **fields}) + "\n"
        try:
            with self._lock:
                assert self.process.stdin is not None
                self.process.stdin.write(line.encode())
                self.process.stdin.flush()
            try:
                reply = answer.get(timeout=timeout or DEFAULT_REPLY_TIMEOUT)
            except queue.Empty:
                raise NoAnswer(f"{op}: no answer from the Java driver within {timeout or DEFAULT_REPLY_TIMEOUT} s") \
                    from None
        except (BrokenPipeError, OSError) as exc:
            raise DriverError(f"{op}: the Java driver process is gone ({exc}){self.log_tail()}") from None
        finally:
            self._replies.pop(ident, None)
        if not reply.get("ok"):
            raise DriverError(f"{op}: {reply.get('class')}: {reply.get('error')}"
                              + (f" (cause {reply['cause']})" if reply.get("cause") else ""), reply.get("class"), reply)
        return reply

    def connect(self, uri: str, *, conn: str | None = None, timeout: float | None = None, **options) -> "JavaConnection":
        """A new connection with ``uri`` (options: ``user``, ``password``, ``ack``; with Artemis's
        client ``factory``: the name of a factory made by `factory`, whose URL is then used)."""
        name = conn or f"c{next(self._ids)}"
        reply = self.request("connect", timeout=timeout, conn=name, uri=uri, options=options)
        return JavaConnection(self, name, reply.get("address"), local_address=reply.get("local_address"),
                              connected_mono=reply.get("connected_mono"))

    def factory(self, uri: str, name: str, timeout: float | None = None) -> float:
        """Make a connection factory for ``uri`` now, under ``name`` (Artemis's client only); returns
        when it was made (``time.monotonic`` scale), for connections naming it later."""
        return float(self.request("factory", timeout=timeout or 30, factory=name, uri=uri)["created_mono"])

    def events_of(self, conn: str, kind: str | None = None) -> list[Event]:
        return [e for e in list(self.events) if e.conn == conn and (kind is None or e.kind == kind)]

    # ----------------------------------------------------------------- life
    def log_mark(self) -> int:
        """Where the driver's stderr log ends now; ``log_since`` reads what was written after it.
        Steps that look for a line of their own read from their mark: the log is the process's
        (and appends across runs), so a closed port picked again, or an earlier step's retries,
        would otherwise be read as this step's."""
        if self.log_path is None or not self.log_path.exists():
            return 0
        return self.log_path.stat().st_size

    def log_since(self, mark: int) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(mark)
            return log.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n--- java driver stderr ---\n" + "\n".join(tail)

    def stop(self, timeout: float = 10.0) -> None:
        """Close stdin (the driver exits), then SIGTERM and SIGKILL by PID if it does not."""
        if self.process.poll() is None:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout)
        self._reader.join(5)

    def __enter__(self) -> "JavaDriver":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class JavaConnection:
    """One named connection of a driver (a JMS connection with one session)."""

    def __init__(self, driver: JavaDriver, name: str, address: str | None, *, local_address: str | None = None,
                 connected_mono: float | None = None) -> None:
        self.driver, self.name, self.first_address = driver, name, address
        #: this end of the socket when connected ("/127.0.0.1:40123"), where the client reports it (Artemis)
        self.local_address = local_address
        #: when the library handed the connection over (time.monotonic scale), where reported (Artemis)
        self.connected_mono = connected_mono

    @property
    def address(self) -> str | None:
        return self.driver.request("address", timeout=30, conn=self.name).get("address")

    @property
    def port(self) -> int | None:
        return port_of(self.address)

    def transport_uris(self) -> dict:
        """What an ActiveMQ failover client knows (the ``transport_uris`` command): ``connected``,
        ``updated`` (the URIs the broker supplied, tried first) and ``uris`` (the client's own)."""
        reply = self.driver.request("transport_uris", timeout=30, conn=self.name)
        return {key: reply.get(key) for key in ("connected", "updated", "uris")}

    def send(self, queue_name: str, body: str, *, persistent: bool = True, timeout: float | None = None) -> dict:
        return self.driver.request("send", timeout=timeout, conn=self.name, queue=queue_name, body=body,
                                   options={"persistent": persistent})

    def receive(self, queue_name: str, timeout: float = 10.0) -> str | None:
        """The next message's body, None when nothing came within ``timeout`` s."""
        reply = self.driver.request("receive", timeout=timeout + 60, conn=self.name, queue=queue_name,
                                    timeout_ms=int(timeout * 1000))
        return reply.get("body")

    def subscribe(self, queue_name: str) -> None:
        """Create the consumer of ``queue_name`` now (a receive that does not wait)."""
        self.driver.request("receive", timeout=60, conn=self.name, queue=queue_name, timeout_ms=-1)

    def ack(self) -> None:
        self.driver.request("ack", timeout=60, conn=self.name)

    def close(self, timeout: float = 60) -> None:
        self.driver.request("close", timeout=timeout, conn=self.name)

    def events(self, kind: str | None = None) -> list[Event]:
        return self.driver.events_of(self.name, kind)
