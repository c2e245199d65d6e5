"""Raw-socket STOMP load generator: one producer -> one consumer, end-to-end msgs/s.

The generator is built so that it is not the bottleneck:

* producer and consumer each run in their own OS process (``python -m
  conformance.bench.stomp_load --worker ...``), so they share no GIL with each
  other, with the caller, or with a Python broker under test;
* the SEND frame is encoded once; the producer writes batches of ~256 KiB
  (``frame * k``) with one ``sendall`` each, pipelined, without receipts; the
  broker pushes back through TCP when it applies flow control;
* the consumer ``recv_into``\\s a 4 MiB buffer and counts frames by counting NUL
  terminators in C (``bytearray.count``) -- it never parses a frame.  Bodies
  are ``b"x" * body_size``, so every NUL ends a frame.

Procedure: the consumer CONNECTs, SUBSCRIBEs (``ack:auto``) and waits for the
RECEIPT of its subscription; then the producer sends ``warmup`` messages, and
only after the consumer has received all of them does the producer take its
start time ``t0`` and send the ``messages`` timed ones.  ``seconds`` is from
``t0`` to the moment the consumer has received every timed message (both
workers read ``time.perf_counter()``, which is CLOCK_MONOTONIC on Linux and so
comparable across processes).  If the consumer receives nothing for
``timeout`` seconds the run ends with an error saying how many arrived.

Command line (prints one JSON result per run)::

    python -m conformance.bench.stomp_load 127.0.0.1:61613 --messages 200000
    python -m conformance.bench.stomp_load --activemq --runs 3   # temporary ActiveMQ, adds its peak RSS
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from machinery.tether import launch
from machinery.waiting import Deadline

__all__ = ["StompBenchResult", "run_stomp_load", "encode_send_frame"]

_RECV_BUF = 4 << 20          # consumer receive buffer
_BATCH_BYTES = 256 << 10     # producer batch size per sendall
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class StompBenchResult:
    """One measurement.  ``messages``/``consumer_received``/``producer_sent`` count timed
    messages only (warm-up excluded); ``seconds`` runs from the producer's first timed
    send to the consumer's last timed receive; on error ``msgs_per_sec`` is 0.0 and
    ``error`` says what happened (e.g. how many arrived before the consumer stalled)."""

    target: str
    messages: int
    seconds: float
    msgs_per_sec: float
    consumer_received: int
    producer_sent: int
    error: str | None

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- frames


def _check_header_value(name: str, value: str) -> str:
    if any(c in value for c in "\r\n\x00"):
        raise ValueError(f"STOMP header {name} must not contain CR, LF or NUL")
    return value


def _connect_frame(login: str | None, passcode: str | None) -> bytes:
    lines = ["CONNECT", "accept-version:1.0,1.1,1.2", "host:localhost", "heart-beat:0,0"]
    if login is not None:
        lines.append("login:" + _check_header_value("login", login))
    if passcode is not None:
        lines.append("passcode:" + _check_header_value("passcode", passcode))
    return ("\n".join(lines) + "\n\n\x00").encode()


def encode_send_frame(destination: str, body_size: int, persistent: bool = False) -> bytes:
    """One complete SEND frame (non-persistent unless ``persistent``) with a ``b"x" * body_size`` body."""
    _check_header_value("destination", destination)
    head = (f"SEND\ndestination:{destination}\ncontent-length:{body_size}\n"
            f"persistent:{'true' if persistent else 'false'}\n\n").encode()
    return head + b"x" * body_size + b"\x00"


class _StompError(Exception):
    pass


def _read_frame(sock: socket.socket, buf: bytearray) -> bytes:
    """Read one complete frame (up to NUL) for the handshake phase; leaves the rest in buf."""
    while True:
        # skip heart-beat EOLs between frames
        while buf[:1] in (b"\n", b"\r"):
            del buf[:1]
        i = buf.find(b"\x00")
        if i >= 0:
            frame = bytes(buf[:i])
            del buf[: i + 1]
            return frame
        chunk = sock.recv(65536)
        if not chunk:
            raise _StompError("connection closed by the broker" + (f" (partial frame {bytes(buf[:200])!r})" if buf else ""))
        buf += chunk


def _describe(frame: bytes) -> str:
    head, _, body = frame.partition(b"\n\n")
    lines = head.decode("utf-8", "replace").splitlines()
    msg = next((ln[8:] for ln in lines if ln.startswith("message:")), "")
    text = f"{lines[0] if lines else '?'}"
    if msg:
        text += f": {msg}"
    if body.strip():
        text += f" ({body[:300].decode('utf-8', 'replace').strip()})"
    return text


def _stomp_connect(host: str, port: int, login, passcode, timeout: float) -> tuple[socket.socket, bytearray]:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(_connect_frame(login, passcode))
    buf = bytearray()
    frame = _read_frame(sock, buf)
    if not frame.startswith(b"CONNECTED"):
        sock.close()
        raise _StompError("CONNECT refused: " + _describe(frame))
    return sock, buf


# ---------------------------------------------------------------------------- workers


def _emit(**msg) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _consumer(cfg: dict) -> None:
    timeout = float(cfg["timeout"])
    warmup = int(cfg["warmup"])
    target = warmup + int(cfg["messages"])
    sock, buf = _stomp_connect(cfg["host"], cfg["port"], cfg["login"], cfg["passcode"], min(timeout, 30.0))
    receipt = "brokerconf-bench-sub"
    sock.sendall((f"SUBSCRIBE\nid:0\ndestination:{cfg['destination']}\nack:auto\n"
                  f"receipt:{receipt}\n\n\x00").encode())
    while True:
        frame = _read_frame(sock, buf)
        if frame.startswith(b"RECEIPT") and f"receipt-id:{receipt}".encode() in frame:
            break
        if frame.startswith(b"ERROR"):
            raise _StompError("SUBSCRIBE failed: " + _describe(frame))
    count = bytes(buf).count(b"\x00")  # anything that arrived right behind the receipt
    _emit(ev="ready")

    sock.settimeout(timeout)
    rbuf = bytearray(_RECV_BUF)
    recv_into = sock.recv_into
    count_nul = rbuf.count
    warm_reported = False
    if warmup == 0 or count >= warmup:
        _emit(ev="warm", count=count)
        warm_reported = True
    t_end = 0.0
    clock = time.monotonic
    next_progress = clock() + 2.0
    while count < target:
        try:
            n = recv_into(rbuf)
        except socket.timeout:
            _emit(ev="stall", count=count)
            return
        if clock() >= next_progress:  # keeps the parent's wedge guard quiet on slow brokers
            _emit(ev="progress", count=count)
            next_progress += 2.0
        if n == 0:
            _emit(ev="error", count=count, msg="broker closed the consumer connection")
            return
        count += count_nul(b"\x00", 0, n)
        if rbuf.find(b"ERROR\n", 0, n) >= 0:
            i = rbuf.find(b"ERROR\n", 0, n)
            _emit(ev="error", count=count, msg="broker sent " + _describe(bytes(rbuf[i:n])))
            return
        if not warm_reported and count >= warmup:
            _emit(ev="warm", count=count)
            warm_reported = True
    t_end = time.perf_counter()
    _emit(ev="done", count=count, t_end=t_end)
    try:
        sock.sendall(b"DISCONNECT\n\n\x00")
        sock.close()
    except OSError:
        pass


def _check_producer_socket(sock: socket.socket) -> None:
    r, _, _ = select.select([sock], [], [], 0)
    if r:
        data = sock.recv(65536)
        if not data:
            raise _StompError("broker closed the producer connection")
        if b"ERROR" in data:
            raise _StompError("broker sent " + _describe(data[data.find(b"ERROR"):]))


def _producer(cfg: dict) -> None:
    frame = encode_send_frame(cfg["destination"], int(cfg["body_size"]), bool(cfg.get("persistent")))
    per_batch = max(1, _BATCH_BYTES // len(frame))
    batch = frame * per_batch
    sock, _ = _stomp_connect(cfg["host"], cfg["port"], cfg["login"], cfg["passcode"], min(float(cfg["timeout"]), 30.0))
    sock.settimeout(None)  # flow control may block sendall for long; the parent watches the consumer
    sendall = sock.sendall
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        full, rem = divmod(n, per_batch)
        for _ in range(full):
            sendall(batch)
            sent += per_batch
            _check_producer_socket(sock)
        if rem:
            sendall(frame * rem)
            sent += rem
            _check_producer_socket(sock)

    _emit(ev="ready")
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "warmup":
            send(int(cmd[1]))
            _emit(ev="warm_sent", sent=sent)
        elif cmd[0] == "go":
            n = int(cmd[1])
            before = sent
            t0 = time.perf_counter()
            send(n)
            _emit(ev="sent", t0=t0, t_sent=time.perf_counter(), sent=sent - before)
            # Graceful goodbye: the receipt tells us the broker has read everything.
            try:
                sock.settimeout(10)
                sendall(b"DISCONNECT\nreceipt:brokerconf-bench-bye\n\n\x00")
                buf = bytearray()
                _read_frame(sock, buf)
            except (OSError, _StompError):
                pass
            sock.close()
            return
        elif cmd[0] == "quit":
            sock.close()
            return


def _worker_main(role: str, cfg_json: str) -> int:
    cfg = json.loads(cfg_json)
    try:
        (_consumer if role == "consumer" else _producer)(cfg)
    except (_StompError, OSError) as e:
        detail = str(e) if isinstance(e, _StompError) else f"{type(e).__name__}: {e}"
        _emit(ev="error", msg=f"{role}: {detail}")
        return 1
    return 0


# ---------------------------------------------------------------------------- parent


class _Worker:
    def __init__(self, role: str, cfg: dict) -> None:
        self.role = role
        self.errfile = tempfile.TemporaryFile()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(_PROJECT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = launch(
            [sys.executable, "-m", "conformance.bench.stomp_load", "--worker", role, json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile, env=env,
            cwd=str(_PROJECT_ROOT),
        )
        self.fd = self.proc.stdout.fileno()
        self._pending = b""
        self.eof = False

    def read_events(self) -> list[dict]:
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
            return []
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def command(self, text: str) -> None:
        try:
            self.proc.stdin.write((text + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            self.errfile.seek(0)
            return self.errfile.read().decode("utf-8", "replace")[-n:].strip()
        except (OSError, ValueError):
            return ""

    def close(self, wait: float = 5.0) -> None:
        p = self.proc
        try:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in (p.stdout, self.errfile):
            try:
                f.close()
            except OSError:
                pass


def run_stomp_load(
    host: str,
    port: int,
    *,
    target: str,
    messages: int = 200_000,
    body_size: int = 256,
    destination: str = "/queue/bench",
    warmup: int = 10_000,
    login: str | None = None,
    passcode: str | None = None,
    timeout: float = 120,
    persistent: bool = False,
) -> StompBenchResult:
    """Measure end-to-end msgs/s from one producer to one consumer through a STOMP endpoint.

    ``destination`` may be a queue (default ``/queue/bench``) or a topic (``/topic/...``).
    Never raises for broker-side problems: they come back in ``result.error``.
    """
    if messages <= 0 or warmup < 0 or body_size < 0:
        raise ValueError("messages must be > 0, warmup and body_size >= 0")
    cfg = dict(host=host, port=int(port), destination=destination, body_size=int(body_size),
               warmup=int(warmup), messages=int(messages), login=login, passcode=passcode,
               timeout=float(timeout), persistent=bool(persistent))
    consumer = _Worker("consumer", cfg)
    producer = _Worker("producer", cfg)
    workers = {consumer.fd: consumer, producer.fd: producer}
    state: dict = {"sent": 0, "received": 0, "t0": None, "t_end": None}
    error: str | None = None
    phase = "connect"          # connect -> warmup -> timed -> done
    ready = set()
    # Connecting is bounded separately; after that the consumer's own stall timer rules,
    # and this guard only catches a wedged worker.
    guard = timeout + 30.0
    last_event = time.monotonic()

    def fail(msg: str) -> None:
        nonlocal error, phase
        if error is None:
            error = msg
        phase = "done"

    try:
        while phase != "done":
            fds = [fd for fd, w in workers.items() if not w.eof]
            if not fds:
                fail("both workers exited unexpectedly")
                break
            r, _, _ = select.select(fds, [], [], 1.0)
            now = time.monotonic()
            if not r:
                if now - last_event > guard:
                    fail(f"no progress report for {guard:.0f}s (received {max(0, state['received'] - warmup)} "
                         f"of {messages} timed messages)")
                continue
            for fd in r:
                w = workers[fd]
                events = w.read_events()
                if w.eof and not events and phase != "done":
                    if not (w is producer and state["t0"] is not None):
                        w.proc.wait()
                        fail(f"{w.role} worker exited (code {w.proc.returncode}) "
                             f"during {phase}: {w.stderr_tail()}")
                for ev in events:
                    last_event = now
                    kind = ev["ev"]
                    if kind == "error":
                        if "count" in ev:
                            state["received"] = ev["count"]
                        fail(ev["msg"] + (f" (consumer had received {max(0, state['received'] - warmup)} of "
                                          f"{messages} timed messages)" if w is consumer else ""))
                    elif kind == "ready":
                        ready.add(w.role)
                        if ready == {"consumer", "producer"} and phase == "connect":
                            phase = "warmup"
                            producer.command(f"warmup {warmup}")
                    elif kind == "warm" and phase in ("connect", "warmup"):
                        state["received"] = ev["count"]
                        # the consumer can only report warm after the producer got 'warmup'
                        phase = "timed"
                        producer.command(f"go {messages}")
                    elif kind == "progress":
                        state["received"] = ev["count"]
                    elif kind == "warm_sent":
                        state["sent_warmup"] = ev["sent"]
                    elif kind == "sent":
                        state["t0"] = ev["t0"]
                        state["sent"] = ev["sent"]
                    elif kind == "stall":
                        state["received"] = ev["count"]
                        fail(f"consumer stalled: nothing received for {timeout:g}s; "
                             f"{max(0, ev['count'] - warmup)} of {messages} timed messages arrived "
                             f"({min(ev['count'], warmup)} of {warmup} warm-up)")
                    elif kind == "done":
                        state["received"] = ev["count"]
                        state["t_end"] = ev["t_end"]
                        phase = "done"
        # the producer reports 'sent' once its last sendall returned; it may trail the consumer slightly
        if error is None and state["t0"] is None:
            deadline = Deadline(30)
            # a reader, not a `wait_until`: each round handles the producer's events as they come
            while state["t0"] is None and not producer.eof and not deadline.expired():
                r, _, _ = select.select([producer.fd], [], [], 1.0)
                if r:
                    for ev in producer.read_events():
                        if ev["ev"] == "sent":
                            state["t0"], state["sent"] = ev["t0"], ev["sent"]
                        elif ev["ev"] == "error":
                            fail(ev["msg"])
            if state["t0"] is None and error is None:
                fail("producer never reported its start time: " + producer.stderr_tail())
    finally:
        if error is not None:
            producer.command("quit")
        producer.close(wait=15 if error is None else 2)
        consumer.close(wait=5 if error is None else 2)

    received_timed = max(0, min(state["received"] - warmup, messages))
    if error is None:
        seconds = max(state["t_end"] - state["t0"], 1e-9)
        return StompBenchResult(target=target, messages=messages, seconds=seconds,
                                msgs_per_sec=messages / seconds, consumer_received=received_timed,
                                producer_sent=state["sent"], error=None)
    return StompBenchResult(target=target, messages=messages, seconds=0.0, msgs_per_sec=0.0,
                            consumer_received=received_timed, producer_sent=state["sent"], error=error)


# ---------------------------------------------------------------------------- CLI


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1], argv[2])
    ap = argparse.ArgumentParser(prog="python -m conformance.bench.stomp_load",
                                 description="STOMP 1->1 throughput (raw sockets, pipelined)")
    ap.add_argument("endpoint", nargs="?", help="host:port of the STOMP listener (omit with --activemq)")
    ap.add_argument("--activemq", action="store_true",
                    help="start a temporary ActiveMQ Classic (conformance.targets.activemq.process) and measure it; "
                         "adds its peak RSS to each result")
    ap.add_argument("--stomp-scheme", default=None, help="with --activemq: stomp or stomp+nio")
    ap.add_argument("--runs", type=int, default=1, help="repeat the measurement (same broker)")
    ap.add_argument("--target", default=None, help="label for the result (default: the endpoint)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--body-size", type=int, default=256)
    ap.add_argument("--destination", default="/queue/bench")
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--login")
    ap.add_argument("--passcode")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args(argv)
    if bool(a.activemq) == bool(a.endpoint):
        ap.error("give either host:port or --activemq")

    def measure(host: str, port: int, target: str, broker=None) -> int:
        rc = 0
        for i in range(a.runs):
            res = run_stomp_load(host, port, target=target, messages=a.messages, body_size=a.body_size,
                                 destination=a.destination, warmup=a.warmup, login=a.login,
                                 passcode=a.passcode, timeout=a.timeout)
            out = res.to_dict()
            out["run"] = i + 1
            if broker is not None:
                out["broker_rss_peak_bytes"] = broker.rss_peak_bytes()
            print(json.dumps(out), flush=True)
            rc |= res.error is not None
        return rc

    if a.activemq:
        from conformance.targets.activemq.process import DEFAULT_STOMP_SCHEME, ActiveMQProcess

        with tempfile.TemporaryDirectory(prefix="brokerconf-amq-") as d:
            scheme = a.stomp_scheme or DEFAULT_STOMP_SCHEME
            with ActiveMQProcess(Path(d), stomp_scheme=scheme) as amq:
                return measure("127.0.0.1", amq.stomp_port, a.target or f"activemq-{scheme}", amq)
    host, _, port = a.endpoint.rpartition(":")
    return measure(host or "127.0.0.1", int(port), a.target or a.endpoint)


if __name__ == "__main__":
    sys.exit(_main())
