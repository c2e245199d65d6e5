"""The target and handle of a broker that is a protocol-level peer only (RabbitMQ, Mosquitto): a process of
one of their launchers, its ports and config, no counters (no ``counters.*`` capability). The
targets live in their brokers' folders (conformance/targets/rabbitmq/target.py,
conformance/targets/mosquitto/target.py)."""

from __future__ import annotations

import re

from conformance.scenario import Scenario
from conformance.targets.base import DestinationCounters, SubscriptionCounters
from conformance.targets.runtime.node import launch_single
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import Shape
from conformance.targets.runtime.evidence import ProcessEvidence

__all__ = ["PeerHandle", "PeerTarget", "safe_name"]


def safe_name(name: str, disallowed: str, fallback: str) -> str:
    """The target name as the launcher accepts it (it ends up in node names and file names)."""
    return re.sub(disallowed, "-", name).strip("-") or fallback


class PeerTarget(LaunchesByShape):
    """What the RabbitMQ and Mosquitto targets share: a local process, no capability that needs an
    extra install, and a topology of one broker the harness does not fault (no process.kill)."""

    launch_mode = "process"
    launches_locally = True
    @property
    def capability_requirements(self) -> dict[str, str]:
        """No feature depends on an extra install (`Target.capability_requirements`); a shape's
        would be its row's."""
        return self.shape_requirements()

    def topology_launches(self) -> dict[Shape, ShapeLaunch]:
        """One broker, not faultable by the harness (no process.kill)."""
        return {Shape.SINGLE: ShapeLaunch(self._launch_single)}

    def _launch_single(self, topology, scenario: Scenario, workdir, bridge_route=None):
        return launch_single(self, topology, scenario, workdir, faultable=False)


class PeerHandle(ProcessEvidence):
    """A running RabbitMQ or Mosquitto broker (implements `BrokerHandle`, without counters)."""

    launch = "process"
    #: RabbitMQ dead-letters only through a dead-letter exchange a queue is declared with, Mosquitto
    #: not at all: neither has a queue of its own to watch (no ``dead_letter`` capability)
    dead_letter_queue = None

    def __init__(self, *, target: str, kind: str, process, scenario: Scenario, ports: dict[str, int],
                 capabilities: frozenset[str], credentials: tuple[str | None, str | None],
                 client_options: dict[str, dict] | None = None) -> None:
        self.target = target
        self.kind = kind
        self.process = process
        self.scenario = scenario
        self.host = process.host
        self.ports = ports
        self.plain_ports: dict[str, int] = {}  # no TLS listeners (no ``tls`` capability)
        self.capabilities = capabilities
        self.credentials = credentials
        # Per-protocol client options this broker needs (see BrokerHandle.client_options).
        self.client_options: dict[str, dict] = dict(client_options or {})

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


