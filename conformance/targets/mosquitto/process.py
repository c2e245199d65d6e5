"""Run Eclipse Mosquitto 2.x (Debian package ``mosquitto``) as a plain foreground process.

The broker gets a generated ``mosquitto.conf`` under a work directory and one
MQTT listener on a free loopback port; nothing of the system service is used
(``/etc/mosquitto`` is not read, ``/var/lib/mosquitto`` is not touched, and a
``mosquitto.service`` that the Debian package may have started on port 1883 is
neither needed nor disturbed).

How it is launched
------------------
::

    mosquitto -c W/mosquitto.conf          # cwd W, own session/process group

with (``mosquitto -c`` never daemonizes unless ``-d`` is given, so the PID we
hold is the broker)::

    per_listener_settings false
    allow_anonymous true
    persistence false
    user root                      # only when running as root (see below)
    log_dest file W/mosquitto.log
    log_type error / warning / notice / information
    listener PORT 127.0.0.1

When started as root, mosquitto drops privileges to the ``mosquitto`` user
unless ``user`` names the current user; that user could not write a log in a
private (0700) work directory, so the config keeps the current user.

Readiness is checked at protocol level: an MQTT 3.1.1 CONNECT answered by an
accepting CONNACK.  ``stop()`` sends SIGTERM to the process group, waits, then
SIGKILLs.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
from pathlib import Path

from machinery.managed import ManagedProcess
from machinery.process import free_ports, tail_files
from machinery.waiting import Deadline

__all__ = [
    "MosquittoNotInstalled",
    "MosquittoStartError",
    "MosquittoProcess",
    "mosquitto_available",
    "find_mosquitto",
]

INSTALL_HINT = ("install it with `apt-get install mosquitto` (or run ./scripts/test.sh as root on Debian, "
                "which installs it)")


class MosquittoNotInstalled(RuntimeError):
    """The mosquitto broker binary is not installed."""


class MosquittoStartError(RuntimeError):
    """The broker exited or did not become ready; the message has the log tail."""


# --------------------------------------------------------------------------- discovery


def find_mosquitto() -> str | None:
    """Path of the broker binary ($BROKERCONF_MOSQUITTO, /usr/sbin/mosquitto, PATH)."""
    for c in (os.environ.get("BROKERCONF_MOSQUITTO"), "/usr/sbin/mosquitto", shutil.which("mosquitto")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def mosquitto_available() -> tuple[bool, str]:
    """``(True, "")`` when mosquitto can be launched, else ``(False, reason)``."""
    if find_mosquitto() is None:
        return False, ("Mosquitto is not installed: no `mosquitto` binary in $BROKERCONF_MOSQUITTO, "
                       f"/usr/sbin or PATH (Debian package `mosquitto`); {INSTALL_HINT}")
    return True, ""


# --------------------------------------------------------------------------- helpers




#: MQTT 3.1.1 CONNECT: clean session, keep-alive 0, client id "brokerconf-ready"
_READY_CONNECT = (bytes([0x10, 12 + 16, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 0, 0, 16])
                  + b"brokerconf-ready")


def mqtt_connack(port: int, timeout: float, host: str = "127.0.0.1") -> tuple[bool, str]:
    """MQTT 3.1.1 CONNECT to host:port; ``(True, "")`` when answered by CONNACK rc 0."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(_READY_CONNECT)
            data = b""
            while len(data) < 4:
                chunk = s.recv(4 - len(data))
                if not chunk:
                    return False, "connection closed before CONNACK"
                data += chunk
            if data[0] != 0x20:
                return False, f"expected CONNACK, got packet type byte 0x{data[0]:02x}"
            if data[3] != 0:
                return False, f"CONNACK return code {data[3]}"
            try:
                s.sendall(b"\xe0\x00")  # DISCONNECT
            except OSError:
                pass
            return True, ""
    except OSError as e:
        return False, str(e)


# --------------------------------------------------------------------------- the process


