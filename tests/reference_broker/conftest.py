"""Shared fixtures for the reference broker's end-to-end tests.

* `broker_factory(**config)` starts an in-process `BrokerServer` on 127.0.0.1:0 in an asyncio loop
  running in a background thread and returns a `RunningBroker` (its bound STOMP address, and
  `call()` to run code on the loop thread, e.g. to read statistics). Everything it started is
  stopped at teardown.
* `broker` is one such broker with the default configuration.
* `RawStomp` is a raw-socket STOMP client for what stomp.py cannot express (malformed frames,
  exact bytes, heart-beat timing); it parses with the project's own codec.
* `StompClient` / `stomp_client` wrap stomp.py's Connection10/11/12 with a thread-safe listener.
* `BrokerProcess` runs `python -m reference_broker` as a subprocess (durability tests).
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import pytest
import stomp

from conformance.targets.reference.process import ReferenceBrokerProcess
from machinery.loop_thread import LoopThread
from reference_broker.config import build_config
from reference_broker.protocols.stomp.codec import HEARTBEAT, Frame, StompParser, serialize_frame
from reference_broker.server import BrokerServer

TIMEOUT = 5.0  # generous upper bound for anything that should happen "now"
REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- in-process broker


class RunningBroker:
    """A `BrokerServer` served by its own event loop in a daemon thread."""

    def __init__(self, config: dict) -> None:
        data = {"stomp": "127.0.0.1:0", **config}
        self.config = build_config(data)
        self._loop = LoopThread("broker-loop")
        self.loop = self._loop.loop  # tests schedule on it directly
        self.server: BrokerServer = self.call(lambda: BrokerServer(self.config))
        self._await(self.server.start())
        self.host, self.port = self.server.stomp_address
        self.stopped = False

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def _await(self, coro, timeout: float = TIMEOUT) -> Any:
        return self._loop.run(coro, timeout)

    def call(self, fn: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        """Run `fn()` on the broker's loop thread (the engine is single-threaded) and return its result."""
        return self._loop.call(fn, timeout)

    def stats(self) -> dict:
        return self.call(self.server.broker.stats)

    def queue_stats(self, name: str) -> dict | None:
        canonical = name if "://" in name else "queue://" + name.removeprefix("/queue/")
        for q in self.stats()["queues"]:
            if q["name"] == canonical:
                return q
        return None

    def connection_count(self) -> int:
        return self.call(lambda: len(self.server.broker.connections))

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        try:
            self._await(self.server.stop())
        finally:
            self._loop.stop(TIMEOUT)


@pytest.fixture
def broker_factory():
    started: list[RunningBroker] = []

    def factory(**config: Any) -> RunningBroker:
        running = RunningBroker(config)
        started.append(running)
        return running

    yield factory
    for running in reversed(started):
        running.stop()


@pytest.fixture
def broker(broker_factory) -> RunningBroker:
    return broker_factory()


@pytest.fixture
def stomp_address(broker) -> tuple[str, int]:
    """The bound (host, port) of a default in-process broker."""
    return broker.address


# --------------------------------------------------------------------------- raw socket client


class ConnectionClosed(AssertionError):
    pass


