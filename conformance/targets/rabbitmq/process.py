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

The script runs ``erl`` (``beam.smp``) as its child and forwards SIGTERM to it
as a graceful shutdown.  ``stop()`` sends SIGTERM to the script's process
group, waits, then SIGKILLs the group; ``beam.smp``'s helpers
(``erl_child_setup`` and what it spawns) put themselves into their own
sessions, so they are recorded (with their start times, via psutil) before the
stop and any survivor is killed by PID afterwards.  The private epmd is then
stopped by its PID.  If the node ever had to start an ``epmd -daemon`` itself
(it inherits ``ERL_EPMD_PORT`` and our unique node name in its environment,
which is how it is recognised in /proc), that one is stopped too; no other
epmd is touched.

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
import subprocess
import time
import weakref
from pathlib import Path

from conformance.targets.runtime.process import free_ports, kill_group, peak_rss, stop_group, tail_files

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
    try:
        from proton.utils import BlockingConnection
    except ImportError as e:  # pragma: no cover - proton is a project dependency
        return False, f"python-qpid-proton is not importable: {e}"
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


def _proc_environ(pid: int) -> dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\x00"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k] = v
    return env


def _stray_epmd_pids(epmd_port: int, nodename: str, exclude: set[int]) -> list[int]:
    """epmd daemons started on behalf of *our* node: same ERL_EPMD_PORT and our node name
    in their inherited environment.  Found through /proc; nothing else qualifies."""
    found = []
    want_port = str(epmd_port).encode()
    want_node = nodename.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/comm", "rb") as f:
                if f.read().strip() != b"epmd":
                    continue
        except OSError:
            continue
        env = _proc_environ(pid)
        if env.get(b"ERL_EPMD_PORT") == want_port and env.get(b"RABBITMQ_NODENAME") == want_node:
            found.append(pid)
    return found


# --------------------------------------------------------------------------- the process


