"""Run ActiveMQ Artemis in a container with the interface of `ActiveMQContainer`
(start/stop/kill/pause/resume, addresses, log_tail, serving), so the target layer and the chaos
harness drive it the same way (issue 8). The image is ``brokerconf/artemis``
(docker/artemis, built offline by docker/build-images.sh from the pinned distribution; issue 16),
or any image with the official ``apache/activemq-artemis`` interface ($BROKERCONF_ARTEMIS_IMAGE).

What the launcher relies on (../shared/REFERENCES.md, "ActiveMQ Artemis", Images; both images)
-------------------------------------------------------------------------------
* Ports: 61616 (every protocol), 5672 (AMQP), 61613 (STOMP), 1883 (MQTT), 8161 (console). The ones
  asked for are published on 127.0.0.1 only, on host ports Docker picks at the first start and
  reuses on restarts (stable addresses for reconnecting clients).
* Environment: ``ARTEMIS_USER`` / ``ARTEMIS_PASSWORD`` (the instance's user: the scenario's first
  user, else ``artemis``/``artemis``), ``ANONYMOUS_LOGIN`` (``true`` when the scenario has no
  users, so clients connect without credentials), ``EXTRA_ARGS`` (given to ``artemis create``; the
  image's default ``--http-host 0.0.0.0 --relax-jolokia`` is kept, since the readiness line below
  comes from that HTTP server), ``JAVA_ARGS_APPEND`` (``-Xms64m -Xmx<jvm_heap_mb>m``: the heap
  ``artemis create`` writes, ``-Xmx2G``, is lowered; several JVMs share a small machine; and the
  quick start of every broker JVM the harness launches, conformance/targets/runtime/jvm.py).
* The instance lives in ``/var/lib/artemis-instance`` inside the container (not kept: a restart
  after `kill` reuses the same container, so it keeps its instance and journal).
* Readiness: the log line ``HTTP Server started`` (what testcontainers-java waits for), then a STOMP
  CONNECT answered with CONNECTED through the published port.

Address settings (only what ../shared/spec/artemis-message-grouping.md defines)
------------------------------------------------------------------------------
A scenario policy's group fields become an ``<address-setting>`` (grouping document, the
"group-first-key", "group-rebalance" and "group-buckets" sections, address-setting form):

===================  ===============================
DestinationPolicy    address-setting element
===================  ===============================
``group_buckets``    ``default-group-buckets``
``group_rebalance``  ``default-group-rebalance``
``group_first_key``  ``default-group-first-key``
===================  ===============================

The match is the policy's destination name in Artemis wildcard syntax (``>`` becomes ``#``, ``*``
stays; queue and topic patterns both name an address). Every other policy field (slow-consumer
limits and eviction, memory limits, flow control, redeliveries) is ActiveMQ Classic configuration
with no counterpart defined in the Artemis documents here, so a scenario using one raises
`UnsupportedArtemisPolicy` instead of silently running without it.

A small start script is mounted read-only (with the fragment, when the scenario has address
settings) and replaces the entrypoint: it runs the image's own entrypoint once with ``version``
(the entrypoint creates the instance when ``etc/broker.xml`` is absent, then runs the given
``artemis`` command), gives the STOMP and AMQP acceptors routing prefixes (``/queue/`` ``/topic/``,
``queue://`` ``topic://``; see _START_SCRIPT), inserts the fragment right after the opening
``<address-settings>`` of the created ``broker.xml``, and then runs the entrypoint with ``run``
(the image's default command). Verified against brokerconf/artemis:2.40.0
(tests/docker/test_artemis_container.py); the official image was not reachable here.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from conformance.scenario import DestinationPolicy, Scenario

from conformance.targets.runtime.jvm import quick_start_options
from conformance.targets.runtime.probes import stomp_handshake
# the address-setting mapping is shared with the local-process launcher (artemis/process.py)
from conformance.targets.artemis.config import FRAGMENT_MARK, UnsupportedArtemisPolicy, address_settings_xml, artemis_match
from machinery.container import ContainerLifecycle, _configure_reaper, init_container_state
from machinery.container import docker_container as _docker_container  # tests replace it
from machinery.container import new_network as _new_network  # tests replace it
from machinery.docker_env import DockerUnavailable, docker_client, image_available
from machinery.process import free_ports
from conformance.targets.artemis.dist import ARTEMIS_IMAGE  # the local image by default; never pulled (a missing image is a reason)
from machinery.waiting import Deadline, poll, wait_until

__all__ = ["ARTEMIS_IMAGE", "ArtemisContainer", "ArtemisStartError", "UnsupportedArtemisPolicy", "CONTAINER_PORTS",
           "READY_LINE", "LABEL", "address_settings_xml", "artemis_match"]

#: the image's documented ports (REFERENCES.md, "ActiveMQ Artemis", Images)
CONTAINER_PORTS = {"core": 61616, "amqp": 5672, "stomp": 61613, "mqtt": 1883, "console": 8161}
#: the readiness line testcontainers-java waits for (REFERENCES.md)
READY_LINE = r".*HTTP Server started.*"
#: label on every container and network this module creates
LABEL = "org.brokerconf.launcher"
#: the image's default EXTRA_ARGS, kept so the HTTP server (and the readiness line) binds
DEFAULT_EXTRA_ARGS = "--http-host 0.0.0.0 --relax-jolokia"

_MOUNT = "/etc/brokerconf"
_FRAGMENT_MARK = FRAGMENT_MARK
# The image's entrypoint is /docker-run.sh with working directory /var/lib/artemis-instance.
# Routing prefixes: `artemis create` writes the STOMP and AMQP acceptors without any, so a STOMP
# ``/queue/X`` would name an address called "/queue/X" with the default routing type (multicast:
# a message sent before any subscription is dropped). The Artemis documentation's "Address Model"
# chapter (prefixes) maps a prefix to a routing type per acceptor; the clients use ActiveMQ's names
# (``/queue/`` ``/topic/`` on STOMP, ``queue://`` ``topic://`` on AMQP), as artemis_config's
# local instances declare them too.
_STOMP_PREFIXES = "anycastPrefix=/queue/;multicastPrefix=/topic/"
_AMQP_PREFIXES = "anycastPrefix=queue://;multicastPrefix=topic://"
_START_SCRIPT = f"""#!/bin/sh
# brokerconf: let the image's entrypoint create the instance, give the STOMP and AMQP acceptors
# routing prefixes, add the scenario's address settings to etc/broker.xml, then run the broker
# (conformance/targets/artemis/container.py). A restart finds all of it done and only runs.
set -e
cd /var/lib/artemis-instance
/docker-run.sh version
if ! grep -q 'anycastPrefix=/queue/' etc/broker.xml; then
  sed -e 's#\\(<acceptor name="stomp">[^<]*\\)</acceptor>#\\1;{_STOMP_PREFIXES}</acceptor>#' \\
      -e 's#\\(<acceptor name="amqp">[^<]*\\)</acceptor>#\\1;{_AMQP_PREFIXES}</acceptor>#' \\
      etc/broker.xml > /tmp/brokerconf-broker.xml
  if ! grep -q '<acceptor name="stomp">[^<]*anycastPrefix=/queue/' /tmp/brokerconf-broker.xml; then
    echo "brokerconf: error: etc/broker.xml has no <acceptor name=\\"stomp\\"> to give routing prefixes" >&2
    exit 3
  fi
  cat /tmp/brokerconf-broker.xml > etc/broker.xml
