"""RabbitMQ and Mosquitto as conformance targets: protocol-level peers only.

They run from their Debian packages through the launchers in `rabbitmq.py` and `mosquitto.py`
(private work directory, loopback ports). A scenario's destination policies, memory limit and
users are not applied: these brokers have no equivalent of ActiveMQ's policy entries, so neither
target claims ``scenario.policies`` and suites needing a policy are reported as not applicable.
Their handles read no counters (no ``counters.*`` capability).

RabbitMQ opens AMQP 1.0 (plugin rabbitmq_amqp1_0, on the AMQP port that also serves 0-9-1),
STOMP (rabbitmq_stomp) and MQTT (rabbitmq_mqtt), each when the scenario asks for it and the
plugin is installed; clients log in as guest/guest (the launcher's ``loopback_users = none``).
Mosquitto opens MQTT only, anonymous.
"""

from __future__ import annotations

import re
from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.base import DestinationCounters, SubscriptionCounters, TargetUnavailable
from conformance.targets.mosquitto import MosquittoNotInstalled, MosquittoProcess, MosquittoStartError, mosquitto_available
from conformance.targets.rabbitmq import PLUGINS, RabbitMQNotInstalled, RabbitMQProcess, RabbitMQStartError, rabbitmq_available

__all__ = ["RabbitMQTarget", "MosquittoTarget", "PeerHandle"]

# scenario protocol -> the RabbitMQProcess switch (and PLUGINS key) that opens it
_RABBITMQ_SWITCHES = {"amqp": "amqp10", "stomp": "stomp", "mqtt": "mqtt"}


def _safe_name(name: str, disallowed: str, fallback: str) -> str:
    """The target name as the launcher accepts it (it ends up in node names and file names)."""
    return re.sub(disallowed, "-", name).strip("-") or fallback


class PeerHandle:
    """A running RabbitMQ or Mosquitto broker (implements `BrokerHandle`, without counters)."""

    launch = "process"

    def __init__(self, *, target: str, kind: str, process, scenario: Scenario, ports: dict[str, int],
                 capabilities: frozenset[str], credentials: tuple[str | None, str | None]) -> None:
        self.target = target
        self.kind = kind
        self.process = process
        self.scenario = scenario
        self.host = process.host
        self.ports = ports
        self.capabilities = capabilities
        self.credentials = credentials
        # Per-protocol client options this broker needs (see BrokerHandle.client_options).
        self.client_options: dict[str, dict] = {}
        if kind == "rabbitmq":
            # RabbitMQ reads STOMP's host header as its virtual host (stomp.py sends the IP), and
            # its AMQP 1.0 plugin addresses queues and topics as /queue/X and /topic/X.
            self.client_options = {"stomp": {"vhost": "/"}, "amqp": {"address_style": "rabbitmq"}}

    def config_text(self) -> str:
        try:
            return self.process.config_path.read_text(encoding="utf-8")
        except OSError:
            return self.process.render_config()

    def log_tail(self, lines: int = 80) -> str:
        return self.process.log_tail(lines)

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        raise NotImplementedError(f"{self.target} ({self.kind}) has no counters.subscription capability: "
                                  "mark the test @pytest.mark.requires('counters.subscription')")

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        raise NotImplementedError(f"{self.target} ({self.kind}) has no counters.destination capability: "
                                  "mark the test @pytest.mark.requires('counters.destination')")

    def stop(self) -> None:
        self.process.stop()

    def __repr__(self) -> str:
        return f"<PeerHandle {self.target} {self.process!r}>"


class RabbitMQTarget:
    """RabbitMQ 3.x from the Debian package, one node per scenario (implements `Target`)."""

    kind = "rabbitmq"

    def __init__(self, name: str = "rabbitmq", *, start_timeout: float = 120.0) -> None:
        self.name = name
        self.start_timeout = start_timeout

    def availability(self) -> tuple[bool, str]:
        # The node itself; each protocol plugin is a capability of its own.
        return rabbitmq_available(amqp10=False)

    def capabilities(self) -> frozenset[str]:
        caps = set()
        for protocol, switch in _RABBITMQ_SWITCHES.items():
            if rabbitmq_available(**{"amqp10": False, switch: True})[0]:
                caps.add(f"protocol.{protocol}")
        return frozenset(caps | {"topology.single"})

    def launch_topology(self, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        """One broker, not faultable by the harness (no process.kill)."""
        from conformance.targets.runtime.node import launch_single

        return launch_single(self, topology, scenario, workdir, faultable=False)

    def launch(self, scenario: Scenario, workdir: Path) -> PeerHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        capabilities = self.capabilities()
        wanted = {p for p in scenario.protocols if f"protocol.{p}" in capabilities}
        process = RabbitMQProcess(Path(workdir) / "rabbitmq", name=_safe_name(self.name, r"[^A-Za-z0-9_-]+", "rabbitmq"),
                                  **{switch: protocol in wanted for protocol, switch in _RABBITMQ_SWITCHES.items()})
        try:
            process.start(timeout=self.start_timeout)
        except (RabbitMQNotInstalled, RabbitMQStartError) as e:
            raise TargetUnavailable(f"RabbitMQ ({self.name}) did not start for scenario {scenario.name!r}: {e}") from e
        ports = {}
        if process.amqp10:
            ports["amqp"] = process.amqp_port
        if process.stomp_port:
            ports["stomp"] = process.stomp_port
        if process.mqtt_port:
            ports["mqtt"] = process.mqtt_port
        return PeerHandle(target=self.name, kind=self.kind, process=process, scenario=scenario, ports=ports,
                          capabilities=frozenset(f"protocol.{p}" for p in ports),
                          credentials=(process.user, process.password))

    def __repr__(self) -> str:
        return f"<RabbitMQTarget {self.name} plugins={sorted(PLUGINS.values())}>"


class MosquittoTarget:
    """Eclipse Mosquitto 2.x from the Debian package, one broker per scenario (implements `Target`)."""

    kind = "mosquitto"

    def __init__(self, name: str = "mosquitto", *, start_timeout: float = 30.0) -> None:
        self.name = name
        self.start_timeout = start_timeout

    def availability(self) -> tuple[bool, str]:
        return mosquitto_available()

    def capabilities(self) -> frozenset[str]:
        return frozenset({"protocol.mqtt", "topology.single"})

    def launch_topology(self, topology, scenario: Scenario, workdir: Path, *, bridge_route=None):
        """One broker, not faultable by the harness (no process.kill)."""
        from conformance.targets.runtime.node import launch_single

        return launch_single(self, topology, scenario, workdir, faultable=False)

    def launch(self, scenario: Scenario, workdir: Path) -> PeerHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        if "mqtt" not in scenario.protocols:
            raise TargetUnavailable(f"Mosquitto speaks MQTT only; scenario {scenario.name!r} asks for "
                                    f"{list(scenario.protocols)}")
        process = MosquittoProcess(Path(workdir) / "mosquitto", name=_safe_name(self.name, r"[^A-Za-z0-9_.-]+", "mosquitto"))
        try:
            process.start(timeout=self.start_timeout)
        except (MosquittoNotInstalled, MosquittoStartError) as e:
            raise TargetUnavailable(f"Mosquitto ({self.name}) did not start for scenario {scenario.name!r}: {e}") from e
        return PeerHandle(target=self.name, kind=self.kind, process=process, scenario=scenario,
                          ports={"mqtt": process.mqtt_port}, capabilities=self.capabilities(),
                          credentials=(None, None))

    def __repr__(self) -> str:
        return f"<MosquittoTarget {self.name}>"
