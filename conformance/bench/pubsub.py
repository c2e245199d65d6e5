"""`brokerconf bench mqtt` and `brokerconf bench amqp`: end-to-end messages per second, one
publisher to one subscriber, 256-byte payloads, for the reference broker and the real brokers
installed here, side by side in one run, with each broker's CPU per message and peak RSS.

MQTT: QoS 0 and QoS 1 against the reference broker, Mosquitto, ActiveMQ Classic's MQTT
transport and amqtt (when its `amqtt` command is installed). AMQP 1.0: the reference broker and
RabbitMQ (rabbitmq_amqp1_0), pre-settled and unsettled.

Every target gets the same discarded warm-up run first (a JVM's first run measures its JIT).
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from conformance.targets.activemq.process import ActiveMQProcess, activemq_mqtt_available
from conformance.targets.mosquitto.process import MosquittoProcess, mosquitto_available
from machinery.process import free_ports, peak_rss
from machinery.tether import launch
from machinery.waiting import wait_until
from conformance.targets.rabbitmq.process import RabbitMQProcess, rabbitmq_available
from conformance.targets.reference.process import ReferenceBrokerProcess
from .amqp_load import run_amqp_load
from .mqtt_load import run_mqtt_load


@dataclass
class ModeResult:
    mode: str  # "qos0", "qos1", "presettled", "unsettled"
    runs: list[float] = field(default_factory=list)  # msg/s
    cpu_us_per_msg: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.runs) if self.runs else 0.0


@dataclass
class TargetResult:
    target: str
    modes: list[ModeResult] = field(default_factory=list)
    rss_peak_bytes: int = 0
    skipped: str | None = None
    error: str | None = None

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)


# ---------------------------------------------------------------- amqtt (optional peer)


class AmqttProcess:
    """amqtt's broker (`amqtt` command from PyPI), only if the user installed it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.mqtt_port = free_ports(1)[0]
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "amqtt.yaml"
        config.write_text(
            "listeners:\n  default:\n    type: tcp\n    bind: 127.0.0.1:%d\n"
            "auth:\n  allow-anonymous: true\n" % self.mqtt_port
        )
        self.log = open(self.workdir / "amqtt.log", "wb")
        self.proc = launch([shutil.which("amqtt"), "-c", str(config)], stdout=self.log,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"amqtt exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.mqtt_port), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_until(listening, timeout, 0.1, on_timeout=lambda _: RuntimeError("amqtt did not listen in time"))

    def rss_peak_bytes(self) -> int:
        return peak_rss(self.pid) if self.proc is not None and self.proc.poll() is None else 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "log", None):
            self.log.close()


def amqtt_available() -> tuple[bool, str]:
    if shutil.which("amqtt"):
        return True, ""
    return False, "amqtt is not installed (optional peer: pip install amqtt)"


# ---------------------------------------------------------------- orchestration


def _measure(target: str, launcher, port_attr: str, modes: list[tuple[str, Callable]], *,
             repeats: int, messages: int, warmup: Callable, progress: Callable[[str], None]) -> TargetResult:
    result = TargetResult(target)
    try:
        progress(f"starting {target}...")
        launcher.start()
        port = getattr(launcher, port_attr)
        # The process doing the work: RabbitMQ's Erlang VM, not its start script.
        broker_pid = getattr(launcher, "beam_pid", None) or launcher.pid
        progress(f"{target}: warm-up run (not counted)")
        warm = warmup(port)
        if warm.error:
            raise RuntimeError(f"warm-up run failed: {warm.error}")
        for mode, run in modes:
            outcome = ModeResult(mode)
            result.modes.append(outcome)
            for attempt in range(1, repeats + 1):
                r = run(port, broker_pid)
                if r.error:
                    outcome.error = r.error
                    progress(f"{target} {mode} run {attempt}: error: {r.error}")
                    break
                outcome.runs.append(r.msgs_per_sec)
                if r.broker_cpu_seconds is not None:
                    outcome.cpu_us_per_msg.append(r.broker_cpu_seconds / messages * 1e6)
                cpu = f"; broker CPU {outcome.cpu_us_per_msg[-1]:.1f} us/msg" if outcome.cpu_us_per_msg else ""
                progress(f"{target} {mode} run {attempt}/{repeats}: {r.msgs_per_sec:,.0f} msg/s{cpu}")
        result.rss_peak_bytes = launcher.rss_peak_bytes()
    except Exception as exc:  # a peer that cannot start is reported; the others still run
        result.error = f"{type(exc).__name__}: {exc}"
        progress(f"{target}: {result.error}")
    finally:
        launcher.stop()
    return result


