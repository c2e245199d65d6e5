"""Target names -> targets: the built-in ones and those of a user's targets file.

Built-in names: ``reference`` (in-process), ``reference:process``, ``activemq`` (a local process
when the Debian package is installed, else a container; the matrix records which),
``activemq:process`` and ``activemq:container`` (force one), ``rabbitmq``, ``mosquitto``,
``artemis`` (container-only, `ArtemisContainer`: not applicable, with docker_env's reason, where
the ``apache/activemq-artemis`` image is not in the engine).

A targets file (``--targets-file``, TOML) names brokers that are already running::

    [target.staging-amq]
    kind = "activemq"          # whose documented rules apply (reference, activemq, artemis, ...)
    host = "127.0.0.1"
    stomp = 61613              # a port per protocol it speaks
    mqtt = 1883
    login = "admin"            # optional credentials
    passcode = "admin"
    capabilities = ["groups", "transactions"]   # features you vouch for (protocol.* come from the ports)

An external broker is never configured by the harness, so tests needing a scenario's policies are
not applicable to it, and its counters cannot be read.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.base import CAPABILITIES, DestinationCounters, SubscriptionCounters, Target, TargetUnavailable

BUILTIN = ("reference", "reference:process", "activemq", "activemq:process", "activemq:container", "rabbitmq",
           "mosquitto", "artemis")

#: the local image docker/build-images.sh builds from the Artemis distribution pinned in pins.toml
#: (docker/artemis/: same ports, variables, instance directory and entrypoint as the official
#: image); never pulled by availability checks. $BROKERCONF_ARTEMIS_IMAGE picks another image, e.g.
#: the official ``apache/activemq-artemis`` (REFERENCES.md, "ActiveMQ Artemis") where it can be pulled.
ARTEMIS_IMAGE = os.environ.get("BROKERCONF_ARTEMIS_IMAGE", "brokerconf/artemis:2.40.0")


class UnknownTarget(ValueError):
    pass


class ArtemisHandle:
    """A running Artemis container for one scenario (implements `BrokerHandle`; no counters:
    the launcher reads no Artemis management data)."""

    kind = "artemis"
    launch = "container"

    def __init__(self, *, target: str, broker, scenario: Scenario, capabilities: frozenset[str]) -> None:
        self.target = target
        self.broker = broker  # conformance.targets.artemis_container.ArtemisContainer
        self.process = broker  # same name as ActiveMQHandle's, for the chaos harness (kill/pause/resume)
        self.scenario = scenario
        self.capabilities = capabilities
        self.credentials = tuple(broker.ready_login) if broker.ready_login else (None, None)
        self.host = broker.host
        self.ports = {p: broker.ports[p] for p in ("stomp", "mqtt", "amqp") if p in broker.ports}

    def config_text(self) -> str:
        return self.broker.config_text()

    def log_tail(self, lines: int = 80) -> str:
        return self.broker.log_tail(lines)

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        raise TargetUnavailable(f"{self.target}: the Artemis launcher reads no subscription counters")

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        raise TargetUnavailable(f"{self.target}: the Artemis launcher reads no destination counters")

    def kill(self) -> None:
        self.broker.kill()

    def restart(self, timeout: float = 120) -> None:
        """Start the killed container again (same instance, journal and host ports)."""
        from conformance.targets.artemis_container import ArtemisStartError  # noqa: PLC0415
        from conformance.targets.docker_env import DockerUnavailable  # noqa: PLC0415

        try:
            self.broker.start(timeout=timeout)
        except (ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"Artemis ({self.target}) did not come back: {e}") from e

    def stop(self) -> None:
        self.broker.stop()


class ArtemisTarget:
    """ActiveMQ Artemis runs only as a container of its official image
    (`conformance.targets.artemis_container.ArtemisContainer`). Where it cannot run, the target is
    not applicable and the reason says what is missing: the engine, permission, or the image
    (docker_env, which never pulls).

    Capabilities are what the launcher configures or the image provides as created: the three
    listeners, the scenario's group address settings (``default-group-buckets``,
    ``default-group-rebalance``, ``default-group-first-key``), and the grouping behaviour the
    Artemis grouping document describes (pinning, closing with JMSXGroupSeq -1, reassignment when
    the owner closes)."""

    name = kind = "artemis"
    launch_mode = "container"

    _CAPABILITIES = frozenset({"protocol.stomp", "protocol.mqtt", "protocol.amqp", "scenario.policies", "groups",
                               "groups.close", "groups.reassign_on_close", "groups.first_key", "groups.rebalance",
                               "groups.buckets", "process.kill"})

    def __init__(self, image: str = ARTEMIS_IMAGE, image_check=None, start_timeout: float = 120.0) -> None:
        self.image = image
        self._image_check = image_check
        self.start_timeout = start_timeout
        self._availability: tuple[bool, str] | None = None

    def availability(self) -> tuple[bool, str]:
        if self._availability is None:  # asks the Docker engine: once
            if self._image_check is not None:
                ok, reason = self._image_check(self.image)
            else:
                from conformance.targets.docker_env import image_available  # noqa: PLC0415

                ok, reason = image_available(self.image)
            self._availability = (True, "") if ok else (False, f"ActiveMQ Artemis is container-only: {reason}")
        return self._availability

    def capabilities(self) -> frozenset[str]:
        return self._CAPABILITIES

    def why_missing(self, capability: str) -> str | None:
        if capability.startswith(("counters.", "slow_consumer.", "memory.")):
            return "the Artemis launcher configures and reads only group address settings (artemis_container.py)"
        return None

    def launch(self, scenario: Scenario, workdir: Path) -> ArtemisHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        from conformance.targets.artemis_container import (  # noqa: PLC0415 - needs the docker SDK
            ArtemisStartError,
            UnsupportedArtemisPolicy,
            from_scenario,
        )
        from conformance.targets.docker_env import DockerUnavailable  # noqa: PLC0415

        try:
            broker = from_scenario(scenario, Path(workdir) / "artemis-container", image=self.image)
        except UnsupportedArtemisPolicy as e:
            raise TargetUnavailable(f"ActiveMQ Artemis cannot run scenario {scenario.name!r}: {e}") from e
        try:
            broker.start(timeout=self.start_timeout)
        except (ArtemisStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"ActiveMQ Artemis (container) did not start for scenario {scenario.name!r}: "
                                    f"{e}") from e
        opened = {"stomp": True, "mqtt": broker.mqtt, "amqp": broker.amqp}
        capabilities = frozenset(c for c in self._CAPABILITIES
                                 if not (c.startswith("protocol.") and not opened[c.split(".", 1)[1]]))
        return ArtemisHandle(target=self.name, broker=broker, scenario=scenario, capabilities=capabilities)


@dataclass
class ExternalHandle:
    target: str
    kind: str
    host: str
    ports: dict[str, int]
    capabilities: frozenset[str]
    scenario: Scenario
    credentials: tuple[str | None, str | None]
    launch: str = "external"

    def config_text(self) -> str:
        return f"# external broker {self.target}: configured by its owner, not by brokerconf"

    def log_tail(self, lines: int = 80) -> str:
        return f"(external broker {self.target}: its log is not available to the harness)"

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        raise TargetUnavailable(f"{self.target}: counters of an external broker cannot be read")

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        raise TargetUnavailable(f"{self.target}: counters of an external broker cannot be read")

    def stop(self) -> None:
        pass  # not ours to stop


@dataclass
class ExternalTarget:
    name: str
    kind: str
    host: str
    ports: dict[str, int]
    declared: frozenset[str]
    credentials: tuple[str | None, str | None]

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def capabilities(self) -> frozenset[str]:
        return self.declared | {f"protocol.{p}" for p in self.ports}

    def launch(self, scenario: Scenario, workdir: Path) -> ExternalHandle:
        return ExternalHandle(self.name, self.kind, self.host, dict(self.ports), self.capabilities(), scenario,
                              self.credentials)


def load_targets_file(path: Path) -> dict[str, ExternalTarget]:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnknownTarget(f"targets file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UnknownTarget(f"{path}: not valid TOML: {exc}") from None
    targets = {}
    for name, raw in data.get("target", {}).items():
        where = f"{path}: [target.{name}]"
        allowed = {"kind", "host", "stomp", "mqtt", "amqp", "login", "passcode", "capabilities"}
        unknown = set(raw) - allowed
        if unknown:
            bad = sorted(unknown)[0]
            hint = difflib.get_close_matches(bad, allowed, n=1)
            raise UnknownTarget(f"{where}: unknown key {bad!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
        ports = {p: raw[p] for p in ("stomp", "mqtt", "amqp") if p in raw}
        if not ports:
            raise UnknownTarget(f"{where}: give at least one port (stomp, mqtt or amqp)")
        for protocol, port in ports.items():
            if not isinstance(port, int) or not 0 < port < 65536:
                raise UnknownTarget(f"{where}: {protocol} must be a port number, got {port!r}")
        declared = frozenset(raw.get("capabilities", []))
        bad_caps = sorted(c for c in declared if c not in CAPABILITIES)
        if bad_caps:
            raise UnknownTarget(f"{where}: unknown capabilities {bad_caps} (known: {sorted(CAPABILITIES)})")
        targets[name] = ExternalTarget(name, raw.get("kind", "external"), raw.get("host", "127.0.0.1"), ports,
                                       declared - {"scenario.policies", "counters.subscription",
                                                   "counters.destination", "process.kill"},
                                       (raw.get("login"), raw.get("passcode")))
    return targets


def builtin_target(name: str) -> Target:
    if name == "reference":
        from conformance.targets.reference_target import ReferenceTarget
        return ReferenceTarget()
    if name == "reference:process":
        from conformance.targets.reference_target import ReferenceTarget
        return ReferenceTarget(name="reference:process", launch="process")
    if name in ("activemq", "activemq:process", "activemq:container"):
        from conformance.targets.activemq_target import ActiveMQTarget
        _, _, mode = name.partition(":")
        return ActiveMQTarget(name=name, launch=mode or "auto")
    if name == "rabbitmq":
        from conformance.targets.peer_targets import RabbitMQTarget
        return RabbitMQTarget()
    if name == "mosquitto":
        from conformance.targets.peer_targets import MosquittoTarget
        return MosquittoTarget()
    if name == "artemis":
        return ArtemisTarget()
    raise UnknownTarget(name)


def resolve(name: str, external: dict[str, ExternalTarget] | None = None) -> Target:
    """The target called ``name``; UnknownTarget says which names exist (with a did-you-mean)."""
    external = external or {}
    if name in external:
        return external[name]
    if name in BUILTIN:
        return builtin_target(name)
    known = [*BUILTIN, *external]
    hint = difflib.get_close_matches(name, known, n=1)
    raise UnknownTarget(f"unknown target {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                        + f" (known: {', '.join(known)})")