class RabbitMQProcess:
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
        self.pid: int = 0          # the start script: leader of the broker's process group
        self.beam_pid: int = 0     # the Erlang VM (beam.smp), where the work happens
        self.epmd_pid: int = 0
        self.command: list[str] = []
        self.env: dict[str, str] = {}
        self._proc: subprocess.Popen | None = None
        self._epmd: subprocess.Popen | None = None
        self._out_fh = None
        self._finalizers: list[weakref.finalize] = []
        self._rss_peak = 0

    # ----------------------------------------------------------------- addresses
    @property
    def amqp_address(self) -> tuple[str, int]:
        return (self.host, self.amqp_port)

    @property
    def amqp_url(self) -> str:
        """AMQP URL with credentials, e.g. for proton's Container.connect."""
        return f"amqp://{self.user}:{self.password}@{self.host}:{self.amqp_port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        deadline = time.monotonic() + timeout
        attempts = 3
        for attempt in range(1, attempts + 1):
            try:
                self._start_once(deadline, keep_ports=attempt == 1 and self.amqp_port > 0)
                return
            except RabbitMQStartError as e:
                text = str(e)
                bind_race = any(s in text for s in ("eaddrinuse", "Address already in use", "already in use"))
                if bind_race and attempt < attempts and time.monotonic() < deadline:
                    continue
                raise

    def _start_once(self, deadline: float, keep_ports: bool) -> None:
        if not keep_ports:
            ports = free_ports(5)
            self.amqp_port, self.dist_port, self.epmd_port = ports[0], ports[1], ports[2]
            self.stomp_port = ports[3] if self.stomp else None
            self.mqtt_port = ports[4] if self.mqtt else None
        self._write_layout()
        self.env = self.build_env()
        self._close_out()
        self.log_path.write_bytes(b"")
        self._out_fh = open(self.stdout_path, "wb", buffering=0)
        self._rss_peak = 0
        self.beam_pid = 0
        try:
            self._start_epmd(deadline)
            self.command = [str(RABBITMQ_SCRIPTS / "rabbitmq-server")]
            self._proc = subprocess.Popen(
                self.command,
                cwd=str(self.workdir),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=self._out_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session & process group: pgid == pid
                close_fds=True,
            )
            self.pid = self._proc.pid
            self._finalizers.append(weakref.finalize(self, kill_group, self._proc))
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise

    def _start_epmd(self, deadline: float) -> None:
        epmd = _find_epmd()
        if epmd is None:
            raise RabbitMQNotInstalled(_missing())
        env = {k: v for k, v in os.environ.items() if not k.startswith("ERL_")}
        self._epmd = subprocess.Popen(
            [epmd, "-port", str(self.epmd_port), "-address", self.host],
            cwd=str(self.workdir), env=env, stdin=subprocess.DEVNULL,
            stdout=self._out_fh, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
        self.epmd_pid = self._epmd.pid
        self._finalizers.append(weakref.finalize(self, kill_group, self._epmd))
        while True:
            if self._epmd.poll() is not None:
                raise RabbitMQStartError(
                    f"epmd -port {self.epmd_port} exited with code {self._epmd.returncode}"
                    f" (Address already in use?):\n{self.log_tail(20)}")
            try:
                with socket.create_connection((self.host, self.epmd_port), timeout=1) as s:
                    s.sendall(b"\x00\x01n")  # NAMES_REQ: answered with epmd's port number
                    if s.recv(4) == struct.pack(">I", self.epmd_port):
                        return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise RabbitMQStartError(f"epmd did not listen on {self.epmd_port} in time")
            time.sleep(0.02)

    def _find_beam(self) -> int:
        if self.beam_pid:
            return self.beam_pid
        try:
            import psutil

            for child in psutil.Process(self.pid).children(recursive=True):
                if child.name().startswith("beam"):
                    self.beam_pid = child.pid
                    break
        except Exception:
            pass
        return self.beam_pid

    def _wait_ready(self, deadline: float) -> None:
        last = "not tried yet"
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise RabbitMQStartError(
                    f"RabbitMQ (pid {self.pid}, node {self.nodename}) exited with code {rc} during startup:\n"
                    f"{self._failure_report()}")
            self._find_beam()
            self._sample_rss()
            remaining = deadline - time.monotonic()
            if self._tcp_accepts(self.amqp_port):
                if self.amqp10:
                    ok, last = amqp10_open(self.amqp_port, timeout=min(10.0, max(1.0, remaining)),
                                           user=self.user, password=self.password)
                else:
                    ok, last = _amqp091_handshake(self.amqp_port, timeout=min(5.0, max(0.5, remaining)))
                if ok:
                    self._wait_plugin_ports(deadline)
                    return
            else:
                last = f"port {self.amqp_port} not accepting yet"
            if time.monotonic() >= deadline:
                raise RabbitMQStartError(
                    f"RabbitMQ (pid {self.pid}, node {self.nodename}) not ready before timeout "
                    f"(last check: {last}):\n{self._failure_report()}")
            time.sleep(0.2)

    def _wait_plugin_ports(self, deadline: float) -> None:
        for port in (self.stomp_port, self.mqtt_port):
            while port and not self._tcp_accepts(port):
                if self._proc.poll() is not None or time.monotonic() >= deadline:
                    raise RabbitMQStartError(f"plugin port {port} never accepted:\n{self._failure_report()}")
                time.sleep(0.1)

    @staticmethod
    def _tcp_accepts(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            return False

    def _descendants(self) -> list:
        """psutil handles of every process below the start script (create-time checked)."""
        try:
            import psutil

            return psutil.Process(self.pid).children(recursive=True)
        except Exception:
            return []

    def stop(self, timeout: float = 30) -> None:
        """Graceful SIGTERM to the node's process group, SIGKILL after ``timeout``;
        then leftover helpers and the private epmd by PID.  Idempotent."""
        proc = self._proc
        helpers = []
        if proc is not None:
            if proc.poll() is None:
                self._sample_rss()
                helpers = self._descendants()
                stop_group(proc, timeout)
            self._reap_helpers(helpers)
        if self.epmd_port and self.nodename:
            try:
                for pid in _stray_epmd_pids(self.epmd_port, self.nodename, exclude={self.epmd_pid}):
                    self._kill_pid_checked(pid)
            except OSError:
                pass
        self._stop_epmd()
        for f in self._finalizers:
            f.detach()
        self._finalizers.clear()
        self._close_out()

    @staticmethod
    def _reap_helpers(helpers: list) -> None:
        """beam's helpers (erl_child_setup, inet_gethost, disk monitor shell) leave on their own
        when the VM goes; give them a moment, then SIGKILL survivors (psutil checks PID reuse)."""
        if not helpers:
            return
        try:
            import psutil

            _, alive = psutil.wait_procs(helpers, timeout=5)
            for p in alive:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            psutil.wait_procs(alive, timeout=5)
        except Exception:
            pass

    @staticmethod
    def _kill_pid_checked(pid: int) -> None:
        try:
            import psutil

            p = psutil.Process(pid)
            p.terminate()
            try:
                p.wait(timeout=5)
            except psutil.TimeoutExpired:
                p.kill()
        except Exception:
            pass

    def _stop_epmd(self) -> None:
        ep = self._epmd
        if ep is None:
            return
        if ep.poll() is None:
            try:
                ep.terminate()  # our own child: its PID cannot be reused before we reap it
                ep.wait(timeout=5)
            except subprocess.TimeoutExpired:
                ep.kill()
                ep.wait(timeout=10)
        self._epmd = None

    def _close_out(self) -> None:
        if self._out_fh is not None:
            try:
                self._out_fh.close()
            finally:
                self._out_fh = None

    # ----------------------------------------------------------------- observation
    def _sample_rss(self) -> int:
        pid = self.beam_pid
        if pid and self._proc is not None and self._proc.poll() is None:
            self._rss_peak = max(self._rss_peak, peak_rss(pid))
        return self._rss_peak

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

    # ----------------------------------------------------------------- context manager
    def __enter__(self) -> "RabbitMQProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self.pid} beam={self.beam_pid}" if self.running else "stopped"
        return (f"<RabbitMQProcess {self.nodename} {state} amqp={self.amqp_port} stomp={self.stomp_port} "
                f"mqtt={self.mqtt_port} dist={self.dist_port} epmd={self.epmd_port}>")