def run_mqtt_bench(*, messages: int = 200_000, repeats: int = 3, qos_levels: tuple[int, ...] = (0, 1),
                   targets: tuple[str, ...] = ("reference", "mosquitto", "activemq", "amqtt"),
                   warmup_messages: int = 50_000, progress: Callable[[str], None] = print) -> list[TargetResult]:
    def mode(qos: int):
        return (f"qos{qos}", lambda port, pid: run_mqtt_load("127.0.0.1", port, target="bench", messages=messages,
                                                            qos=qos, broker_pid=pid))

    def warmup(port: int):
        return run_mqtt_load("127.0.0.1", port, target="warm-up", messages=warmup_messages, qos=0)

    results = []
    with tempfile.TemporaryDirectory(prefix="brokerconf-bench-mqtt-") as tmp:
        for name in targets:
            if name == "reference":
                launcher, available = ReferenceBrokerProcess(name="bench", http=False, log_level="WARNING", mqtt=True), (True, "")
            elif name == "mosquitto":
                # Unlimited queue, or mosquitto drops QoS 1 messages of a fast publisher.
                launcher, available = MosquittoProcess(Path(tmp) / name, max_queued_messages=0), mosquitto_available()
            elif name == "activemq":
                launcher, available = ActiveMQProcess(Path(tmp) / name, mqtt=True), activemq_mqtt_available()
            elif name == "amqtt":
                launcher, available = AmqttProcess(Path(tmp) / name), amqtt_available()
            else:
                raise ValueError(f"unknown MQTT bench target {name!r}")
            if not available[0]:
                results.append(TargetResult(name, skipped=available[1]))
                progress(f"{name}: not measured: {available[1]}")
                continue
            results.append(_measure(name, launcher, "mqtt_port", [mode(q) for q in qos_levels], repeats=repeats,
                                    messages=messages, warmup=warmup, progress=progress))
    return results


def run_amqp_bench(*, messages: int = 100_000, repeats: int = 3,
                   targets: tuple[str, ...] = ("reference", "rabbitmq"), warmup_messages: int = 20_000,
                   progress: Callable[[str], None] = print) -> list[TargetResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="brokerconf-bench-amqp-") as tmp:
        for name in targets:
            if name == "reference":
                launcher, available = ReferenceBrokerProcess(name="bench", http=False, log_level="WARNING", amqp=True), (True, "")
                address, user, password = "queue://bench", None, None
            elif name == "rabbitmq":
                launcher, available = RabbitMQProcess(Path(tmp) / name, amqp10=True), rabbitmq_available()
                address, user, password = "bench", "guest", "guest"
            else:
                raise ValueError(f"unknown AMQP bench target {name!r}")
            if not available[0]:
                results.append(TargetResult(name, skipped=available[1]))
                progress(f"{name}: not measured: {available[1]}")
                continue

            def mode(presettled: bool, address=address, user=user, password=password):
                return ("presettled" if presettled else "unsettled",
                        lambda port, pid: run_amqp_load("127.0.0.1", port, target="bench", messages=messages,
                                                        address=address, presettled=presettled, user=user,
                                                        password=password, broker_pid=pid))

            def warmup(port: int, address=address, user=user, password=password):
                return run_amqp_load("127.0.0.1", port, target="warm-up", messages=warmup_messages,
                                     address=address, user=user, password=password)

            results.append(_measure(name, launcher, "amqp_port", [mode(True), mode(False)], repeats=repeats,
                                    messages=messages, warmup=warmup, progress=progress))
    return results


def format_table(title: str, results: list[TargetResult], modes: list[str],
                 targets_ratio: dict[str, float | None]) -> str:
    """The side-by-side table; `targets_ratio` names the peers to compare the reference broker
    with, and the ratio the issue asks for (None: just show it)."""
    lines = [title, f"{'target':<11}" + "".join(f"{m + ' msg/s':>16}{'CPU us/msg':>12}" for m in modes) + f"{'peak RSS':>11}"]
    for r in results:
        if r.skipped or (r.error and not r.modes):
            lines.append(f"{r.target:<11} -  {(r.skipped or r.error)[:90]}")
            continue
        cells = ""
        for m in modes:
            found = r.mode(m)
            rate = f"{found.median:,.0f}" if found and found.runs else (found.error[:12] if found and found.error else "-")
            cpu = f"{statistics.median(found.cpu_us_per_msg):.1f}" if found and found.cpu_us_per_msg else "-"
            cells += f"{rate:>16}{cpu:>12}"
        lines.append(f"{r.target:<11}{cells}{r.rss_peak_bytes / 2**20:>8.1f} MB")
    ref = next((r for r in results if r.target == "reference"), None)
    for other, wanted in targets_ratio.items():
        peer = next((r for r in results if r.target == other), None)
        if not ref or not peer:
            continue
        for m in modes:
            a, b = ref.mode(m), peer.mode(m)
            if a and b and a.runs and b.runs:
                goal = f" (target: at least {wanted}x)" if wanted else ""
                lines.append(f"ratio reference / {other} ({m}): {a.median / b.median:.2f}x{goal}")
    return "\n".join(lines)


def write_json(results: list[TargetResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in results], indent=2))
