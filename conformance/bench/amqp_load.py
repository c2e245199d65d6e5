"""AMQP 1.0 load generator on python-qpid-proton's reactor: one sender -> one receiver.

Same procedure and worker protocol as :mod:`conformance.bench.stomp_load` and
:mod:`conformance.bench.mqtt_load` (whose orchestration it reuses): sender and
receiver are separate OS processes (``python -m conformance.bench.amqp_load
--worker ...``), each running a :class:`proton.reactor.Container` with a plain
handler (no ``MessagingHandler``, so no per-message ``Message`` decoding):

* the message (``Message(body=b"x" * body_size)``, an AMQP data section) is
  encoded once; the sender writes it with ``link.delivery(tag)`` /
  ``link.stream(bytes)`` / ``link.advance()`` for as long as the link has credit
  and the current goal is not reached, so the credit the broker grants is kept
  busy;
* ``presettled=True`` (at-most-once): both links use ``snd-settle-mode
  settled``; the sender settles each delivery as it sends it and the receiver
  just settles what arrives.  ``presettled=False``: unsettled transfers; the
  receiver accepts and settles each delivery, the sender counts the broker's
  dispositions (RabbitMQ: publisher confirms) and settles them; its ``sent``
  event (and so its CPU window) ends only when every delivery is accepted;
* the receiver never decodes a message: it counts complete deliveries; it grants
  ``credit`` (default 1,000) up front and tops the link up to that whenever
  less than half is left.

Commands reach the sender's reactor from a stdin-reading thread through an
:class:`proton.reactor.EventInjector`.  ``seconds`` runs from the sender's
first timed delivery to the receiver's last timed one.  The parent samples CPU
seconds of both worker processes (and of ``broker_pid`` if given) between the
end of the warm-up and the end of the run, so the result shows whether the
generator or the broker is the limit.

Command line (one JSON result per run)::

    python -m conformance.bench.amqp_load 127.0.0.1:5672 --user guest --password guest
    python -m conformance.bench.amqp_load --rabbitmq --runs 3 [--unsettled]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .mqtt_load import _orchestrate

__all__ = ["AmqpBenchResult", "run_amqp_load"]


@dataclass
class AmqpBenchResult:
    """One measurement (timed messages only; warm-up excluded).  ``producer_acked`` counts
    deliveries the broker accepted (unsettled mode).  CPU seconds cover the timed phase:
    the two generator processes, and the broker's when its PID was given."""

    target: str
    presettled: bool
    messages: int
    seconds: float
    msgs_per_sec: float
    consumer_received: int
    producer_sent: int
    error: str | None
    producer_acked: int = 0
    producer_cpu_seconds: float = 0.0
    consumer_cpu_seconds: float = 0.0
    broker_cpu_seconds: float | None = None

    @property
    def generator_cpu_seconds(self) -> float:
        return self.producer_cpu_seconds + self.consumer_cpu_seconds

    def to_dict(self) -> dict:
        d = asdict(self)
        d["generator_cpu_seconds"] = self.generator_cpu_seconds
        return d


# ---------------------------------------------------------------------------- workers


def _emit(**msg) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def _connect(container, cfg: dict):
    kwargs = dict(reconnect=False)
    if cfg.get("user") is not None:
        kwargs.update(user=cfg["user"], password=cfg.get("password") or "", allowed_mechs="PLAIN",
                      sasl_enabled=True)
    else:
        kwargs.update(allowed_mechs="ANONYMOUS", sasl_enabled=True)
    return container.connect(f"amqp://{cfg['host']}:{cfg['port']}", **kwargs)


def _cond(endpoint) -> str:
    c = endpoint.remote_condition if endpoint is not None else None
    if c is None:
        return ""
    return f"{c.name}: {c.description}" if c.description else str(c.name)


class _Stopper:
    def __init__(self, container) -> None:
        self.container = container

    def on_timer_task(self, event) -> None:
        self.container.stop()