class RawStomp:
    """A blocking raw-socket STOMP peer that parses the broker's frames with the project codec."""

    def __init__(self, address: tuple[str, int], version: str = "1.2", timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.parser = StompParser(version=version)
        self.events: deque = deque()
        self.heartbeats = 0
        self.raw_received = bytearray()
        self.eof = False

    # ---- sending
    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, command: str, headers=(), body: bytes = b"", *, version: str | None = None,
                   content_length: bool = False) -> None:
        self.sock.sendall(serialize_frame(command, list(dict(headers).items()) if isinstance(headers, dict) else list(headers),
                                          body, version or self.parser.version, content_length=content_length))

    def connect(self, version: str | None = "1.2", command: str = "CONNECT", **headers: str) -> Frame:
        hdrs = []
        if version is not None:
            hdrs.append(("accept-version", version))
        hdrs.append(("host", "localhost"))
        hdrs += [(k.replace("_", "-"), v) for k, v in headers.items()]
        self.send_frame(command, hdrs, version="1.0")  # CONNECT is never escaped
        frame = self.read_frame()
        if frame.command == "CONNECTED":
            self.parser.version = frame.get("version", "1.0")
        return frame

    # ---- receiving
    def _fill(self, deadline: float) -> bool:
        """Read once; False on EOF."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no data from the broker in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no data from the broker in time") from None
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.raw_received += data
        for event in self.parser.feed(data):
            if event is HEARTBEAT:
                self.heartbeats += 1
            else:
                self.events.append(event)
        return True

    def read_frame(self, timeout: float | None = None) -> Frame:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.events:
            if self.eof or not self._fill(deadline):
                raise ConnectionClosed(f"connection closed; received {bytes(self.raw_received[-500:])!r}")
        return self.events.popleft()

    def expect(self, command: str, timeout: float | None = None) -> Frame:
        frame = self.read_frame(timeout)
        assert frame.command == command, f"expected {command}, got {frame!r}"
        return frame

    def no_frame(self, within: float = 0.3) -> None:
        """Assert that no frame arrives within `within` seconds (heart-beats are ignored)."""
        deadline = time.monotonic() + within
        try:
            while not self.events and not self.eof:
                self._fill(deadline)
        except TimeoutError:
            pass
        assert not self.events, f"unexpected frame {self.events[0]!r}"

    def wait_closed(self, timeout: float = TIMEOUT) -> list[Frame]:
        """Read until the broker closes the connection; returns the frames read meanwhile."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            self._fill(deadline)
        frames = list(self.events)
        self.events.clear()
        return frames

    def expect_error_and_close(self, timeout: float = TIMEOUT) -> Frame:
        """STOMP 1.2 "ERROR": the broker sends one ERROR frame and then closes the connection."""
        frames = self.wait_closed(timeout)
        errors = [f for f in frames if f.command == "ERROR"]
        assert errors, f"expected an ERROR frame before the close, got {frames!r}"
        assert frames[-1].command == "ERROR", f"frames after the ERROR: {frames!r}"
        message = errors[0].get("message")
        assert message, f"ERROR frame without a message header: {errors[0]!r}"
        return errors[0]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RawStomp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@pytest.fixture
def raw_factory():
    opened: list[RawStomp] = []

    def factory(address: tuple[str, int], version: str = "1.2") -> RawStomp:
        client = RawStomp(address, version)
        opened.append(client)
        return client

    yield factory
    for client in opened:
        client.close()


def assert_broker_works(address: tuple[str, int], destination: str | None = None) -> None:
    """A fresh client can connect, subscribe, send and receive on the broker at `address`."""
    dest = destination or f"/queue/health.{time.monotonic_ns()}"
    with RawStomp(address) as client:
        connected = client.connect("1.2")
        assert connected.command == "CONNECTED", connected
        client.send_frame("SUBSCRIBE", [("id", "h"), ("destination", dest), ("receipt", "s")])
        client.expect("RECEIPT")
        client.send_frame("SEND", [("destination", dest), ("receipt", "p")], b"still alive", content_length=True)
        frames = [client.read_frame(), client.read_frame()]
        commands = sorted(f.command for f in frames)
        assert commands == ["MESSAGE", "RECEIPT"], frames
        message = next(f for f in frames if f.command == "MESSAGE")
        assert message.body == b"still alive"
        client.send_frame("DISCONNECT", [("receipt", "bye")])
        client.expect("RECEIPT")


# --------------------------------------------------------------------------- stomp.py client


class CollectingListener(stomp.ConnectionListener):
    """Thread-safe record of what stomp.py's receiver thread saw."""

    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.errors: queue.Queue = queue.Queue()
        self.receipts: set[str] = set()
        self.heartbeats = 0
        self.connected_headers: dict | None = None
        self.disconnected = threading.Event()
        self._cond = threading.Condition()

    def on_connected(self, frame) -> None:
        self.connected_headers = dict(frame.headers)

    def on_message(self, frame) -> None:
        self.messages.put(frame)

    def on_error(self, frame) -> None:
        self.errors.put(frame)

    def on_receipt(self, frame) -> None:
        with self._cond:
            self.receipts.add(frame.headers.get("receipt-id"))
            self._cond.notify_all()

    def on_heartbeat(self) -> None:
        self.heartbeats += 1

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def wait_receipt(self, receipt: str, timeout: float = TIMEOUT) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: receipt in self.receipts, timeout)
        assert ok, f"no RECEIPT for {receipt!r}"

    def get(self, timeout: float = TIMEOUT):
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no MESSAGE arrived in time") from None

    def get_n(self, n: int, timeout: float = TIMEOUT) -> list:
        return [self.get(timeout) for _ in range(n)]

    def assert_no_message(self, within: float = 0.3) -> None:
        try:
            frame = self.messages.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected MESSAGE {frame.headers} {frame.body!r}")

    def error(self, timeout: float = TIMEOUT):
        try:
            return self.errors.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no ERROR arrived in time") from None


_CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class StompClient:
    """stomp.py connection + CollectingListener; `receipt()` makes unique receipt ids."""

    def __init__(self, address: tuple[str, int], version: str = "1.2", *, heartbeats=(0, 0),
                 auto_decode: bool = True, **kwargs: Any) -> None:
        cls = _CONNECTIONS[version]
        args: dict[str, Any] = {"auto_decode": auto_decode, **kwargs}
        if version != "1.0":
            args["heartbeats"] = heartbeats
        self.version = version
        self.conn = cls([address], **args)
        self.listener = CollectingListener()
        self.conn.set_listener("collect", self.listener)
        self._receipts = 0

    def connect(self, login: str | None = None, passcode: str | None = None, **headers: str) -> "StompClient":
        self.conn.connect(login, passcode, wait=True, headers=headers or None)
        return self

    def receipt(self) -> str:
        self._receipts += 1
        return f"r-{id(self)}-{self._receipts}"

    def send(self, destination: str, body: str | bytes = "", *, wait: bool = True, **headers: Any) -> None:
        """SEND, by default with a receipt that is waited for (so ordering is known).
        Keyword names use `_` for `-` (content_type= sends a content-type header)."""
        headers = {k.replace("_", "-"): str(v) for k, v in headers.items()}
        if wait:
            rid = self.receipt()
            headers["receipt"] = rid
            self.conn.send(destination, body, headers=headers)
            self.listener.wait_receipt(rid)
        else:
            self.conn.send(destination, body, headers=headers)

    def subscribe(self, destination: str, sub_id: str, ack: str = "auto", **headers: Any) -> None:
        rid = self.receipt()
        headers = {k: str(v) for k, v in headers.items()}
        headers["receipt"] = rid
        if self.version == "1.0":
            self.conn.subscribe(destination, id=sub_id, ack=ack, headers=headers)
        else:
            self.conn.subscribe(destination, sub_id, ack=ack, headers=headers)
        self.listener.wait_receipt(rid)

    def sync(self) -> None:
        """A round trip: everything sent before has been processed by the broker."""
        rid = self.receipt()
        self.conn.send_frame("BEGIN", {"transaction": rid, "receipt": rid})
        self.listener.wait_receipt(rid)
        rid2 = self.receipt()
        self.conn.send_frame("ABORT", {"transaction": rid, "receipt": rid2})
        self.listener.wait_receipt(rid2)

    def disconnect(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()

    def close(self) -> None:
        try:
            if self.conn.is_connected():
                self.conn.disconnect()
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass
        finally:
            try:
                self.conn.transport.stop()
            except Exception:  # noqa: BLE001
                pass


@pytest.fixture
def stomp_client():
    made: list[StompClient] = []

    def factory(address: tuple[str, int], version: str = "1.2", connect: bool = True, *,
                login: str | None = None, passcode: str | None = None, headers: dict | None = None,
                **kwargs: Any) -> StompClient:
        client = StompClient(address, version, **kwargs)
        made.append(client)
        if connect:
            client.connect(login, passcode, **(headers or {}))
        return client

    yield factory
    for client in made:
        client.close()


# --------------------------------------------------------------------------- subprocess broker



class BrokerProcess(ReferenceBrokerProcess):
    """The reference broker as a child process (the conformance target's own launcher), on a
    free STOMP port, without the HTTP listener; stopped through its handle only."""

    def __init__(self, data_dir: Path | None = None, config_file: Path | None = None,
                 extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir=data_dir, config_file=config_file, http=False, extra_args=extra_args)


@pytest.fixture
def broker_process_factory():
    started: list[BrokerProcess] = []

    def factory(**kwargs: Any) -> BrokerProcess:
        proc = BrokerProcess(**kwargs)
        started.append(proc)
        return proc

    yield factory
    for proc in started:
        proc.stop()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A private PostgreSQL server for the module (machinery/postgres.py): the
    database store and lease tests."""
    from conformance.requirements import skip_or_fail
    from machinery import postgres

    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    server = postgres.PostgresServer(tmp_path_factory.mktemp("pg"))
    try:
        yield server.start()
    finally:
        server.stop()
