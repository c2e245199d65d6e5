"""Mosquitto as a conformance target: a protocol-level MQTT peer only (anonymous, no counters,
no scenario policies), from its Debian package through the launcher in `process.py`."""

from __future__ import annotations

from pathlib import Path

from conformance.scenario import Scenario
from conformance.targets.base import TargetUnavailable
from conformance.targets.mosquitto.process import (MosquittoNotInstalled, MosquittoProcess, MosquittoStartError,
                                                    mosquitto_available)
from conformance.targets.runtime.peer_handle import PeerHandle, PeerTarget, safe_name
from conformance.topology import Shape


class MosquittoTarget(PeerTarget):
    """Eclipse Mosquitto 2.x from the Debian package, one broker per scenario (implements `Target`)."""

    kind = "mosquitto"

    def __init__(self, name: str = "mosquitto", *, start_timeout: float = 30.0) -> None:
        self.name = name
        self.start_timeout = start_timeout

    def availability(self) -> tuple[bool, str]:
        return mosquitto_available()

    def capabilities(self) -> frozenset[str]:
        return frozenset({"protocol.mqtt"}) | self.topology_capabilities()

    def why_missing(self, capability: str) -> str | None:
        if Shape.of_capability(capability) is not None:
            return self.why_not_launched(capability)
        return None  # the capability's own description says it all

    def launch(self, scenario: Scenario, workdir: Path) -> PeerHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        if "mqtt" not in scenario.protocols:
            raise TargetUnavailable(f"Mosquitto speaks MQTT only; scenario {scenario.name!r} asks for "
                                    f"{list(scenario.protocols)}")
        process = MosquittoProcess(Path(workdir) / "mosquitto", name=safe_name(self.name, r"[^A-Za-z0-9_.-]+", "mosquitto"))
        try:
            process.start(timeout=self.start_timeout)
        except (MosquittoNotInstalled, MosquittoStartError) as e:
            raise TargetUnavailable(f"Mosquitto ({self.name}) did not start for scenario {scenario.name!r}: {e}") from e
        return PeerHandle(target=self.name, kind=self.kind, process=process, scenario=scenario,
                          ports={"mqtt": process.mqtt_port}, capabilities=self.capabilities(),
                          credentials=(None, None))

    def __repr__(self) -> str:
        return f"<MosquittoTarget {self.name}>"