class _Base:
    """Shared error/teardown handling for both workers' handlers."""

    role = "?"

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.conn = None
        self.finished = False
        self.container = None

    def on_reactor_init(self, event) -> None:  # what MessagingHandler calls on_start
        self.on_start(event)

    def on_start(self, event) -> None:
        raise NotImplementedError

    failed = False

    def fail(self, msg: str, **extra) -> None:
        self.failed = True
        if not self.finished:
            self.finished = True
            _emit(ev="error", msg=f"{self.role}: {msg}", **extra)
        self.shutdown(graceful=False)

    def shutdown(self, graceful: bool = True) -> None:
        """Close the connection; graceful: let the close handshake finish (at most 2 s)."""
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        if self.container is not None:
            if graceful:
                self.container.schedule(2.0, _Stopper(self.container))
            else:
                self.container.stop()

    def on_transport_error(self, event) -> None:
        cond = event.transport.condition
        self.fail(f"transport error: {cond.name}: {cond.description}" if cond else "transport error")

    def on_connection_remote_close(self, event) -> None:
        if not self.finished:
            self.fail("broker closed the connection" + (f" ({_cond(event.connection)})" if _cond(event.connection) else ""))
        elif self.container is not None:
            self.container.stop()  # the answer to our close: done

    def on_session_remote_close(self, event) -> None:
        if not self.finished:
            self.fail("broker ended the session" + (f" ({_cond(event.session)})" if _cond(event.session) else ""))

    def on_link_remote_close(self, event) -> None:
        if not self.finished:
            self.fail("broker detached the link" + (f" ({_cond(event.link)})" if _cond(event.link) else ""))