fi
if [ -f {_MOUNT}/address-settings.xml ] && ! grep -q '{_FRAGMENT_MARK}' etc/broker.xml; then
  awk -v f={_MOUNT}/address-settings.xml \\
    '{{print}} !done && /<address-settings>/ {{while ((getline l < f) > 0) print l; done = 1}}' \\
    etc/broker.xml > /tmp/brokerconf-broker.xml
  if ! grep -q '{_FRAGMENT_MARK}' /tmp/brokerconf-broker.xml; then
    echo "brokerconf: error: etc/broker.xml has no <address-settings> element to extend" >&2
    exit 3
  fi
  cat /tmp/brokerconf-broker.xml > etc/broker.xml
fi
exec /docker-run.sh run
"""


class ArtemisStartError(RuntimeError):
    """The Artemis container did not become ready; the message carries its log."""


# ------------------------------------------------------------------ the launcher


def _wait_strategy(pattern: str, timeout: float) -> Any:
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # noqa: PLC0415 - optional dependency

    strategy = LogMessageWaitStrategy(re.compile(pattern, re.MULTILINE))
    strategy.with_startup_timeout(max(1.0, timeout)).with_poll_interval(0.2)
    return strategy


class ArtemisContainer(ContainerLifecycle):
    """One ActiveMQ Artemis broker in a container (see the module doc for the image) on a scenario network.

    ``stomp`` / ``mqtt`` / ``amqp`` say which listeners to publish (the image opens all of them;
    61616 is always published, as the core port other nodes and JMS clients use).
    ``users``: the scenario's (name, password) pairs; the first becomes the instance user and
    anonymous login is off, none means anonymous login on. ``policies``: scenario policies mapped
    to address settings (see the module doc). ``network``: a testcontainers Network to join (not
    removed here), else one is made and removed. ``net_admin`` (default True) for iptables
    partitions; ``extra_args`` replaces the image's ``EXTRA_ARGS``; ``env`` adds variables.
    """

    host = "127.0.0.1"

    def __init__(self, workdir: Path, *, name: str = "brokerconf-artemis", image: str = ARTEMIS_IMAGE,
                 stomp: bool = True, mqtt: bool = True, amqp: bool = True,
                 users: tuple[tuple[str, str], ...] = (), policies: tuple[DestinationPolicy, ...] = (),
                 network: Any = None, network_aliases: tuple[str, ...] = (), net_admin: bool = True,
                 extra_args: str = DEFAULT_EXTRA_ARGS, env: dict[str, str] | None = None,
                 jvm_heap_mb: int = 384) -> None:
        if not stomp:
            # readiness is a STOMP CONNECT (and the conformance clients' main protocol)
            raise ValueError("the Artemis launcher needs the STOMP listener (stomp=True): readiness is checked over it")
        self.workdir = Path(workdir).absolute()
        self.name = name
        self.image = image
        self.stomp, self.mqtt, self.amqp = stomp, mqtt, amqp
        self.users = tuple(users)
        if len(self.users) > 1:
            # the image documents one user (ARTEMIS_USER / ARTEMIS_PASSWORD); more need a security config
            raise UnsupportedArtemisPolicy(f"the Artemis image creates one user; the scenario has {len(self.users)} "
                                           f"({', '.join(u for u, _ in self.users)})")
        self.ready_login = self.users[0] if self.users else None
        self.address_settings = address_settings_xml(tuple(policies))  # raises before anything starts
        self.network_aliases = (name, *network_aliases)
        self.net_admin = net_admin
        self.extra_args = extra_args
        self.extra_env = dict(env or {})
        self.jvm_heap_mb = int(jvm_heap_mb)
        self.conf_dir = self.workdir / "conf"
        self.log_path = self.workdir / "artemis.log"
        self.ports: dict[str, int] = {}  # listener -> published host port, kept across restarts
        init_container_state(self, network)
        self._ready_lines_before = 0

    # ----------------------------------------------------------------- configuration
    def environment(self) -> dict[str, str]:
        """The image's documented variables for this broker."""
        user, password = self.ready_login or ("artemis", "artemis")
        return {"ARTEMIS_USER": user, "ARTEMIS_PASSWORD": password,
                "ANONYMOUS_LOGIN": "false" if self.users else "true",
                "EXTRA_ARGS": self.extra_args,
                # bin/artemis puts $JAVA_ARGS_APPEND last on the java command line, after the
                # profile's -Xms512M -Xmx2G, so these win (both images run Artemis's own script);
                # -Xms too, as the initial heap must not exceed the maximum; the quick start as
                # for a local JVM (a container's broker lives as briefly, on the same two cores)
                "JAVA_ARGS_APPEND": " ".join([f"-Xms64m -Xmx{self.jvm_heap_mb}m", *quick_start_options()]),
                **self.extra_env}

    def listeners(self) -> list[str]:
        return ["core", *(p for p in ("stomp", "mqtt", "amqp") if getattr(self, p))]

    def config_text(self) -> str:
        """Evidence: the environment and the address-settings fragment given to the image."""
        env = "\n".join(f"{k}={'***' if k == 'ARTEMIS_PASSWORD' else v}" for k, v in self.environment().items())
        fragment = self.address_settings or "<!-- no address settings: the image's broker.xml as created -->\n"
        return f"# {self.image} environment\n{env}\n# address settings added to etc/broker.xml\n{fragment}"

    def _write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        if self.address_settings:
            (self.conf_dir / "address-settings.xml").write_text(self.address_settings, encoding="utf-8")
        script = self.conf_dir / "start-artemis.sh"
        script.write_text(_START_SCRIPT, encoding="utf-8")
        script.chmod(0o755)

    # ----------------------------------------------------------------- addresses
    def _address(self, listener: str) -> tuple[str, int] | None:
        port = self.ports.get(listener)
        return (self.host, port) if port else None

    def refresh_ports(self) -> None:
        """`NetworkedContainer`: nothing to re-read. The host ports are fixed at the first start
        (`_build_container` publishes each listener on a chosen port), so Docker publishes the same
        ones again when the container is reconnected to its network."""

    @property
    def stomp_address(self) -> tuple[str, int] | None:
        return self._address("stomp")

    @property
    def mqtt_address(self) -> tuple[str, int] | None:
        return self._address("mqtt")

    @property
    def amqp_address(self) -> tuple[str, int] | None:
        return self._address("amqp")

    @property
    def core_address(self) -> tuple[str, int] | None:
        return self._address("core")

    @property
    def internal_core_url(self) -> str:
        """How other containers on the scenario network reach this broker (cluster connections)."""
        return f"tcp://{self.name}:{CONTAINER_PORTS['core']}"

    # ----------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 120) -> None:
        """Start the container (a network of its own on the first start) and wait for the readiness
        line and a STOMP CONNECTED. Raises `DockerUnavailable` (engine, permission, image: with what
        to do) or `ArtemisStartError` (with the log); nothing is left running on failure."""
        if self._tc is not None and self.running:
            raise RuntimeError(f"Artemis container {self.name!r} is already running ({self.container_id})")
        ok, reason = image_available(self.image)
        if not ok:
            raise DockerUnavailable(reason)
        deadline = Deadline(timeout)
        restart = self._tc is not None  # killed earlier: same container, same instance and journal
        try:
            if restart:
                # count readiness lines before the restart: the new one may be logged at once
                self._ready_lines_before = self._count_ready_lines()
                self._wrapped().start()
            else:
                self._client = self._client or docker_client()
                _configure_reaper(self._client)
                self._ensure_network()
                self._write_config()
                self._tc = self._build_container()
            self._wait_ready(deadline, restart)
        except BaseException:
            self.stop()
            raise

    def _labels(self) -> dict[str, str]:
        return {LABEL: "artemis_container", "org.brokerconf.broker": self.name}

    def _ensure_network(self) -> None:
        if self._given_network is None and self._own_network is None:
            self._own_network = _new_network(f"brokerconf-{self.name}-{uuid.uuid4().hex[:8]}", self._labels())

    def _build_container(self) -> Any:
        tc = _docker_container(self.image, env=self.environment(), network=self._given_network or self._own_network,
                               network_aliases=list(self.network_aliases))
        tc.with_name(f"brokerconf-{self.name}-{uuid.uuid4().hex[:8]}")
        # Loopback only, on host ports fixed at the first start: Docker would give a restarted
        # container new ephemeral ports, and reconnecting clients need stable addresses.
        missing = [lsn for lsn in self.listeners() if not self.ports.get(lsn)]
        self.ports.update(zip(missing, free_ports(len(missing))))
        for listener in self.listeners():
            tc.ports[f"{CONTAINER_PORTS[listener]}/tcp"] = (self.host, self.ports[listener])
        kwargs: dict[str, Any] = {"labels": {**self._labels(), "org.brokerconf.workdir": str(self.workdir)},
                                  "cap_add": ["NET_ADMIN"] if self.net_admin else []}
        # always the start script: the acceptors need routing prefixes (see _START_SCRIPT)
        tc.with_volume_mapping(str(self.conf_dir), _MOUNT, "ro")
        kwargs["entrypoint"] = ["/bin/sh", f"{_MOUNT}/start-artemis.sh"]
        tc.with_kwargs(**kwargs)
        return tc

    def _wait_ready(self, deadline: Deadline, restart: bool) -> None:
        if restart:
            self._wait_log(deadline)
        else:
            self._tc.waiting_for(_wait_strategy(READY_LINE, deadline.remaining()))
            try:
                self._tc.start()
            except (TimeoutError, RuntimeError) as exc:
                what = str(exc).split(". Hint:")[0].split(". Recent stdout")[0]
                raise ArtemisStartError(f"Artemis container {self.name!r} ({self.image}) did not log "
                                        f"'HTTP Server started': {what}\n{self._failure_report()}") from None
            finally:
                wrapped = self._wrapped()  # set by create(), also when the wait fails
                self.container_id = wrapped.id if wrapped is not None else None
                self._arm_finalizer()
        self._read_published_ports()
        self._wait_stomp(deadline)

    def _wait_log(self, deadline: Deadline) -> None:
        """After a restart of the same container: wait for a readiness line newer than the restart."""
        def back() -> bool:
            if self._count_ready_lines() > self._ready_lines_before:
                return True
            if not self.running:
                raise self._not_back()
            return False

        wait_until(back, deadline, 0.5, on_timeout=lambda _: self._not_back())

    def _not_back(self) -> ArtemisStartError:
        return ArtemisStartError(f"Artemis container {self.name!r} did not come back after a restart\n"
                                 f"{self._failure_report()}")

    def _count_ready_lines(self) -> int:
        return len(re.findall(READY_LINE, self.log_tail(100000)))

    def _read_published_ports(self) -> None:
        container = self._wrapped()
        container.reload()
        bindings = container.attrs["NetworkSettings"]["Ports"] or {}
        for listener in self.listeners():
            found = bindings.get(f"{CONTAINER_PORTS[listener]}/tcp") or []
            if not found:
                raise ArtemisStartError(f"container port {CONTAINER_PORTS[listener]} ({listener}) of {self.name!r} "
                                        f"is not published: {bindings}")
            self.ports[listener] = int(found[0]["HostPort"])

    def _wait_stomp(self, deadline: Deadline) -> None:
        # the log line comes from inside; the published port also needs Docker's forwarding
        def silent(last: str) -> ArtemisStartError:
            return ArtemisStartError(f"Artemis container {self.name!r} logged 'HTTP Server started' but STOMP on "
                                     f"{self.host}:{self.ports['stomp']} did not answer CONNECTED ({last})\n"
                                     f"{self._failure_report()}")

        def answered() -> tuple[bool, str]:
            ok, last = stomp_handshake(self.ports["stomp"], 5.0, self.ready_login)
            if not ok and not self.running:
                raise silent(last)
            return ok, last

        ok, last = poll(answered, lambda answer: answer[0], timeout=deadline, interval=0.3)
        if not ok:
            raise silent(last)

    # ----------------------------------------------------------------- process faults
    @property
    def pid(self) -> int | None:
        """Host PID of the container's main process, for chaos.nemesis.process (kill -9, SIGSTOP):
        the JVM itself, since the start script, /docker-run.sh and bin/artemis each ``exec`` the
        next. None when the container is not running; a PID not in this container's cgroup (reused
        since) is never answered. Signalling it needs the engine user's rights (root here)."""
        container = self._reloaded()
        if container is None:
            return None
        state = container.attrs.get("State") or {}
        if not (state.get("Running") and state.get("Pid")):
            return None
        pid = int(state["Pid"])
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
                mine = container.id in f.read()  # /docker/<id> (cgroupfs) or docker-<id>.scope (systemd)
        except OSError:
            return None  # already gone
        return pid if mine else None

    def kill(self) -> None:
        """SIGKILL the broker's container; also when the chaos nemesis has already SIGKILLed its main
        process (the engine then answers 409 "is not running"): wait until the engine sees it exited,
        since start() restarts only a stopped container."""
        try:
            super().kill()
        except Exception as exc:  # noqa: BLE001 - docker.errors.APIError without importing the SDK here
            if "is not running" not in str(exc) and getattr(getattr(exc, "response", None), "status_code", 0) != 409:
                raise
        wait_until(lambda: not self.running, 30, 0.05, on_timeout=lambda _: ArtemisStartError(
            f"Artemis container {self.name!r} still runs 30 s after SIGKILL"))

    # ----------------------------------------------------------------- observation
    def _failure_report(self, tail: int = 40) -> str:
        lines = self.log_tail(2000).splitlines()
        key = list(dict.fromkeys(ln[:400] for ln in lines
                                 if " ERROR " in ln or ln.startswith(("Caused by:", "brokerconf: error", "Error:"))))
        frames = [ln for ln in lines if not ln.startswith(("\tat ", "\t... "))][-tail:]
        parts = ["key lines:\n  " + "\n  ".join(key[-8:])] if key else []
        parts.append("container log tail (stack frames omitted):\n" + "\n".join(frames))
        return "\n".join(parts)

    def serving(self, timeout: float = 1.0) -> bool:
        if not (self.running and self.ports.get("stomp")):
            return False
        return stomp_handshake(self.ports["stomp"], timeout, self.ready_login)[0]

    def __enter__(self) -> "ArtemisContainer":
        self.start()
        return self

    def __repr__(self) -> str:
        state = f"container={self.container_id[:12]}" if self.container_id else "stopped"
        return f"<ArtemisContainer {self.name} {state} ports={self.ports}>"


def from_scenario(scenario: Scenario, workdir: Path, *, image: str = ARTEMIS_IMAGE, name: str | None = None,
                  **options: Any) -> ArtemisContainer:
    """An unstarted launcher for ``scenario`` (its listeners, users and group address settings)."""
    broker = name or "artemis-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario.name).strip("-") or "scenario")
    return ArtemisContainer(workdir, name=broker, image=image, stomp=True,
                            mqtt="mqtt" in scenario.protocols, amqp="amqp" in scenario.protocols,
                            users=scenario.users, policies=scenario.policies, **options)
