"""The running reference broker, either way it is launched: `InProcessReference` (a `BrokerServer`
on its own asyncio loop in a daemon thread, counters read from the engine) and `ProcessReference`
(``python -m reference_broker``, counters over its HTTP statistics endpoint), and the broker
configuration a scenario becomes (`scenario_config`). Split from target.py so the launch modes
(`reference.launch_modes`) start them without importing the target.

The scenario becomes the broker's own configuration: slow-consumer, memory and redelivery
settings as ActiveMQ-style policy entries, group settings as Artemis-style address settings.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any, Callable

from conformance.scenario import DestinationPolicy, Scenario
from conformance.targets.base import DestinationCounters, SubscriptionCounters, TargetUnavailable
from conformance.targets.reference.process import ReferenceBrokerProcess, ReferenceStartError
from machinery.loop_thread import LoopThread
from conformance.targets.tls_setup import TlsSetup, prepare as prepare_tls
from reference_broker.config import PolicyEntry, build_config
from reference_broker.server import BrokerServer

_START_TIMEOUT = 10.0
#: the reference broker's default dead-letter queue (reference_broker.config.PolicyEntry, ActiveMQ's name)
DEAD_LETTER_QUEUE = f"queue://{PolicyEntry.model_fields['dead_letter_queue'].default}"

CAPABILITIES = frozenset({
    "protocol.stomp", "protocol.mqtt", "protocol.amqp", "scenario.policies",
    "counters.subscription", "counters.destination",
    "groups", "groups.close", "groups.reassign_on_close", "groups.first_key", "groups.rebalance", "groups.buckets",
    "slow_consumer.pending_limit", "slow_consumer.eviction", "memory.limits",
    "durable_subscriptions", "transactions", "selectors", "exclusive_consumers", "consumer_priority",
    "message_priority", "nack", "dead_letter", "expiry",
    "stomp.group_header", "tls",
})  # the topologies it launches: the target's table (`ReferenceTarget.topology_launches`)


# --------------------------------------------------------------------------- scenario -> config


def _policy_entry(policy: DestinationPolicy) -> dict | None:
    entry: dict[str, Any] = {}
    if policy.pending_message_limit is not None:
        entry["pending_message_limit_strategy"] = {"type": "constant", "limit": policy.pending_message_limit}
    if policy.prefetch_rate_multiplier is not None:
        entry["pending_message_limit_strategy"] = {"type": "prefetch_rate",
                                                   "multiplier": policy.prefetch_rate_multiplier}
    if policy.eviction is not None:
        entry["message_eviction_strategy"] = {"type": policy.eviction}
        if policy.eviction == "unique_property":
            entry["message_eviction_strategy"]["property_name"] = policy.eviction_property
    if policy.memory_limit is not None:
        entry["memory_limit"] = policy.memory_limit
    if policy.producer_flow_control is not None:
        entry["producer_flow_control"] = policy.producer_flow_control
    if policy.maximum_redeliveries is not None:
        entry["maximum_redeliveries"] = policy.maximum_redeliveries
    if not entry:
        return None
    return {policy.kind: policy.name, **entry}


def _address_setting(policy: DestinationPolicy) -> dict | None:
    setting: dict[str, Any] = {}
    if policy.group_buckets is not None:
        setting["default_group_buckets"] = policy.group_buckets
    if policy.group_rebalance is not None:
        setting["default_group_rebalance"] = policy.group_rebalance
    if policy.group_first_key is not None:
        setting["default_group_first_key"] = policy.group_first_key
    return {"match": policy.name, **setting} if setting else None


def scenario_config(scenario: Scenario, name: str = "reference") -> dict:
    """The reference broker's configuration (as `build_config` input) for ``scenario``; listener
    addresses use port 0 so the OS picks free loopback ports."""
    config: dict[str, Any] = {"name": name, "stomp": None, "http": None}
    for protocol in scenario.protocols:
        config[protocol] = "127.0.0.1:0"
    config["policy_entries"] = [e for e in map(_policy_entry, scenario.policies) if e]
    config["address_settings"] = [s for s in map(_address_setting, scenario.policies) if s]
    if scenario.memory_limit is not None:
        config["system_usage"] = {"memory_limit": scenario.memory_limit}
    if scenario.users:
        config["security"] = {"users": [{"name": u, "password": p} for u, p in scenario.users],
                              "allow_anonymous": False}
    # Expired messages are swept often so expiry tests need not wait the default second.
    config["expiry_check_period_ms"] = 100
    return config


def tls_listeners(tls: TlsSetup, protocols: tuple[str, ...]) -> dict:
    """A TLS listener beside each plain one (``stomp_ssl``...), on a free loopback port; a client
    certificate is checked against the run's CA when one is presented."""
    listener = {"address": "127.0.0.1:0", "tls_cert_file": str(tls.pki.server_cert),
                "tls_key_file": str(tls.pki.server_key), "tls_ca_file": str(tls.pki.ca_cert)}
    return {f"{protocol}_ssl": dict(listener) for protocol in protocols}