class _Receiver(_Base):
    role = "receiver"

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        self.presettled = bool(cfg["presettled"])
        self.warmup = int(cfg["warmup"])
        self.target = self.warmup + int(cfg["messages"])
        self.window = max(1, int(cfg["credit"]))
        self.low = max(1, self.window // 2)
        self.timeout = float(cfg["timeout"])
        self.count = 0
        self.unflowed = 0
        self.ready = False
        self.warm_reported = False
        self.last_rx = time.monotonic()
        self.next_progress = time.monotonic() + 2.0
        self.rcv = None

    def on_start(self, event) -> None:
        from proton.reactor import AtMostOnce

        self.container = event.container
        self.conn = _connect(self.container, self.cfg)
        opts = [AtMostOnce()] if self.presettled else None
        self.rcv = self.container.create_receiver(self.conn, self.cfg["address"], name="bench-receiver", options=opts)
        self.rcv.flow(self.window)
        self.container.schedule(1.0, self)

    def on_link_remote_open(self, event) -> None:
        if event.link is self.rcv or event.link == self.rcv:
            if event.link.remote_source.address is None and not event.link.remote_source.dynamic:
                return  # a refused attach comes with a null source and is followed by a detach
            if not self.ready:
                self.ready = True
                _emit(ev="ready")
                if self.warmup == 0:
                    self.warm_reported = True
                    _emit(ev="warm", count=self.count)

    def on_delivery(self, event) -> None:
        dlv = event.delivery
        if dlv.partial:
            return
        rcv = self.rcv  # the only receiving link (cheaper than wrapping dlv.link)
        rcv.advance()
        if not self.presettled and not dlv.settled:
            dlv.update(dlv.ACCEPTED)
        dlv.settle()
        self.count += 1
        self.unflowed += 1
        if self.unflowed >= self.low:  # keep `window` credit outstanding, topped up in batches
            rcv.flow(self.unflowed)
            self.unflowed = 0
        count = self.count
        if not self.warm_reported and count >= self.warmup:
            self.warm_reported = True
            _emit(ev="warm", count=count)
        if count >= self.target and not self.finished:
            self.finished = True
            _emit(ev="done", count=count, t_end=time.perf_counter())
            self.shutdown()

    def on_timer_task(self, event) -> None:
        if self.finished:
            return
        now = time.monotonic()
        if self.count != getattr(self, "_last_count", -1):
            self._last_count = self.count
            self.last_rx = now
        elif self.ready and now - self.last_rx >= self.timeout:
            self.finished = True
            _emit(ev="stall", count=self.count)
            self.shutdown()
            return
        if now >= self.next_progress:
            _emit(ev="progress", count=self.count)
            self.next_progress = now + 2.0
        self.container.schedule(1.0, self)


class _Sender(_Base):
    role = "sender"

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        from proton import Message

        self.presettled = bool(cfg["presettled"])
        self.body = Message(body=b"x" * int(cfg["body_size"]), durable=False).encode()
        self.snd = None
        self.injector = None
        self.sent = 0
        self.acked = 0
        self.acked_map = bytearray()  # unsettled mode: 1 per delivery the broker has settled
        self.goal = 0
        self.timed = None        # (sent_before, acked_before) once "go" arrived
        self.t0 = 0.0
        self.reported = True     # nothing to report until a goal is set
        self.after_goal = ""

    def on_start(self, event) -> None:
        from proton.reactor import AtMostOnce

        self.container = event.container
        self.conn = _connect(self.container, self.cfg)
        opts = [AtMostOnce()] if self.presettled else None
        self.snd = self.container.create_sender(self.conn, self.cfg["address"], name="bench-sender", options=opts)

    def on_link_remote_open(self, event) -> None:
        if event.link == self.snd:
            if event.link.remote_target.address is None and not event.link.remote_target.dynamic:
                return
            _emit(ev="ready")

    def on_command(self, event) -> None:
        cmd = (event.subject or "").split()
        if not cmd:
            return
        if cmd[0] in ("warmup", "go"):
            n = int(cmd[1])
            self.goal = self.sent + n
            if not self.presettled and len(self.acked_map) < self.goal:
                self.acked_map.extend(bytes(self.goal - len(self.acked_map)))
            self.reported = False
            self.after_goal = cmd[0]
            if cmd[0] == "go":
                # The baseline of the timed acks is what was sent before, not what was acked so
                # far: "go" may arrive while the last warm-up dispositions are still on their way
                # (seen in CI: 3 late acks counted as timed ones, 2003 of 2000). The report waits
                # until acks reach the goal, so by then every earlier delivery is acked too.
                self.timed = (self.sent, self.acked if self.presettled else self.sent)
                self.t0 = time.perf_counter()
            self.pump()
            self.check_goal()
        elif cmd[0] in ("quit", "eof"):
            self.finished = True
            if self.injector is not None:
                self.injector.close()
            self.shutdown()

    def on_link_flow(self, event) -> None:
        if event.link == self.snd:
            self.pump()
            self.check_goal()

    def pump(self) -> None:
        snd = self.snd
        if snd is None:
            return
        n = min(snd.credit, self.goal - self.sent)
        if n <= 0:
            return
        delivery, stream, advance, body = snd.delivery, snd.stream, snd.advance, self.body
        if self.presettled:
            tag = "0"
            for _ in range(n):
                d = delivery(tag)
                stream(body)
                advance()
                d.settle()
        else:
            base = self.sent  # tag = decimal sequence number (proton hands tags back as str)
            for i in range(base, base + n):
                delivery(str(i))
                stream(body)
                advance()
        self.sent += n

    def on_delivery(self, event) -> None:
        dlv = event.delivery
        if not (dlv.settled or dlv.remote_state):
            return
        # Count each delivery once (tags are the sequence numbers): a disposition can come as
        # two frames (state, then settlement) and both events may be dispatched after the
        # second one arrived, i.e. also after we settled the delivery.
        idx = int(dlv.tag)
        if self.acked_map[idx]:
            return
        self.acked_map[idx] = 1
        state = dlv.remote_state
        if state is not None and state != dlv.ACCEPTED:
            names = {dlv.REJECTED: "rejected", dlv.RELEASED: "released", dlv.MODIFIED: "modified"}
            cond = getattr(dlv.remote, "condition", None)
            self.fail(f"broker {names.get(state, state)} a delivery" + (f" ({cond.name}: {cond.description})"
                                                                       if cond else ""))
            return
        self.acked += 1
        dlv.settle()
        if self.acked >= self.goal:
            self.check_goal()

    def check_goal(self) -> None:
        if self.reported or self.sent < self.goal:
            return
        if not self.presettled and self.acked < self.goal:
            return
        self.reported = True
        if self.after_goal == "warmup":
            _emit(ev="warm_sent", sent=self.sent)
        else:
            sb, ab = self.timed
            _emit(ev="sent", t0=self.t0, t_sent=time.perf_counter(), sent=self.sent - sb, acked=self.acked - ab)


def _stdin_pump(injector) -> None:
    from proton.reactor import ApplicationEvent

    for line in sys.stdin:
        injector.trigger(ApplicationEvent("command", subject=line))
        if line.split()[:1] == ["quit"]:
            return
    injector.trigger(ApplicationEvent("command", subject="eof"))


def _worker_main(role: str, cfg_json: str) -> int:
    from proton.reactor import Container, EventInjector

    cfg = json.loads(cfg_json)
    handler = _Receiver(cfg) if role == "consumer" else _Sender(cfg)
    container = Container(handler)
    container.container_id = f"bcbench-{role}-{os.getpid()}"
    if isinstance(handler, _Sender):
        handler.injector = EventInjector()
        container.selectable(handler.injector)
        threading.Thread(target=_stdin_pump, args=(handler.injector,), daemon=True).start()
    try:
        container.run()
    except Exception as e:  # proton raises for handler errors; report them as worker errors
        _emit(ev="error", msg=f"{handler.role}: {type(e).__name__}: {e}")
        return 1
    return 1 if handler.failed else 0


# ---------------------------------------------------------------------------- parent


def run_amqp_load(
    host: str,
    port: int,
    *,
    target: str,
    messages: int = 100_000,
    body_size: int = 256,
    address: str = "bench",
    warmup: int = 5_000,
    presettled: bool = True,
    timeout: float = 120,
    credit: int = 1000,
    user: str | None = "guest",
    password: str | None = "guest",
    broker_pid: int | None = None,
) -> AmqpBenchResult:
    """Measure end-to-end msgs/s from one AMQP 1.0 sender to one receiver.

    ``address`` is used as both the sender's target and the receiver's source (RabbitMQ
    3.x: a bare name is a queue, declared on attach).  ``user=None`` connects with SASL
    ANONYMOUS.  Never raises for broker-side problems: they come back in ``error``.
    """
    if messages <= 0 or warmup < 0 or body_size < 0 or credit <= 0:
        raise ValueError("messages and credit must be > 0, warmup and body_size >= 0")
    cfg = dict(host=host, port=int(port), address=address, body_size=int(body_size), warmup=int(warmup),
               messages=int(messages), presettled=bool(presettled), timeout=float(timeout), credit=int(credit),
               user=user, password=password)
    st = _orchestrate("conformance.bench.amqp_load", cfg, messages=messages, warmup=warmup, timeout=timeout,
                      broker_pid=broker_pid)
    received = max(0, min(st["received"] - warmup, messages))
    common = dict(target=target, presettled=bool(presettled), messages=messages, consumer_received=received,
                  producer_sent=st["sent"], producer_acked=st["acked"], producer_cpu_seconds=st["producer_cpu"],
                  consumer_cpu_seconds=st["consumer_cpu"], broker_cpu_seconds=st["broker_cpu"])
    if st["error"] is None:
        seconds = max(st["t_end"] - st["t0"], 1e-9)
        return AmqpBenchResult(seconds=seconds, msgs_per_sec=messages / seconds, error=None, **common)
    return AmqpBenchResult(seconds=0.0, msgs_per_sec=0.0, error=st["error"], **common)


# ---------------------------------------------------------------------------- CLI


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1], argv[2])
    ap = argparse.ArgumentParser(prog="python -m conformance.bench.amqp_load",
                                 description="AMQP 1.0 1->1 throughput (python-qpid-proton reactor)")
    ap.add_argument("endpoint", nargs="?", help="host:port of the AMQP listener (omit with --rabbitmq)")
    ap.add_argument("--rabbitmq", action="store_true", help="start a temporary RabbitMQ (amqp1_0 plugin)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--target", default=None)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--body-size", type=int, default=256)
    ap.add_argument("--address", default="bench")
    ap.add_argument("--warmup", type=int, default=5_000)
    ap.add_argument("--unsettled", action="store_true", help="unsettled transfers, receiver accepts each")
    ap.add_argument("--credit", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--user", default="guest")
    ap.add_argument("--password", default="guest")
    ap.add_argument("--anonymous", action="store_true", help="SASL ANONYMOUS instead of PLAIN")
    ap.add_argument("--broker-pid", type=int)
    a = ap.parse_args(argv)
    if bool(a.rabbitmq) == bool(a.endpoint):
        ap.error("give either host:port or --rabbitmq")
    user = None if a.anonymous else a.user

    def measure(host: str, port: int, target: str, broker=None, broker_pid=None) -> int:
        rc = 0
        for i in range(a.runs):
            res = run_amqp_load(host, port, target=target, messages=a.messages, body_size=a.body_size,
                                address=a.address, warmup=a.warmup, presettled=not a.unsettled,
                                timeout=a.timeout, credit=a.credit, user=user, password=a.password,
                                broker_pid=broker_pid)
            out = res.to_dict()
            out["run"] = i + 1
            if broker is not None:
                out["broker_rss_peak_bytes"] = broker.rss_peak_bytes()
            print(json.dumps(out), flush=True)
            rc |= res.error is not None
        return rc

    if a.rabbitmq:
        from conformance.targets.rabbitmq.process import RabbitMQProcess

        with tempfile.TemporaryDirectory(prefix="brokerconf-rmq-") as d:
            with RabbitMQProcess(Path(d)) as r:
                return measure("127.0.0.1", r.amqp_port, a.target or "rabbitmq-amqp10", r, r.beam_pid)
    host, _, port = a.endpoint.rpartition(":")
    return measure(host or "127.0.0.1", int(port), a.target or a.endpoint, None, a.broker_pid)


if __name__ == "__main__":
    sys.exit(_main())