class MosquittoProcess(ManagedProcess):
    """One mosquitto broker with a generated configuration on a free loopback port.

    ``max_inflight_messages`` / ``max_queued_messages`` are written to the config
    when given (mosquitto's defaults are 20 and 1000; ``0`` means no limit).
    ``extra_config`` lines are appended verbatim before the listener.
    """

    host = "127.0.0.1"
    label = "mosquitto"
    start_error = MosquittoStartError
    stop_timeout = 10.0

    def __init__(
        self,
        workdir: Path,
        *,
        name: str = "mosquitto",
        max_inflight_messages: int | None = None,
        max_queued_messages: int | None = None,
        extra_config: str = "",
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"broker name must match [A-Za-z0-9_.-]+: {name!r}")
        self.workdir = Path(workdir).absolute()
        self.name = name
        self.max_inflight_messages = max_inflight_messages
        self.max_queued_messages = max_queued_messages
        self.extra_config = extra_config
        self.config_path = self.workdir / "mosquitto.conf"
        self.log_path = self.workdir / "mosquitto.log"
        self.stdout_path = self.workdir / "mosquitto.stdout"
        self.mqtt_port: int = 0
        self.command: list[str] = []
        self._init_process()

    @property
    def mqtt_address(self) -> tuple[str, int]:
        return (self.host, self.mqtt_port)

    # ----------------------------------------------------------------- config
    def render_config(self) -> str:
        lines = [
            "# generated by brokerconf (conformance.targets.mosquitto.process)",
            "per_listener_settings false",
            "allow_anonymous true",
            "persistence false",
        ]
        if os.geteuid() == 0:
            # stay the current user instead of dropping to `mosquitto` (private workdir)
            lines.append(f"user {pwd.getpwuid(os.geteuid()).pw_name}")
        lines += [
            f"log_dest file {self.log_path}",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            "log_timestamp true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
        ]
        if self.max_inflight_messages is not None:
            lines.append(f"max_inflight_messages {int(self.max_inflight_messages)}")
        if self.max_queued_messages is not None:
            lines.append(f"max_queued_messages {int(self.max_queued_messages)}")
        if self.extra_config.strip():
            lines.append(self.extra_config.strip())
        lines.append(f"listener {self.mqtt_port} {self.host}")
        return "\n".join(lines) + "\n"

    def build_command(self) -> list[str]:
        exe = find_mosquitto()
        if exe is None:
            raise MosquittoNotInstalled(mosquitto_available()[1])
        return [exe, "-c", str(self.config_path)]

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 30) -> None:
        """Write the config, launch mosquitto and wait until CONNECT gets a CONNACK.

        The port is picked on the first start and kept across stop()/start() (re-picked
        if it is taken meanwhile).  Raises MosquittoNotInstalled / MosquittoStartError.
        """
        if self.running:
            raise RuntimeError(f"mosquitto {self.name!r} is already running (pid {self.pid})")
        ok, reason = mosquitto_available()
        if not ok:
            raise MosquittoNotInstalled(reason)
        deadline = Deadline(timeout)
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(deadline, keep_port=attempt == 1 and self.mqtt_port > 0)
                return
            except MosquittoStartError as e:
                if "Address already in use" in str(e) and attempt < attempts and not deadline.expired():
                    continue
                raise

    def _start_once(self, deadline: Deadline, keep_port: bool) -> None:
        if not keep_port:
            self.mqtt_port = free_ports(1)[0]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config(), encoding="utf-8")
        self.command = self.build_command()
        self.log_path.write_bytes(b"")
        self._spawn_until_ready(self.command, lambda: self._wait_ready(deadline),
                                cwd=self.workdir, output=self.stdout_path, truncate=True)

    def _wait_ready(self, deadline: Deadline) -> None:
        self._await_ready(deadline, lambda budget: mqtt_connack(self.mqtt_port, timeout=budget), poll=0.05)

    # ----------------------------------------------------------------- observation
    def log_tail(self, lines: int = 50) -> str:
        """Last lines of the broker log (plus anything it printed to stdout/stderr)."""
        return tail_files([self.stdout_path, self.log_path], lines, bytes_per_line=300)

    def _failure_report(self) -> str:
        return f"config {self.config_path}, log {self.log_path}:\n{self.log_tail(40) or '(empty log)'}"

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<MosquittoProcess {self.name} {state} mqtt={self.mqtt_port}>"