# --------------------------------------------------------------------------- counters


def _subscription_counters(stats: dict, destination: str) -> list[SubscriptionCounters]:
    return [
        SubscriptionCounters(destination=s["destination"], matched=s.get("matched", 0),
                             discarded=s.get("discarded", 0), dispatched=s.get("dispatched", 0),
                             pending=s.get("pending", s.get("matched", 0)), raw=s)
        for s in stats["subscriptions"]
        if s.get("destination") == destination and not s.get("durable") and "shared" not in s
    ]


def _destination_counters(stats: dict, destination: str) -> DestinationCounters | None:
    kind = destination.partition("://")[0]
    for entry in stats["queues" if kind == "queue" else "topics"]:
        if entry.get("name") == destination:
            consumers = entry.get("consumers")
            if consumers is None:  # topics: count the subscriptions on it
                consumers = len(_subscription_counters(stats, destination))
            elif isinstance(consumers, list):
                consumers = len(consumers)
            return DestinationCounters(
                destination=destination, enqueued=entry.get("enqueued", 0), dequeued=entry.get("dequeued", 0),
                consumers=consumers, memory_usage=entry.get("memory_usage", 0),
                memory_limit=entry.get("memory_limit", 0), raw=entry)
    return None


class _LogBuffer(logging.Handler):
    """Keeps the in-process broker's log lines (reference_broker.*) for evidence."""

    def __init__(self, lines: int = 2000) -> None:
        super().__init__(logging.DEBUG)
        self.lines: deque[str] = deque(maxlen=lines)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


# --------------------------------------------------------------------------- handles


class InProcessReference:
    """A reference broker served by its own event loop in a daemon thread of this process."""

    kind = "reference"
    launch = "in-process"

    def __init__(self, scenario: Scenario, target: str = "reference", workdir: Path | None = None) -> None:
        self.target = target
        self.scenario = scenario
        self.host = "127.0.0.1"
        self.capabilities = CAPABILITIES | {"groups.reset"}
        self.credentials = scenario.users[0] if scenario.users else (None, None)
        self.client_options: dict[str, dict] = {}
        self.dead_letter_queue = DEAD_LETTER_QUEUE
        self._config = scenario_config(scenario, name=f"{target}-{scenario.name}")
        self.tls = prepare_tls(scenario, workdir) if workdir is not None else None
        if scenario.tls and self.tls is None:
            raise ValueError("a TLS scenario needs a work directory for its certificates")
        if self.tls is not None:
            self._config.update(tls_listeners(self.tls, scenario.protocols))
            self.client_options = self.tls.client_options()
        self.config = build_config(self._config)
        self._log = _LogBuffer()
        self._logger = logging.getLogger("reference_broker")
        self._logger.addHandler(self._log)
        if self._logger.level == logging.NOTSET or self._logger.level > logging.INFO:
            self._logger.setLevel(logging.INFO)
        self._loop = LoopThread(f"reference-{scenario.name}")
        self.server = self.call(lambda: BrokerServer(self.config))
        self._loop.run(self.server.start(), _START_TIMEOUT)
        self.ports: dict[str, int] = {}
        for protocol in ("stomp", "mqtt", "amqp"):
            bound = getattr(self.server, f"{protocol}_address")
            if bound:
                self.ports[protocol] = bound[1]
        # with TLS, clients use the TLS listeners; the plain ones stay open beside them
        self.plain_ports = dict(self.ports) if self.tls is not None else {}
        if self.tls is not None:
            self.ports = {option.removesuffix("_ssl"): bound[1] for option, bound in self.server.tls_addresses.items()}
        self._stopped = False

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn()`` on the broker's loop thread (the engine is single-threaded)."""
        return self._loop.call(fn, timeout)

    def stats(self) -> dict:
        return self.call(self.server.broker.stats)

    def reset_all_groups(self, destination: str) -> None:
        """The queue's resetAllGroups management operation (its engine's `reset_groups`)."""
        def reset():
            queue = self.server.broker.queues.get(destination)
            if queue is None:
                raise KeyError(f"no queue {destination} on the reference broker")
            queue.reset_groups()
        self.call(reset)

    def config_text(self) -> str:
        return "# reference broker configuration (JSON form of its TOML model)\n" + json.dumps(self._config, indent=2)

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(list(self._log.lines)[-lines:])

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        return _subscription_counters(self.stats(), destination)

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        return _destination_counters(self.stats(), destination)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._loop.run(self.server.stop(), _START_TIMEOUT)
        finally:
            self._loop.stop(_START_TIMEOUT)
            self._logger.removeHandler(self._log)

    def __repr__(self) -> str:
        return f"<reference in-process {self.scenario.name} ports={self.ports}>"


