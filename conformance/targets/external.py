"""Brokers that are already running, named in a user's targets file (``--targets-file``, TOML;
the format is in conformance/targets/registry.py). An external broker is never configured by the
harness, so tests needing a scenario's policies are not applicable to it, and its counters cannot
be read."""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from types import MappingProxyType
from pathlib import Path

from conformance.clients.tls import ClientTls
from conformance.scenario import Scenario
from conformance.targets.activemq.policy import ACTIVEMQ_DEAD_LETTER_QUEUE
from conformance.targets.artemis.config import DEAD_LETTER_ADDRESS
from conformance.targets.base import (CAPABILITIES, DestinationCounters, SubscriptionCounters, TargetUnavailable,
                                      UnknownTarget)
from conformance.targets.runtime.node import launch_single
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import Shape

#: Per-protocol adapter options by the broker kind a targets file names: an ActiveMQ Classic
#: broker gets the same AMQP nack outcome as the launched one (ActiveMQHandle.client_options).
CLIENT_OPTIONS_BY_KIND = {"activemq": {"amqp": {"nack_outcome": "rejected"}}}
#: The default dead-letter queue of a broker of that kind (as the launched handles declare it);
#: its owner may have configured another, then the DLQ tests report what they saw.
DEAD_LETTER_QUEUE_BY_KIND = {"activemq": ACTIVEMQ_DEAD_LETTER_QUEUE, "artemis": f"queue://{DEAD_LETTER_ADDRESS}"}


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
    tls: ClientTls | None = None  # the targets file's [target.NAME.tls]: its ports are TLS listeners
    #: the targets file names no plain listener beside a TLS one
    plain_ports: dict[str, int] = field(default_factory=dict)

    @property
    def client_options(self) -> dict[str, dict]:
        """Per-protocol adapter options for this kind of broker (`CLIENT_OPTIONS_BY_KIND`), with
        the targets file's TLS settings for every protocol when it gives them."""
        options = {protocol: dict(values) for protocol, values in CLIENT_OPTIONS_BY_KIND.get(self.kind, {}).items()}
        if self.tls is not None:
            for protocol in self.ports:
                options.setdefault(protocol, {})["tls"] = self.tls
        return options

    @property
    def dead_letter_queue(self) -> str | None:
        return DEAD_LETTER_QUEUE_BY_KIND.get(self.kind)

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
class ExternalTarget(LaunchesByShape):
    name: str
    kind: str
    host: str
    ports: dict[str, int]
    declared: frozenset[str]
    credentials: tuple[str | None, str | None]
    tls: ClientTls | None = None
    launch_mode = "external"  # not a field: running already, started by its owner
    launches_locally = False
    #: no capability depends on an extra install (`Target.capability_requirements`)
    capability_requirements = MappingProxyType({})

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def why_missing(self, capability: str) -> str | None:
        return f"not declared for {self.name} in its targets file (a port, or capabilities = [...])"

    def capabilities(self) -> frozenset[str]:
        return self.declared | {f"protocol.{p}" for p in self.ports} | ({"tls"} if self.tls else set())

    def topology_launches(self) -> dict[Shape, ShapeLaunch]:
        """The running broker as a topology of one node; never ours to fault. Its capabilities are
        what its targets file declares (its owner vouches for them), not read from this table."""
        return {Shape.SINGLE: ShapeLaunch(self._launch_single)}

    def _launch_single(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        return launch_single(self, topology, scenario, workdir, faultable=False)

    def launch(self, scenario: Scenario, workdir: Path) -> ExternalHandle:
        return ExternalHandle(self.name, self.kind, self.host, dict(self.ports), self.capabilities(), scenario,
                              self.credentials, tls=self.tls)


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
        allowed = {"kind", "host", "stomp", "mqtt", "amqp", "login", "passcode", "capabilities", "tls"}
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
        tls = _client_tls(raw["tls"], where, Path(path).parent) if "tls" in raw else None
        targets[name] = ExternalTarget(name, raw.get("kind", "external"), raw.get("host", "127.0.0.1"), ports,
                                       declared - {"scenario.policies", "counters.subscription",
                                                   "counters.destination", "process.kill", "tls"},
                                       (raw.get("login"), raw.get("passcode")), tls=tls)
    return targets


#: keys of a targets file's ``[target.NAME.tls]`` table (conformance/clients/tls.py ClientTls)
TLS_KEYS = ("ca_file", "cert_file", "key_file", "server_name")


def _client_tls(raw: object, where: str, base: Path) -> ClientTls:
    """``tls = { ca_file = "ca.pem", cert_file = ..., key_file = ..., server_name = ... }``: every port of
    the target is a TLS listener; files relative to the targets file, each checked to exist."""
    if not isinstance(raw, dict):
        raise UnknownTarget(f"{where}: tls must be a table like {{ ca_file = \"ca.pem\" }}, not {raw!r}")
    unknown = sorted(set(raw) - set(TLS_KEYS))
    if unknown:
        hint = difflib.get_close_matches(unknown[0], TLS_KEYS, n=1)
        raise UnknownTarget(f"{where}: unknown key tls.{unknown[0]}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
    if "ca_file" not in raw:
        raise UnknownTarget(f"{where}: tls needs ca_file (the CA the broker's certificate chains to)")
    files = {}
    for key in ("ca_file", "cert_file", "key_file"):
        if key in raw:
            file = (base / str(raw[key])).resolve()
            if not file.is_file():
                raise UnknownTarget(f"{where}: tls.{key}: no such file {file}")
            files[key] = file
    try:
        return ClientTls(**files, server_name=raw.get("server_name"))
    except ValueError as exc:
        raise UnknownTarget(f"{where}: tls: {exc}") from None
