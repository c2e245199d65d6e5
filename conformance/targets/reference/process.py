"""The reference broker as a target: in-process (fast, for most tests) or as a subprocess
(when a test needs to kill it, or to measure it apart from the load generator)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from conformance.targets.runtime.probes import stomp_handshake
from machinery.process import peak_rss, stop_if_interrupted
from machinery.tether import launch
from machinery.waiting import wait_until

_READY = re.compile(r"reference broker '.*' ready: (.*)$")
#: a master/slave broker waiting for its store's lock (reference_broker/__main__.py)
_SLAVE = re.compile(r"reference broker '.*' slave: waiting for the store's lock ?(.*)$")
_SOURCE_ROOT = Path(__file__).resolve().parents[3]


class ReferenceStartError(RuntimeError):
    pass


class ReferenceBrokerProcess:
    """`python -m reference_broker` in its own process, on free loopback ports.

    Stopped by its own handle (SIGTERM, then SIGKILL), never by name. `kill()` is SIGKILL for
    crash tests; `start()` again reuses the same data directory.
    """

    host = "127.0.0.1"

    def __init__(self, *, name: str = "reference", config_file: Path | None = None,
                 data_dir: Path | None = None, http: bool = True, log_level: str = "INFO",
                 extra_args: list[str] | None = None, mqtt: bool = False, amqp: bool = False,
                 tls_listeners: tuple[str, ...] | list[str] = ()) -> None:
        self.name = name
        self.config_file = config_file
        self.data_dir = data_dir
        self.http = http
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.mqtt = mqtt
        self.amqp = amqp
        self.mqtt_port: int | None = None
        self.amqp_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.stomp_port: int | None = None
        self.http_port: int | None = None
        # TLS listener options (stomp_ssl...) configured in config_file: their addresses go as
        # flags so a restart keeps the ports, like the plain ones; option -> bound port
        self.tls_listeners = tuple(tls_listeners)
        self.tls_ports: dict[str, int] = {}
        self._log: deque[str] = deque(maxlen=2000)
        self._reader: threading.Thread | None = None
        self._ready = threading.Event()
        self._waiting = threading.Event()  # this run logged that it waits for the store's lock
        self.role: str | None = None  # "master" / "slave" as last logged by this run

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        """Started and not yet exited (a reaped process is not running)."""
        return self.proc is not None and self.proc.poll() is None

    def command(self, stomp_port: int = 0) -> list[str]:
        cmd = [sys.executable, "-m", "reference_broker", "--name", self.name,
               "--stomp", f"127.0.0.1:{stomp_port}", "--log-level", self.log_level]
        if self.http:
            cmd += ["--http", "127.0.0.1:0"]
        # Like the STOMP port, keep the MQTT and AMQP ports across restarts.
        if self.mqtt:
            cmd += ["--mqtt", f"127.0.0.1:{self.mqtt_port or 0}"]
        if self.amqp:
            cmd += ["--amqp", f"127.0.0.1:{self.amqp_port or 0}"]
        for option in self.tls_listeners:
            cmd += [f"--{option.replace('_', '-')}", f"127.0.0.1:{self.tls_ports.get(option, 0)}"]
        if self.config_file:
            cmd += ["--config", str(self.config_file)]
        if self.data_dir:
            cmd += ["--data", str(self.data_dir)]
        return cmd + self.extra_args

    @property
    def stomp_address(self) -> tuple[str, int] | None:
        return ("127.0.0.1", self.stomp_port) if self.stomp_port else None

    @property
    def ports(self) -> dict[str, int]:
        """Listener -> port (known once started, or fixed beforehand by whoever set them)."""
        return {p: getattr(self, f"{p}_port") for p in ("stomp", "mqtt", "amqp") if getattr(self, f"{p}_port")}

    def start(self, timeout: float = 30.0, wait_for: str = "serving") -> "ReferenceBrokerProcess":
        """Launch and wait for the ``ready`` line (``wait_for="serving"``), or for either it or the
        line of a slave waiting for its store's lock (``wait_for="lock"``)."""
        if wait_for not in ("serving", "lock"):
            raise ValueError(f"wait_for must be 'serving' or 'lock', not {wait_for!r}")
        # Keep the STOMP port across restarts so clients (and failover URLs) can reconnect.
        self._ready.clear()
        self._waiting.clear()
        self.role = None
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # Importable from a source checkout too, not only when the package is installed.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_SOURCE_ROOT), env.get("PYTHONPATH")]))
        self.proc = launch(
            self.command(self.stomp_port or 0), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True,  # stopped by its handle, not by a signal to pytest's group (like the JVM brokers)
        )
        self._reader = threading.Thread(target=self._read_log, args=(self.proc,), daemon=True)
        self._reader.start()
        stop_if_interrupted(lambda: self._wait_ready(wait_for, timeout), self.stop)
        return self

    def _wait_ready(self, wait_for: str, timeout: float) -> None:
        def ready() -> bool:
            # the event's own wait is the poll interval: it returns the moment the line is read
            if self._ready.wait(0.05) or (wait_for == "lock" and self._waiting.is_set()):
                return True
            if self.proc.poll() is not None:
                self._reader.join(1)
                raise ReferenceStartError(
                    f"reference broker exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}"
                )
            return False

        def late(_last: bool) -> ReferenceStartError:
            self.stop()
            return ReferenceStartError(f"reference broker not ready after {timeout} s:\n{self.log_tail()}")

        wait_until(ready, timeout, interval=0, on_timeout=late)

    def _read_log(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            line = line.rstrip("\n")
            self._log.append(line)
            match = _READY.search(line) or _SLAVE.search(line)
            if match:
                for part in match.group(1).split():
                    key, _, address = part.partition("=")
                    port = int(address.rsplit(":", 1)[1])
                    if key in ("stomp", "http", "mqtt", "amqp"):
                        setattr(self, f"{key}_port", port)
                    elif key.endswith("+ssl"):  # stomp+ssl -> stomp_ssl (reference_broker/tls.py)
                        self.tls_ports[key.replace("+", "_")] = port
                if match.re is _SLAVE:
                    self.role = "slave"
                    self._waiting.set()
                else:
                    self.role = "master"
                    self._ready.set()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(list(self._log)[-lines:])

    def waiting_for_lock(self) -> bool:
        """Whether this run last said it waits as a slave for its store's lock."""
        return self.running and self.role == "slave"

    def serving(self, timeout: float = 1.0) -> bool:
        """Whether the STOMP listener answers a CONNECT now (a slave keeps it closed)."""
        return self.running and bool(self.stomp_port) and stomp_handshake(self.stomp_port, timeout)[0]

    def render_config(self) -> str:
        return self.config_file.read_text() if self.config_file else "(command-line options only)"

    def rss_peak_bytes(self) -> int:
        """Peak resident set size (VmHWM) of the broker process."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        return peak_rss(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL: a crash, for durability tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(2)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (then SIGKILL after `timeout`); returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(2)
        return self.proc.returncode

    def __enter__(self) -> "ReferenceBrokerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