class ProcessReference:
    """``python -m reference_broker`` in its own process (kill / restart tests)."""

    kind = "reference"
    launch = "process"

    def __init__(self, scenario: Scenario, workdir: Path, target: str = "reference") -> None:
        self.target = target
        self.scenario = scenario
        self.host = "127.0.0.1"
        self.capabilities = CAPABILITIES | {"process.kill"}
        self.credentials = scenario.users[0] if scenario.users else (None, None)
        self.client_options: dict[str, dict] = {}
        self.dead_letter_queue = DEAD_LETTER_QUEUE
        workdir.mkdir(parents=True, exist_ok=True)
        config = scenario_config(scenario, name=f"{target}-{scenario.name}")
        # The process launcher passes the listeners as flags (keeping ports across restarts).
        for key in ("stomp", "mqtt", "amqp", "http"):
            config.pop(key, None)
        self.tls = prepare_tls(scenario, workdir)
        if self.tls is not None:
            # the files here, the addresses as flags (ReferenceBrokerProcess keeps the ports)
            config.update(tls_listeners(self.tls, scenario.protocols))
            self.client_options = self.tls.client_options()
        self.plain_ports: dict[str, int] = {}
        config["store"] = {"kind": "journal", "sync": "always"}
        self._config = config
        self.config_file = workdir / "broker.json"
        self.config_file.write_text(json.dumps(config, indent=2))
        self.process = ReferenceBrokerProcess(
            name=config["name"], config_file=self.config_file, data_dir=workdir / "data",
            mqtt="mqtt" in scenario.protocols, amqp="amqp" in scenario.protocols,
            tls_listeners=[f"{p}_ssl" for p in scenario.protocols] if self.tls is not None else ())
        self.ports: dict[str, int] = {}
        self.start()

    def start(self) -> None:
        try:
            self.process.start()
        except ReferenceStartError as exc:
            raise TargetUnavailable(str(exc)) from None
        self.ports = {p: getattr(self.process, f"{p}_port") for p in ("stomp", "mqtt", "amqp")
                      if getattr(self.process, f"{p}_port")}
        if self.tls is not None:
            self.plain_ports = self.ports
            self.ports = {option.removesuffix("_ssl"): port for option, port in self.process.tls_ports.items()}

    def kill(self) -> None:
        self.process.kill()

    def stats(self) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.process.http_port}/stats")
        user, password = self.credentials
        if user is not None:
            # With users configured the statistics need one of them (reference_broker/listeners/http.py).
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    def config_text(self) -> str:
        return self.config_file.read_text()

    def log_tail(self, lines: int = 80) -> str:
        return self.process.log_tail(lines)

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        return _subscription_counters(self.stats(), destination)

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        return _destination_counters(self.stats(), destination)

    def stop(self) -> None:
        self.process.stop()

