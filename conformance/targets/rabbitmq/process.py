"""Run RabbitMQ 3.x (Debian package ``rabbitmq-server``) as a plain foreground process.

Everything the node reads or writes lives under a work directory, and it listens
on free loopback ports only, so it neither needs nor collides with a system
``rabbitmq-server`` service (Debian's postinst tries to start one on 5672/25672
with node ``rabbit@<host>``; it does not matter whether that one runs).

How it is launched
------------------
First a private Erlang port mapper, in its own process group and in the
foreground (so we hold its PID)::

    epmd -port EPMD_PORT -address 127.0.0.1

then, in another new process group, RabbitMQ's own start script (not the
``/usr/sbin/rabbitmq-server`` wrapper, which ``su``\\s to the ``rabbitmq`` user
and writes to /var/log/rabbitmq)::

    /usr/lib/rabbitmq/bin/rabbitmq-server          # cwd W

with this environment (W = work directory)::

    HOME=W                                  # Erlang cookie W/.erlang.cookie, private
    RABBITMQ_NODENAME=<name>-<hex>@localhost
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1  RABBITMQ_NODE_PORT=<free>   # AMQP 0-9-1 and 1.0
    RABBITMQ_DIST_PORT=<free>               # Erlang distribution, bound to 127.0.0.1:
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    ERL_EPMD_PORT=EPMD_PORT  ERL_EPMD_ADDRESS=127.0.0.1
    RABBITMQ_CONF_ENV_FILE=W/rabbitmq-env.conf        # empty: /etc/rabbitmq/rabbitmq-env.conf is not read
    RABBITMQ_CONFIG_FILE=W/rabbitmq.conf  RABBITMQ_CONFIG_FILES=W/conf.d
    RABBITMQ_ADVANCED_CONFIG_FILE=W/advanced.config   # absent
    RABBITMQ_ENABLED_PLUGINS_FILE=W/enabled_plugins   # [rabbitmq_amqp1_0, ...].
    RABBITMQ_MNESIA_BASE=W/mnesia  RABBITMQ_LOG_BASE=W/log  RABBITMQ_LOGS=W/log/rabbit.log
    RABBITMQ_MOTD_FILE=W/motd  RABBITMQ_PLUGINS_EXPAND_DIR=W/plugins-expand

``rabbitmq.conf``::

    listeners.tcp.1 = 127.0.0.1:NODE_PORT
    loopback_users = none                 # guest/guest from anywhere (we only listen on loopback)
    log.console = false
    log.file.level = info
    stomp.listeners.tcp.1 = 127.0.0.1:P   # when stomp=True
    mqtt.listeners.tcp.1 = 127.0.0.1:P    # when mqtt=True (anonymous -> guest)

and ``ERL_FLAGS="-start_epmd false"``: no Erlang VM of the node (the broker, or
the one RabbitMQ's prelaunch runs to make sure an epmd is up) ever starts an
``epmd -daemon`` of its own, which would outlive the node in no process group
of ours; without our epmd the node fails to start, saying so.

The process is a `ManagedProcess` (machinery/managed.py), as
every local broker: the script runs ``erl`` (``beam.smp``) as its child and
forwards SIGTERM to it as a graceful shutdown.  ``stop()`` sends SIGTERM to the
script's process group, waits, then SIGKILLs the group; ``beam.smp``'s helpers
(``erl_child_setup`` and what it spawns) put themselves into their own
sessions, so the managed process records them before the stop and kills any
survivor by PID afterwards.  The private epmd is its companion, stopped after
the node by its PID.

Readiness: an AMQP 1.0 connection (python-qpid-proton, SASL PLAIN guest/guest)
is opened and closed when ``amqp10=True``; otherwise the AMQP 0-9-1 protocol
header is answered with ``connection.start``.  The first boot of a fresh node
takes roughly 10-20 s here (2 cores).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import struct
from pathlib import Path

import psutil
from proton.utils import BlockingConnection

from machinery.managed import ManagedProcess
from machinery.process import free_ports, tail_files
from machinery.waiting import Deadline, wait_until

__all__ = [
    "RabbitMQNotInstalled",
    "RabbitMQStartError",
    "RabbitMQProcess",
    "rabbitmq_available",
]

RABBITMQ_SCRIPTS = Path(os.environ.get("BROKERCONF_RABBITMQ_SCRIPTS", "/usr/lib/rabbitmq/bin"))
INSTALL_HINT = ("install it with `apt-get install rabbitmq-server` (or run ./scripts/test.sh as root on "
                "Debian, which installs it)")
PLUGINS = {"amqp10": "rabbitmq_amqp1_0", "stomp": "rabbitmq_stomp", "mqtt": "rabbitmq_mqtt"}


class RabbitMQNotInstalled(RuntimeError):
    """RabbitMQ (or Erlang's epmd, or a plugin) is not installed."""


class RabbitMQStartError(RuntimeError):
    """The node exited or did not become ready; the message has the log tail."""


# --------------------------------------------------------------------------- discovery


def _find_epmd() -> str | None:
    for c in (os.environ.get("BROKERCONF_EPMD"), shutil.which("epmd"), "/usr/bin/epmd", "/usr/lib/erlang/bin/epmd"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _plugins_dir() -> Path | None:
    # the scripts are symlinks into RABBITMQ_HOME/sbin; RABBITMQ_HOME/plugins holds the plugins
    home = (RABBITMQ_SCRIPTS / "rabbitmq-server").resolve().parent.parent
    d = home / "plugins"
    return d if d.is_dir() else None


def _plugin_installed(plugin: str) -> bool:
    d = _plugins_dir()
    if d is None:
        return False
    return any(p.name == plugin or p.name.startswith(plugin + "-") for p in d.iterdir())


def _missing(plugins: tuple[str, ...] = ()) -> str:
    script = RABBITMQ_SCRIPTS / "rabbitmq-server"
    if not (script.is_file() and os.access(script, os.X_OK)):
        return f"RabbitMQ is not installed: {script} is missing (Debian package `rabbitmq-server`); {INSTALL_HINT}"
    if shutil.which("erl") is None and not Path("/usr/lib/erlang/bin/erl").is_file():
        return "Erlang is not installed (no `erl`; Debian package `erlang-base`, pulled in by `rabbitmq-server`)"
    if _find_epmd() is None:
        return "Erlang's `epmd` is not installed (Debian package `erlang-base`, pulled in by `rabbitmq-server`)"
    for p in plugins:
        if not _plugin_installed(p):
            return f"RabbitMQ plugin {p} is not installed under {_plugins_dir()} (Debian package `rabbitmq-server`)"
    return ""


def rabbitmq_available(*, amqp10: bool = True, stomp: bool = False, mqtt: bool = False) -> tuple[bool, str]:
    """``(True, "")`` when RabbitMQ (with the named plugins) can be launched, else ``(False, reason)``."""
    wanted = tuple(PLUGINS[k] for k, on in (("amqp10", amqp10), ("stomp", stomp), ("mqtt", mqtt)) if on)
    reason = _missing(wanted)
    return (not reason, reason)


# --------------------------------------------------------------------------- helpers




def _amqp091_handshake(port: int, timeout: float) -> tuple[bool, str]:
    """True when the AMQP 0-9-1 protocol header is answered with connection.start."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            data = b""
            while len(data) < 11:
                chunk = s.recv(4096)
                if not chunk:
                    return False, "connection closed before connection.start"
                data += chunk
            ftype, chan, _size = struct.unpack(">BHI", data[:7])
            cls, meth = struct.unpack(">HH", data[7:11])
            if (ftype, chan, cls, meth) == (1, 0, 10, 10):
                return True, ""
            return False, f"unexpected first frame {data[:16]!r}"
    except OSError as e:
        return False, str(e)


def amqp10_open(port: int, timeout: float, *, user: str = "guest", password: str = "guest",
                host: str = "127.0.0.1") -> tuple[bool, str]:
    """Open and close an AMQP 1.0 connection (SASL PLAIN) with python-qpid-proton."""
    conn = None
    try:
        conn = BlockingConnection(f"amqp://{host}:{port}", timeout=timeout, user=user, password=password,
                                  allowed_mechs="PLAIN", sasl_enabled=True)
        props = conn.conn.remote_properties or {}
        product = str(props.get("product", "")) if hasattr(props, "get") else ""
        return True, product
    except Exception as e:  # ConnectionException, Timeout, ... -> not ready yet
        return False, f"{type(e).__name__}: {e}"
    finally:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


# --------------------------------------------------------------------------- the process


class RabbitMQProcess(ManagedProcess):
    """One RabbitMQ node with private configuration, data, cookie and epmd on loopback ports.

    ``amqp_port`` serves AMQP 0-9-1 and (with ``amqp10=True``, plugin rabbitmq_amqp1_0)
    AMQP 1.0; ``stomp_port`` / ``mqtt_port`` are set when those plugins are enabled.
    Credentials: ``user`` / ``password`` (guest/guest, allowed over any interface
    because ``loopback_users = none``).  ``extra_config`` lines are appended to
    rabbitmq.conf verbatim.
    """

    host = "127.0.0.1"
    user = "guest"
    password = "guest"
    start_error = RabbitMQStartError
    stop_timeout = 30.0

    def __init__(
        self,
        workdir: Path,
        *,
        name: str = "brokerconf",
        amqp10: bool = True,
        stomp: bool = False,
        mqtt: bool = False,
        extra_config: str = "",
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ValueError(f"node name prefix must match [A-Za-z0-9_-]+: {name!r}")
        self.workdir = Path(workdir).absolute()
        self.name = name
        self.amqp10 = amqp10
        self.stomp = stomp
        self.mqtt = mqtt
        self.extra_config = extra_config
        self.nodename = f"{name}-{secrets.token_hex(4)}@localhost"
        self.config_path = self.workdir / "rabbitmq.conf"
        self.enabled_plugins_path = self.workdir / "enabled_plugins"
        self.log_dir = self.workdir / "log"
        self.log_path = self.log_dir / "rabbit.log"
        self.stdout_path = self.workdir / "rabbitmq.stdout"
        self.mnesia_base = self.workdir / "mnesia"
        self.amqp_port: int = 0
        self.dist_port: int = 0
        self.epmd_port: int = 0
        self.stomp_port: int | None = None
        self.mqtt_port: int | None = None
        self._init_process()       # pid: the start script, leader of the broker's process group
        self.label = f"RabbitMQ node {self.nodename}"
        self.beam_pid: int = 0     # the Erlang VM (beam.smp), where the work happens
        self.epmd_pid: int = 0     # the private epmd, a companion process
        self.command: list[str] = []
        self.env: dict[str, str] = {}

    # ----------------------------------------------------------------- addresses
    @property
    def amqp_address(self) -> tuple[str, int]:
        return (self.host, self.amqp_port)

    @property
    def amqp_url(self) -> str:
        """AMQP URL with credentials, e.g. for proton's Container.connect."""
        return f"amqp://{self.user}:{self.password}@{self.host}:{self.amqp_port}"

    @property
    def plugins(self) -> list[str]:
        return [PLUGINS[k] for k, on in (("amqp10", self.amqp10), ("stomp", self.stomp), ("mqtt", self.mqtt)) if on]

    # ----------------------------------------------------------------- config
    def render_config(self) -> str:
        h = self.host
        lines = [
            "# generated by brokerconf (conformance.targets.rabbitmq.process)",
            f"listeners.tcp.1 = {h}:{self.amqp_port}",
            "loopback_users = none",
            "log.console = false",
            "log.file.level = info",
        ]
        if self.stomp:
            lines.append(f"stomp.listeners.tcp.1 = {h}:{self.stomp_port}")
        if self.mqtt:
            lines += [f"mqtt.listeners.tcp.1 = {h}:{self.mqtt_port}", "mqtt.allow_anonymous = true"]
        if self.extra_config.strip():
            lines.append(self.extra_config.strip())
        return "\n".join(lines) + "\n"

    def render_enabled_plugins(self) -> str:
        return "[" + ",".join(self.plugins) + "].\n"

    def build_env(self) -> dict[str, str]:
        w = self.workdir
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RABBITMQ_", "ERL_", "ERLANG_")) and k not in ("NOTIFY_SOCKET", "HOME")}
        env.update({
            "HOME": str(w),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": self.host,
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": self.host,
            "ERL_FLAGS": "-start_epmd false",  # only our epmd (module doc)
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.config_path),
            "RABBITMQ_CONFIG_FILES": str(w / "conf.d"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.enabled_plugins_path),
            "RABBITMQ_MNESIA_BASE": str(self.mnesia_base),
            "RABBITMQ_LOG_BASE": str(self.log_dir),
            "RABBITMQ_LOGS": str(self.log_path),
            "RABBITMQ_MOTD_FILE": str(w / "motd"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(w / "plugins-expand"),
        })
        return env

    def _write_layout(self) -> None:
        w = self.workdir
        for d in (w, w / "conf.d", self.log_dir, self.mnesia_base):
            d.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config(), encoding="utf-8")
        self.enabled_plugins_path.write_text(self.render_enabled_plugins(), encoding="utf-8")
        (w / "rabbitmq-env.conf").write_text("# generated by brokerconf: intentionally empty\n", encoding="utf-8")

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 120) -> None:
        """Start a private epmd and the node; wait until AMQP answers (see module doc).

        Ports are picked on the first start and kept across stop()/start() (re-picked
        if one is taken meanwhile).  Raises RabbitMQNotInstalled / RabbitMQStartError.
        """
        if self.running:
            raise RuntimeError(f"RabbitMQ {self.nodename} is already running (pid {self.pid})")
        reason = _missing(tuple(self.plugins))
        if reason:
            raise RabbitMQNotInstalled(reason)
        deadline = Deadline(timeout)
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(deadline, keep_ports=attempt == 1 and self.amqp_port > 0)
                return
            except RabbitMQStartError as e:
                text = str(e)
                bind_race = any(s in text for s in ("eaddrinuse", "Address already in use", "already in use"))
                if bind_race and attempt < attempts and not deadline.expired():
                    continue
                raise

    def _start_once(self, deadline: Deadline, keep_ports: bool) -> None:
        if not keep_ports:
            ports = free_ports(5)
            self.amqp_port, self.dist_port, self.epmd_port = ports[0], ports[1], ports[2]
            self.stomp_port = ports[3] if self.stomp else None
            self.mqtt_port = ports[4] if self.mqtt else None
        self._write_layout()
        self.env = self.build_env()
        self.log_path.write_bytes(b"")
        self.beam_pid = 0
        try:
            self._open_output(self.stdout_path, truncate=True)  # epmd's output too
            self._start_epmd(deadline)
            self.command = [str(RABBITMQ_SCRIPTS / "rabbitmq-server")]
            self._spawn(self.command, cwd=self.workdir, output=self.stdout_path, env=self.env)
            self._await_ready(deadline, self._probe, poll=0.2, where=f"; work dir {self.workdir}")
        except BaseException:
            self.stop()
            raise

    def _start_epmd(self, deadline: Deadline) -> None:
        epmd = _find_epmd()
        if epmd is None:
            raise RabbitMQNotInstalled(_missing())
        env = {k: v for k, v in os.environ.items() if not k.startswith("ERL_")}
        proc = self._spawn_companion([epmd, "-port", str(self.epmd_port), "-address", self.host],
                                     cwd=self.workdir, env=env)
        self.epmd_pid = proc.pid

        def listening() -> bool:
            if proc.poll() is not None:
                raise RabbitMQStartError(
                    f"epmd -port {self.epmd_port} exited with code {proc.returncode}"
                    f" (Address already in use?):\n{self.log_tail(20)}")
            try:
                with socket.create_connection((self.host, self.epmd_port), timeout=1) as s:
                    s.sendall(b"\x00\x01n")  # NAMES_REQ: answered with epmd's port number
                    return s.recv(4) == struct.pack(">I", self.epmd_port)
            except OSError:
                return False

        wait_until(listening, deadline, 0.02,
                   on_timeout=lambda _: RabbitMQStartError(f"epmd did not listen on {self.epmd_port} in time"))

    def _find_beam(self) -> int:
        if self.beam_pid or not self.running:
            return self.beam_pid
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                if child.name().startswith("beam"):
                    self.beam_pid = child.pid
                    break
        except psutil.Error:
            pass
        return self.beam_pid

    def _rss_pid(self) -> int | None:
        return self._find_beam() or None  # the Erlang VM: the start script is a small shell

    def _probe(self, timeout: float) -> tuple[bool, str]:
        """Readiness (module doc): AMQP answers (1.0 open, else the 0-9-1 header), then every
        plugin port accepts."""
        if not self._tcp_accepts(self.amqp_port):
            return False, f"port {self.amqp_port} not accepting yet"
        if self.amqp10:
            ok, seen = amqp10_open(self.amqp_port, timeout=min(10.0, max(1.0, timeout)),
                                   user=self.user, password=self.password)
        else:
            ok, seen = _amqp091_handshake(self.amqp_port, timeout=timeout)
        if not ok:
            return False, seen
        waiting = [port for port in (self.stomp_port, self.mqtt_port) if port and not self._tcp_accepts(port)]
        if waiting:
            return False, f"AMQP ready, plugin port(s) {waiting} not accepting yet"
        return True, seen

    @staticmethod
    def _tcp_accepts(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            return False

    # ----------------------------------------------------------------- observation
    def rss_peak_bytes(self) -> int:
        """Peak resident set size of the Erlang VM (VmHWM of beam.smp); after stop(), the last value seen."""
        return self._sample_rss()

    def log_tail(self, lines: int = 50) -> str:
        """Last lines of the node's log, after what the start script printed to stdout."""
        return tail_files([self.stdout_path, self.log_path], lines)

    def _failure_report(self, tail: int = 40) -> str:
        """The first distinct error messages (the cause comes first; crash reports follow)
        plus the log tail."""
        key: list[str] = []
        for path in (self.stdout_path, self.log_path):
            try:
                text = path.read_bytes()[:1 << 20].decode("utf-8", "replace")
            except OSError:
                continue
            for ln in text.splitlines():
                if "[error]" in ln or "eaddrinuse" in ln or ln.startswith(("Error", "BOOT FAILED")):
                    msg = re.sub(r"^\S+ \S+ \[error\] <[\d.]+> ?", "", ln).strip()[:300]
                    if msg and msg.strip("=") and msg not in key:
                        key.append(msg)
        parts = [f"work dir {self.workdir}, log {self.log_path}"]
        if key:
            parts.append("first error lines:\n  " + "\n  ".join(key[:12]))
        parts.append("log tail:\n" + (self.log_tail(tail) or "(empty)"))
        return "\n".join(parts)

    def __repr__(self) -> str:
        state = f"pid={self.pid} beam={self.beam_pid}" if self.running else "stopped"
        return (f"<RabbitMQProcess {self.nodename} {state} amqp={self.amqp_port} stomp={self.stomp_port} "
                f"mqtt={self.mqtt_port} dist={self.dist_port} epmd={self.epmd_port}>")
