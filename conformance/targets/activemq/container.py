"""Run ActiveMQ Classic in a container (image ``brokerconf/activemq-classic:5.17``, built by
docker/build-images.sh) with the interface of `ActiveMQProcess`, so the target layer can use either.

How it maps onto the local-process launcher
-------------------------------------------
The activemq.xml is the one `ActiveMQProcess.render_config` writes (same options, same policies),
rendered with the container's view of the world: connectors on 0.0.0.0 at the image's fixed ports
(OpenWire 61616, STOMP 61613, MQTT 1883) and the data directory at the image's
``/var/lib/brokerconf/data``. The file is mounted read-only at ``/etc/brokerconf/activemq.xml``; the
image's entrypoint runs the JVM with the same flags as `ActiveMQProcess.build_command`.

* Network: the container joins a Docker network made for the scenario (or one handed in, which
  several brokers then share: ``network=`` a `testcontainers.core.network.Network`), under its
  broker name as network alias, so brokers reach each other as ``tcp://<name>:61616``.
* Ports: published on 127.0.0.1 only, on host ports picked at the first start (`free_ports`, below
  the ephemeral range) and reused on restarts (stable addresses for reconnecting clients, as
  `ActiveMQProcess` keeps its ports).
* Readiness: ActiveMQ's own "Apache ActiveMQ <version> (<name>, <id>) started" log line
  (testcontainers' `LogMessageWaitStrategy`), then a STOMP CONNECT through the published port.
* Data: ``workdir/data`` is bind-mounted as the data directory, so a persistent store survives a
  kill/restart exactly like the local process's; ``kahadb_directory`` (shared-store master/slave)
  is bind-mounted at ``/var/lib/brokerconf/shared-kahadb``.
* Logs: ``log_tail()`` reads ``docker logs``; before a container is removed its whole log is
  appended to ``workdir/activemq.log`` so evidence outlives it.
* Cleanup: `stop()` (also `__exit__`, on exceptions and KeyboardInterrupt) removes the container
  and, when the launcher created it, the network; a weakref finalizer does the same if the
  launcher is dropped unstopped. Containers and networks carry ``org.brokerconf.*`` labels.
* NET_ADMIN: on by default, so the chaos nemesis can use iptables inside the container.

testcontainers' reaper (Ryuk) needs the ``testcontainers/ryuk`` image; where that image is not
present (no registry, as on the project's CI machine) it is switched off and the cleanup above is
what removes containers; set ``TESTCONTAINERS_RYUK_DISABLED`` yourself to decide either way.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from conformance.targets.activemq.process import ActiveMQAddresses, ActiveMQProcess, ActiveMQStartError
from conformance.targets.runtime.jvm import quick_start_options
from conformance.targets.runtime.probes import stomp_handshake
from machinery.container import ContainerLifecycle, _configure_reaper, docker_container, \
    init_container_state, new_network
from machinery.docker_env import ACTIVEMQ_IMAGE, DockerUnavailable, docker_client, image_available
from machinery.process import free_ports
import socket
from machinery.waiting import Deadline, poll

__all__ = ["ActiveMQContainer", "CONTAINER_PORTS", "READY_LINE", "LABEL"]

#: ports the image's default configuration and the rendered activemq.xml bind inside the container
CONTAINER_PORTS = {"openwire": 61616, "stomp": 61613, "mqtt": 1883}
#: BrokerService logs this once the broker and its connectors are up (ActiveMQ 5.x)
READY_LINE = r"Apache ActiveMQ \S+ \({name}, ID:[^)]*\) started"
#: logged by KahaDB's shared-file locker when another broker holds the store (see ActiveMQProcess)
SLAVE_LINE = "is locked by another server"
#: label put on every container and network this module creates
LABEL = "org.brokerconf.launcher"

_BASE = PurePosixPath("/var/lib/brokerconf")
_CONFIG_IN_CONTAINER = "/etc/brokerconf/activemq.xml"
_SHARED_KAHADB = _BASE / "shared-kahadb"


class ActiveMQContainer(ActiveMQAddresses, ContainerLifecycle):
    """One ActiveMQ Classic broker in a Docker container on a scenario network.

    Takes the same broker options as `ActiveMQProcess` (``stomp``, ``openwire``, ``mqtt``,
    ``persistent``, ``policy_entries_xml``, ``plugins_xml``, ``memory_limit_mb``/``_bytes``,
    ``jvm_heap_mb``, ``advisory_support``, ``stomp_scheme``, ``scheduler_support``, ``jmx``,
    ``ready_login``, ``kahadb_directory``, ``lock_*``, ``extra_jvm_args``) plus:

    ``image`` (default `ACTIVEMQ_IMAGE`), ``network`` (a testcontainers ``Network`` to join; not
    removed by this launcher), ``network_aliases`` (besides the broker name), ``net_admin``
    (default True), ``env`` (extra environment for the entrypoint).
    """

    host = "127.0.0.1"

    def __init__(self, workdir: Path, *, name: str = "brokerconf", image: str = ACTIVEMQ_IMAGE,
                 network: Any = None, network_aliases: tuple[str, ...] = (), net_admin: bool = True,
                 env: dict[str, str] | None = None, **broker_options: Any) -> None:
        if broker_options.get("amqp"):
            # the image has no AMQP transport: Debian does not package it (docker/activemq-classic)
            raise ValueError("amqp=True: the brokerconf/activemq-classic image has no AMQP transport; "
                             "run ActiveMQ as a local process (activemq:process) for AMQP")
        # The process launcher validates the options and renders activemq.xml; it never starts here.
        self._config = ActiveMQProcess(workdir, name=name, **broker_options)
        self.workdir = self._config.workdir
        self.name = name
        self.image = image
        self.net_admin = net_admin
        self.network_aliases = (name, *network_aliases)
        self.env = dict(env or {})
        self.stomp = self._config.stomp
        self.openwire = self._config.openwire
        self.mqtt = self._config.mqtt
        self.jmx = self._config.jmx
        self.ready_login = self._config.ready_login
        self.config_path = self.workdir / "conf" / "activemq.xml"
        self.log_path = self.workdir / "activemq.log"
        self.data_dir = self.workdir / "data"
        self.kahadb_directory = Path(broker_options["kahadb_directory"]).absolute() \
            if broker_options.get("kahadb_directory") else None
        self.stomp_port: int = 0
        self.openwire_port: int = 0
        self.mqtt_port: int | None = None
        self.jmx_port: int = 0
        init_container_state(self, network)

    # ----------------------------------------------------------------- addresses
    @property
    def internal_openwire_url(self) -> str:
        """How other containers on the scenario network reach this broker (network connectors)."""
        return f"tcp://{self.name}:{CONTAINER_PORTS['openwire']}"

    @property
    def ip_address(self) -> str | None:
        """The container's address on the scenario network (for partitions), while it exists."""
        container = self._wrapped()
        if container is None or self.network_name is None:
            return None
        container.reload()
        return container.attrs["NetworkSettings"]["Networks"].get(self.network_name, {}).get("IPAddress") or None

    # ----------------------------------------------------------------- config
    def render_config(self) -> str:
        """activemq.xml as the container sees it (same renderer as the local process)."""
        cfg = self._config
        cfg.host = "0.0.0.0"  # instance attribute: bind every interface of the container's namespace
        cfg.stomp_port = CONTAINER_PORTS["stomp"] if cfg.stomp else 0
        cfg.openwire_port = CONTAINER_PORTS["openwire"] if cfg.openwire else 0
        cfg.mqtt_port = CONTAINER_PORTS["mqtt"] if cfg.mqtt else None
        cfg.data_dir = _BASE / "data"  # type: ignore[assignment] - only ever str()-ed by the renderer
        cfg.kahadb_directory = (_SHARED_KAHADB if self.kahadb_directory else _BASE / "data" / "kahadb")  # type: ignore[assignment]
        return cfg.render_config()

    def _jmx_java_opts(self) -> list[str]:
        # The JDK agent's RMI stub carries host and port to the client, so the port is the same
        # number inside and outside and the advertised host is the published loopback address.
        if not self.jmx:
            return []
        p = self.jmx_port
        return [f"-Dcom.sun.management.jmxremote.port={p}", f"-Dcom.sun.management.jmxremote.rmi.port={p}",
                "-Dcom.sun.management.jmxremote.host=0.0.0.0", "-Dcom.sun.management.jmxremote.authenticate=false",
                "-Dcom.sun.management.jmxremote.ssl=false", f"-Djava.rmi.server.hostname={self.host}"]

    def _write_config(self) -> None:
        for d in (self.config_path.parent, self.data_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.render_config(), encoding="utf-8")

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 90, wait_for: str = "serving") -> None:
        """Create the network (first start), write activemq.xml, start the container and wait
        until ActiveMQ logs that it started and STOMP answers through the published port
        (``wait_for="lock"``: or until it logs that it waits for the shared store's lock).

        Raises `DockerUnavailable` (engine/permission/image, with what to do) or
        `ActiveMQStartError` (with the container's log); nothing is left running on failure."""
        if wait_for not in ("serving", "lock"):
            raise ValueError(f"wait_for must be 'serving' or 'lock', not {wait_for!r}")
        if self._tc is not None and self.running:
            raise RuntimeError(f"ActiveMQ container {self.name!r} is already running ({self.container_id[:12]})")
        ok, reason = image_available(self.image)
        if not ok:
            raise DockerUnavailable(reason)
        self._discard_container()  # a killed container from the previous run: keep its log, remove it
        deadline = Deadline(timeout)
        try:
            self._client = self._client or docker_client()
            _configure_reaper(self._client)
            self._ensure_network()
            self._write_config()
            self._tc = self._build_container()
            self._start_container(deadline, wait_for)
        except BaseException:
            self.stop()
            raise

    def _ensure_network(self) -> None:
        if self._given_network is not None or self._own_network is not None:
            return
        self._own_network = new_network(f"brokerconf-{self.name}-{uuid.uuid4().hex[:8]}",
                                        {LABEL: "activemq_container", "org.brokerconf.broker": self.name})

    def _build_container(self) -> Any:
        if self.jmx and not self.jmx_port:
            self.jmx_port = free_ports(1)[0]
        env = {"ACTIVEMQ_XML": _CONFIG_IN_CONTAINER, "ACTIVEMQ_HEAP_MB": str(self._config.jvm_heap_mb),
               "ACTIVEMQ_BROKER_NAME": self.name,
               # the quick start as for a local JVM (conformance/targets/runtime/jvm.py)
               "ACTIVEMQ_JAVA_OPTS": " ".join([*self._jmx_java_opts(), *quick_start_options(),
                                               *self._config.extra_jvm_args]),
               "ACTIVEMQ_HEALTH_PORTS": " ".join(str(CONTAINER_PORTS[p]) for p in ("stomp", "openwire", "mqtt")
                                                 if getattr(self, p)),
               **self.env}
        tc = docker_container(self.image, env=env, network=self._given_network or self._own_network,
                              network_aliases=list(self.network_aliases))
        tc.with_name(f"brokerconf-{self.name}-{uuid.uuid4().hex[:8]}")
        tc.with_volume_mapping(str(self.config_path), _CONFIG_IN_CONTAINER, "ro")
        tc.with_volume_mapping(str(self.data_dir), str(_BASE / "data"), "rw")
        if self.kahadb_directory is not None:
            self.kahadb_directory.mkdir(parents=True, exist_ok=True)
            tc.with_volume_mapping(str(self.kahadb_directory), str(_SHARED_KAHADB), "rw")
        # Loopback only, on host ports picked at the first start (`free_ports`: below the kernel's
        # ephemeral range) and asked for again on a restart. Docker's own pick comes from the
        # ephemeral range, where a client's outgoing connection can hold the port while the
        # container is down: a CI run's restart of a killed master failed so ("listen tcp4
        # 127.0.0.1:32798: bind: address already in use").
        published = {"stomp": self.stomp_port, "openwire": self.openwire_port, "mqtt": self.mqtt_port}
        missing = [proto for proto in CONTAINER_PORTS if getattr(self, proto) and not published[proto]]
        published.update(zip(missing, free_ports(len(missing))))
        for proto, port in CONTAINER_PORTS.items():
            if getattr(self, proto):
                tc.ports[f"{port}/tcp"] = (self.host, published[proto])
        if self.jmx:
            tc.ports[f"{self.jmx_port}/tcp"] = (self.host, self.jmx_port)
        tc.with_kwargs(labels={LABEL: "activemq_container", "org.brokerconf.broker": self.name,
                               "org.brokerconf.workdir": str(self.workdir)},
                       cap_add=["NET_ADMIN"] if self.net_admin else [],
                       stop_signal="SIGTERM")
        return tc

    def _start_container(self, deadline: Deadline, wait_for: str) -> None:
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # noqa: PLC0415 - optional dependency

        ready = READY_LINE.format(name=re.escape(self.name))
        pattern = ready if wait_for == "serving" else f"(?:{ready}|{re.escape(SLAVE_LINE)})"
        strategy = LogMessageWaitStrategy(re.compile(pattern, re.MULTILINE))
        strategy.with_startup_timeout(max(1.0, deadline.remaining())).with_poll_interval(0.2)
        self._tc.waiting_for(strategy)
        try:
            self._tc.start()
        except (TimeoutError, RuntimeError) as exc:
            what = str(exc).split(". Hint:")[0].split(". Recent stdout")[0]
            raise ActiveMQStartError(f"ActiveMQ container {self.name!r} ({self.image}) did not start: {what}\n"
                                     f"{self._failure_report()}") from None
        finally:
            wrapped = self._tc._container  # set by create(), also when the wait fails
            self.container_id = wrapped.id if wrapped is not None else None
            self._arm_finalizer()
        self.refresh_ports()
        if wait_for == "serving" or not self.waiting_for_lock():
            self._wait_stomp(deadline)

    def join(self, network: Any) -> None:
        """Run on ``network`` (a docker SDK Network that exists once a shared launcher started
        it) instead of a network of its own; before `start` only."""
        if self.container_id is not None:
            raise RuntimeError(f"{self.name}: join() a network before start()")
        self._given_network = network

    def refresh_ports(self) -> None:
        """Re-read the published host ports: Docker re-publishes them when the container is
        reconnected to its network, and an ephemeral port comes back with a new number."""
        self._read_published_ports()

    def _read_published_ports(self) -> None:
        container = self._wrapped()
        container.reload()
        ports = container.attrs["NetworkSettings"]["Ports"] or {}

        def host_port(port: int) -> int:
            bindings = ports.get(f"{port}/tcp") or []
            if not bindings:
                raise ActiveMQStartError(f"container port {port} of {self.name!r} is not published: {ports}")
            return int(bindings[0]["HostPort"])

        self.stomp_port = host_port(CONTAINER_PORTS["stomp"]) if self.stomp else 0
        self.openwire_port = host_port(CONTAINER_PORTS["openwire"]) if self.openwire else 0
        self.mqtt_port = host_port(CONTAINER_PORTS["mqtt"]) if self.mqtt else None

    def _wait_stomp(self, deadline: Deadline) -> None:
        # The log line comes from inside; the published port also needs Docker's forwarding.
        if not self.stomp:
            return
        def silent(last: str) -> ActiveMQStartError:
            return ActiveMQStartError(f"ActiveMQ container {self.name!r} logged that it started but STOMP on "
                                      f"{self.host}:{self.stomp_port} did not answer ({last})\n"
                                      f"{self._failure_report()}")

        def answered() -> tuple[bool, str]:
            ok, last = stomp_handshake(self.stomp_port, timeout=2.0, login=self.ready_login)
            if not ok and not self.running:
                raise silent(last)
            return ok, last

        ok, last = poll(answered, lambda answer: answer[0], timeout=deadline, interval=0.2)
        if not ok:
            raise silent(last)

    # ----------------------------------------------------------------- observation
    def _failure_report(self, tail: int = 40) -> str:
        """Key error lines of the container log (deduplicated) plus its tail without Java stack
        frames, as ActiveMQProcess reports a failed start."""
        lines = self.log_tail(2000).splitlines()
        key: list[str] = []
        for ln in lines:
            if " ERROR " in ln or ln.startswith(("ERROR:", "Caused by:", "Error:", "Exception", "brokerconf-activemq: error")):
                if ln[:400] not in key:
                    key.append(ln[:400])
        frames = [ln for ln in lines if not ln.startswith(("\tat ", "\t... "))][-tail:]
        parts = ["key lines:\n  " + "\n  ".join(key[-8:])] if key else []
        parts.append("container log tail (stack frames omitted):\n" + "\n".join(frames))
        return "\n".join(parts)

    def waiting_for_lock(self) -> bool:
        return self.running and SLAVE_LINE in self.log_tail(400)

    def serving(self, timeout: float = 1.0) -> bool:
        port = self.stomp_port or self.openwire_port or self.mqtt_port or 0
        if not (self.running and port):
            return False

        try:
            with socket.create_connection((self.host, port), timeout=timeout) as s:
                # docker-proxy accepts even when nothing listens inside; a closed connection says so
                s.settimeout(timeout)
                if port == self.stomp_port:
                    return stomp_handshake(port, timeout, self.ready_login)[0]
                return True
        except OSError:
            return False

    def rss_peak_bytes(self) -> int:
        """Peak memory of the container's cgroup (cgroup v1 ``max_usage``; 0 where not reported)."""
        container = self._wrapped()
        if container is None:
            return 0
        try:
            stats = container.stats(stream=False)
        except Exception:  # noqa: BLE001
            return 0
        mem = stats.get("memory_stats") or {}
        return int(mem.get("max_usage") or mem.get("usage") or 0)

    # ----------------------------------------------------------------- context manager
    def __enter__(self) -> "ActiveMQContainer":
        self.start()
        return self

    def __repr__(self) -> str:
        state = f"container={self.container_id[:12]}" if self.container_id else "stopped"
        return (f"<ActiveMQContainer {self.name} {state} stomp={self.stomp_port} "
                f"openwire={self.openwire_port} mqtt={self.mqtt_port}>")
