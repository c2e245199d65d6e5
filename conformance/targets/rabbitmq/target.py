"""RabbitMQ as a conformance target: a protocol-level peer only.

It runs from its Debian package through the launcher in `process.py` (private work directory,
loopback ports). A scenario's destination policies, memory limit and users are not applied:
RabbitMQ has no equivalent of ActiveMQ's policy entries, so the target claims no
``scenario.policies`` and suites needing a policy are reported as not applicable. Its handle reads
no counters. It opens AMQP 1.0 (plugin rabbitmq_amqp1_0, on the AMQP port that also serves 0-9-1),
STOMP (rabbitmq_stomp) and MQTT (rabbitmq_mqtt), each when the scenario asks for it and the plugin
is installed; clients log in as guest/guest (the launcher's ``loopback_users = none``).
"""

from __future__ import annotations

from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable
from conformance.targets.rabbitmq.process import (PLUGINS, RabbitMQNotInstalled, RabbitMQProcess, RabbitMQStartError,
                                                   rabbitmq_available)
from conformance.targets.runtime.peer_handle import PeerHandle, PeerTarget, safe_name
from conformance.topology import Shape

#: RabbitMQ reads STOMP's host header as its virtual host (stomp.py sends the IP), and its AMQP
#: 1.0 plugin addresses queues and topics as /queue/X and /topic/X.
CLIENT_OPTIONS = {"stomp": {"vhost": "/"}, "amqp": {"address_style": "rabbitmq"}}

# scenario protocol -> the RabbitMQProcess switch (and PLUGINS key) that opens it
_RABBITMQ_SWITCHES = {"amqp": "amqp10", "stomp": "stomp", "mqtt": "mqtt"}



class RabbitMQTarget(PeerTarget):
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
        return frozenset(caps) | self.topology_capabilities()

    def why_missing(self, capability: str) -> str | None:
        """A protocol whose plugin is not installed says which; other capabilities need nothing more."""
        if Shape.of_capability(capability) is not None:
            return self.why_not_launched(capability)
        switch = _RABBITMQ_SWITCHES.get(capability.removeprefix("protocol.")) if capability.startswith("protocol.") else None
        if switch is None:
            return None
        ok, reason = rabbitmq_available(**{"amqp10": False, switch: True})
        return None if ok else reason

    def launch(self, scenario: Scenario, workdir: Path) -> PeerHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        capabilities = self.capabilities()
        wanted = {p for p in scenario.protocols if f"protocol.{p}" in capabilities}
        process = RabbitMQProcess(Path(workdir) / "rabbitmq", name=safe_name(self.name, r"[^A-Za-z0-9_-]+", "rabbitmq"),
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
                          credentials=(process.user, process.password), client_options=CLIENT_OPTIONS)

    def __repr__(self) -> str:
        return f"<RabbitMQTarget {self.name} plugins={sorted(PLUGINS.values())}>"
