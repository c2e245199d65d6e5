"""ActiveMQ Classic 5.17 (Debian package) as a conformance target.

`ActiveMQTarget.launch` turns the suite's `Scenario` into activemq.xml (`activemq.policy.render`),
starts the JVM with `ActiveMQProcess` (loopback ports, private work directory, JMX on) and hands
back an `ActiveMQHandle`. The handle reads the counters a suite checks from the broker's own
MBeans, the numbers an operator would see in a JMX console (slow-consumer document, "Monitoring
the Status of Slow Consumers"):

* ``subscription_counters("topic://X")``: one entry per non-durable subscription MBean on X
  (``TopicSubscriptionView``): ``DiscardedCount`` -> discarded; ``PendingQueueSize`` -> matched
  and pending (TopicSubscription.getPendingQueueSize returns ``matched()``, the messages waiting
  beyond the prefetch; the MBean has no attribute literally named "Matched"); ``DispatchedCounter``
  -> dispatched. Everything else read is kept in ``raw``.
* ``destination_counters("queue://X" | "topic://X")``: ``EnqueueCount``, ``DequeueCount``,
  ``ConsumerCount``, ``MemoryUsageByteCount``, ``MemoryLimit`` of the DestinationView MBean.

Queries go through one long-running Java helper per handle (`conformance.targets.activemq.jmx`): the first
query starts it (about 1 s: the source launcher compiles it, then it connects), later ones take a
JMX round trip (measured here, 2 cores: 5-30 ms for the attributes below, up to about 130 ms for
every attribute of every MBean). ``handle.jmx_timing`` keeps the numbers.

Launch modes (issue 8): ``launch="process"`` runs the JVM on this machine (`ActiveMQProcess`),
``launch="container"`` runs the same activemq.xml in the ``brokerconf/activemq-classic`` image
(`conformance.targets.activemq.container.ActiveMQContainer`, same interface: published loopback
ports, JMX through a published port), and ``launch="auto"`` (plain ``activemq``) takes the local
process when the Debian package is installed, else the container. The handle says which ran
(``handle.launch``), and the plugin records it in the matrix. Whatever differs between the two is
asked of the resolved mode's object (`conformance.targets.activemq.launch_modes`).

AMQP: Debian does not package ActiveMQ's AMQP transport (activemq-amqp). When
`conformance.targets.activemq.amqp` has fetched the pinned jars into ``.tools/`` (`brokerconf
targets install activemq-amqp`; they must match the installed broker's version), the local process
gets an ``amqp://`` connector and the target ``protocol.amqp``; the container image has no AMQP
(`why_missing` says which of these is missing).

Not offered: Artemis-only group features (group rebalance, group-first-key).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Callable

from conformance.scenario import Scenario
from conformance.targets.activemq.launch_modes import LAUNCHES, ActiveMQContainerLaunch, ActiveMQProcessLaunch
from conformance.targets.activemq.process import (
    ActiveMQNotInstalled,
    ActiveMQProcess,
    ActiveMQStartError,
    activemq_available,
)
from conformance.targets.activemq.policy import ACTIVEMQ_DEAD_LETTER_QUEUE, ActiveMQConfig, UnsupportedPolicy, render
from conformance.targets.activemq.mbeans import _split_destination, destination_pattern, subscription_pattern
from conformance.targets.activemq.shared_store import SharedStoreGroup
from conformance.targets.base import DestinationCounters, SubscriptionCounters, TargetUnavailable
from machinery.docker_env import ACTIVEMQ_IMAGE, DockerUnavailable, container_target_available
from conformance.targets.activemq.jmx import JmxClient, JmxError, MBean, QueryTiming
from conformance.targets.activemq.network import ActiveMQNetwork
from conformance.targets.activemq.rigs import DiscoveryPair
from conformance.targets.activemq.rigs import HostPairRig, MasterSlaveRig, StaticFanRig
from conformance.targets.activemq.node import ActiveMQNode
from conformance.targets.runtime.node import launch_single
from conformance.targets.runtime.launch_choice import LaunchedByMode, check_requested, choose_launch, requirement_of
from conformance.targets.runtime.evidence import ProcessEvidence
from conformance.targets.tls_setup import prepare as prepare_tls
from conformance.targets.runtime.shape_launch import LaunchesByShape, ShapeLaunch
from conformance.topology import Shape

__all__ = ["ActiveMQTarget", "ActiveMQHandle", "LAUNCH_MODES", "subscription_pattern", "destination_pattern"]

#: how an ActiveMQTarget may run its broker; "auto" resolves to one of the other two
LAUNCH_MODES = ("auto", "process", "container")

_FEATURES = frozenset({
    "scenario.policies",
    "counters.subscription",
    "counters.destination",
    "groups",
    "groups.close",
    "groups.reassign_on_close",
    "groups.buckets",
    "slow_consumer.pending_limit",
    "slow_consumer.eviction",
    "memory.limits",
    "durable_subscriptions",
    "transactions",
    "selectors",
    "exclusive_consumers",
    "consumer_priority",
    "message_priority",
    "nack",
    "dead_letter",
    "expiry",
    "process.kill",
})  # the topologies it launches: its table (`ActiveMQTarget.topology_launches`)

SUBSCRIPTION_ATTRIBUTES = (
    "DiscardedCount", "PendingQueueSize", "DispatchedCounter", "DispatchedQueueSize", "EnqueueCounter",
    "DequeueCounter", "MessageCountAwaitingAcknowledge", "MaximumPendingMessageLimit", "MaximumPendingQueueSize",
    "PrefetchSize", "SlowConsumer", "Durable", "Active", "ClientId", "ConnectionId", "SubscriptionId",
    "Selector", "DestinationName",
)
DESTINATION_ATTRIBUTES = (
    "EnqueueCount", "DequeueCount", "ConsumerCount", "MemoryUsageByteCount", "MemoryLimit", "QueueSize",
    "DispatchCount", "InFlightCount", "ExpiredCount", "ProducerCount", "MemoryPercentUsage", "ProducerFlowControl",
)


def _require_attributes(mbean: MBean, names: tuple[str, ...]) -> None:
    # A counter that is not there must not read as 0: that would pass any "nothing discarded" check.
    absent = [n for n in names if mbean.attributes.get(n) is None]
    if absent:
        raise JmxError(f"MBean {mbean.name} has no readable {absent} (attributes it gave: "
                       f"{sorted(mbean.attributes)}); this ActiveMQ version names its counters differently")


def _broker_name(scenario: Scenario) -> str:
    return "brokerconf-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario.name).strip("-") or "scenario")


class ActiveMQHandle(ProcessEvidence):
    """A running ActiveMQ Classic broker for one scenario (implements `BrokerHandle`)."""

    kind = "activemq"
    launch = "process"
    #: the AMQP adapter's nack is a rejected outcome here: ActiveMQ's AMQP transport turns only that
    #: into a poison ack, which the redelivery policy and DLQ act on (conformance.clients.amqp_client)
    client_options = {"amqp": {"nack_outcome": "rejected"}}
    dead_letter_queue = ACTIVEMQ_DEAD_LETTER_QUEUE

    def __init__(self, *, target: str, process: ActiveMQProcess, scenario: Scenario, config: ActiveMQConfig,
                 capabilities: frozenset[str], credentials: tuple[str | None, str | None],
                 mode: ActiveMQProcessLaunch | ActiveMQContainerLaunch = ActiveMQProcessLaunch()) -> None:
        self.target = target
        # how it runs (`launch_modes`): ActiveMQProcess, or ActiveMQContainer (same interface)
        self._mode = mode
        self.launch = mode.name
        self.process = process
        self.scenario = scenario
        self.config = config
        self.capabilities = capabilities
        self.credentials = credentials
        self.host = process.host
        self.tls = getattr(process, "tls", None)
        if self.tls is not None:
            self.client_options = self.tls.client_options(type(self).client_options)
        self.ports: dict[str, int] = {}
        self._refresh_ports()
        self._jmx: JmxClient | None = None
        self._jmx_lock = threading.Lock()

    def _refresh_ports(self) -> None:
        # a restart keeps the ports unless one was taken meanwhile; the dict is updated in place
        self.ports.clear()
        if self.process.stomp:
            self.ports["stomp"] = self.process.stomp_port
        if self.process.mqtt and self.process.mqtt_port:
            self.ports["mqtt"] = self.process.mqtt_port
        if getattr(self.process, "amqp", False) and self.process.amqp_port:
            self.ports["amqp"] = self.process.amqp_port
        # Scenario(tls=True): clients use the +ssl connectors; the plain ones stay open beside them
        tls_ports = getattr(self.process, "tls_ports", {})
        self.plain_ports = dict(self.ports) if tls_ports else {}
        if tls_ports:
            self.ports.clear()
            self.ports.update(tls_ports)

    # ----------------------------------------------------------------- evidence
    @property
    def pid(self) -> int | None:
        """The broker JVM's PID; None in a container (signal it through the container, not a host PID)."""
        return self._mode.handle_pid(self.process)

    @property
    def jmx_timing(self) -> QueryTiming | None:
        return self._jmx.timing if self._jmx else None

    @property
    def jmx_helper_pid(self) -> int | None:
        """PID of the JMX helper JVM, once a counter has been read (None before / after stop)."""
        return self._jmx.pid if self._jmx else None

    # ----------------------------------------------------------------- counters
    def _client(self) -> JmxClient:
        if not self.process.running:
            raise JmxError(f"ActiveMQ ({self.target}) is not running; its counters cannot be read. "
                           f"Log tail:\n{self.log_tail(20)}")
        with self._jmx_lock:
            if self._jmx is None:
                self._jmx = JmxClient(self.process.jmx_url, log_path=self.process.workdir / "jmx-helper.log")
            return self._jmx

    def mbeans(self, pattern: str, attributes: tuple[str, ...] | str = "*"):
        """Raw access: attributes of every MBean matching an ObjectName pattern on this broker."""
        return self._client().query(pattern, list(attributes) if not isinstance(attributes, str) else attributes)

    def subscription_counters(self, destination: str) -> list[SubscriptionCounters]:
        kind, _ = _split_destination(destination)
        if kind != "topic":
            raise ValueError(f"subscription counters are kept for topic subscriptions; {destination!r} is a queue")
        found = self.mbeans(subscription_pattern(self.process.name, destination), SUBSCRIPTION_ATTRIBUTES)
        counters = []
        for mbean in found:
            a = mbean.attributes
            if a.get("Durable"):
                continue  # durable subscriptions have their own view and no discard counter
            _require_attributes(mbean, ("DiscardedCount", "PendingQueueSize", "DispatchedCounter"))
            counters.append(SubscriptionCounters(
                destination=destination,
                matched=int(a["PendingQueueSize"]),
                discarded=int(a["DiscardedCount"]),
                dispatched=int(a["DispatchedCounter"]),
                pending=int(a["PendingQueueSize"]),
                raw={"mbean": mbean.name, **a},
            ))
        return counters

    def destination_counters(self, destination: str) -> DestinationCounters | None:
        found = self.mbeans(destination_pattern(self.process.name, destination), DESTINATION_ATTRIBUTES)
        if not found:
            return None
        a = found[0].attributes
        _require_attributes(found[0], DESTINATION_ATTRIBUTES[:5])
        return DestinationCounters(
            destination=destination,
            enqueued=int(a["EnqueueCount"]),
            dequeued=int(a["DequeueCount"]),
            consumers=int(a["ConsumerCount"]),
            memory_usage=int(a["MemoryUsageByteCount"]),
            memory_limit=int(a["MemoryLimit"]),
            raw={"mbean": found[0].name, **a},
        )

    # ----------------------------------------------------------------- lifecycle
    def _close_jmx(self) -> None:
        with self._jmx_lock:
            if self._jmx is not None:
                self._jmx.close()
                self._jmx = None

    def kill(self) -> None:
        """SIGKILL the broker JVM's process group (a crash); `restart()` brings it back on the same ports."""
        self._close_jmx()
        self.process.kill()

    def restart(self, timeout: float = 60) -> None:
        """Start the broker again (same configuration and ports unless one was taken meanwhile)."""
        self._close_jmx()
        if self.process.running:
            self.process.stop()
        try:
            self.process.start(timeout=timeout)
        except (ActiveMQNotInstalled, ActiveMQStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"ActiveMQ ({self.target}) did not come back: {e}") from e
        self._refresh_ports()

    def stop(self) -> None:
        self._close_jmx()
        self.process.stop()

    def __repr__(self) -> str:
        return f"<ActiveMQHandle {self.target} {self.process!r}>"


class ActiveMQTarget(LaunchesByShape, LaunchedByMode):
    """ActiveMQ Classic 5.17, one broker per scenario (implements `Target`): a local JVM from the
    Debian package (``launch="process"``), the same configuration in the brokerconf image
    (``launch="container"``), or whichever of the two can run here (``launch="auto"``, the
    process first: it starts faster and needs no engine).

    ``process_check`` / ``container_check`` return ``(ok, reason)``; they default to the package
    check and docker_env's engine/permission/image check, and tests hand in fakes."""

    kind = "activemq"

    def __init__(self, name: str = "activemq", *, launch: str = "process", jvm_heap_mb: int = 512,
                 start_timeout: float = 60.0, image: str = ACTIVEMQ_IMAGE,
                 process_check: Callable[[], tuple[bool, str]] | None = None,
                 container_check: Callable[[], tuple[bool, str]] | None = None) -> None:
        self.name = name
        self.launch_requested = check_requested(launch, LAUNCH_MODES)
        self.jvm_heap_mb = jvm_heap_mb
        self.start_timeout = start_timeout
        self.image = image
        self._process_check = process_check or activemq_available
        self._container_check = container_check or (lambda: container_target_available(self.image))
        self._resolved: tuple[str, bool, str] | None = None
        self._mode: ActiveMQProcessLaunch | ActiveMQContainerLaunch | None = None

    def _resolve(self) -> tuple[str, bool, str]:
        """(mode, ok, reason), computed once: the checks ask dpkg / the Docker engine."""
        if self._resolved is None:
            self._resolved = choose_launch(
                self.launch_requested, self._process_check, self._container_check,
                lambda reason, c_reason: f"no local ActiveMQ ({reason}) and no container ({c_reason})")
        return self._resolved

    @property
    def mode(self) -> ActiveMQProcessLaunch | ActiveMQContainerLaunch:
        """The resolved mode's object (`launch_modes`): everything that differs between a local JVM
        and a container is asked of it."""
        if self._mode is None:
            self._mode = LAUNCHES[self._resolve()[0]](self.image)
        return self._mode

    def availability(self) -> tuple[bool, str]:
        _, ok, reason = self._resolve()
        return ok, reason

    @property
    def requirement(self) -> str:
        """What this target needs from the machine, in conformance.requirements' names: a forced
        container needs the Docker engine and image; otherwise the Debian package (``auto`` falls
        back to a container, but the package is what a machine is expected to provide)."""
        return requirement_of(self.launch_requested, "activemq")

    @property
    def capability_requirements(self) -> dict[str, str]:
        """Capabilities that a BROKERCONF_REQUIRE name stands for (the plugin fails instead of
        skipping when such a one is required and missing); the image never has AMQP."""
        return {**self.mode.capability_requirements, **self.shape_requirements()}

    def capabilities(self) -> frozenset[str]:
        caps = {"protocol.stomp", *_FEATURES}
        if self.mode.mqtt_available()[0]:
            caps.add("protocol.mqtt")
        if self.mode.amqp_available()[0]:
            caps.add("protocol.amqp")
        return frozenset(self.mode.capabilities(caps)) | self.topology_capabilities()

    def why_missing(self, capability: str) -> str | None:
        """Why this target lacks ``capability`` (shown in the not-applicable reason)."""
        if Shape.of_capability(capability) is not None:
            return self.why_not_launched(capability)
        if capability == "protocol.amqp":
            return self.mode.amqp_available()[1] or None
        if capability == "protocol.mqtt":
            return self.mode.mqtt_available()[1]
        if capability == "stomp.group_header":
            # ActiveMQ "Stomp" page, "Stomp Extensions for JMS Message Semantics": JMSXGroupID is a
            # header of SEND frames; MESSAGE frames get the standard headers and the message's
            # properties (FrameTranslator.Helper.copyStandardHeadersFromMessageToFrame), and the
            # group id is neither, so even a STOMP-sent group id does not come back (measured, 5.17.2;
            # tests/conformance/test_clients.py keeps that as a strict xfail, AMQ-7395)
            return ("ActiveMQ Classic's STOMP MESSAGE frames carry no JMSXGroupID header (its STOMP page lists it "
                    "for SEND only; AMQ-7395)")
        if capability in ("groups.rebalance", "groups.first_key"):
            return "an Artemis address setting with no ActiveMQ Classic equivalent"
        return self.mode.why_missing(capability)

    def launch(self, scenario: Scenario, workdir: Path) -> ActiveMQHandle:
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        try:
            config = render(scenario)
        except UnsupportedPolicy as e:
            raise TargetUnavailable(f"ActiveMQ Classic cannot run scenario {scenario.name!r}: {e}") from e
        capabilities = self.capabilities()
        mqtt = "mqtt" in scenario.protocols and "protocol.mqtt" in capabilities
        amqp = "amqp" in scenario.protocols and "protocol.amqp" in capabilities
        stomp = "stomp" in scenario.protocols
        first_user = scenario.users[0] if scenario.users else None
        if scenario.tls and "tls" not in capabilities:
            raise TargetUnavailable(f"ActiveMQ ({self.name}, {self.launch_mode}) cannot run scenario {scenario.name!r} "
                                    "over TLS: only the local process launcher opens +ssl connectors")
        tls = prepare_tls(scenario, Path(workdir) / "activemq")
        process = self.mode.broker(
            workdir,
            name=_broker_name(scenario),
            stomp=stomp,
            mqtt=mqtt,
            **({"amqp": True} if amqp else {}),  # only the process launcher has an AMQP transport
            openwire=True,  # always on: it keeps a listener (and readiness check) when a scenario opens none
            jvm_heap_mb=self.jvm_heap_mb,
            jmx=True,
            ready_login=first_user,
            **({"tls": tls} if tls is not None else {}),
            **config.process_options(),
        )
        try:
            process.start(timeout=self.mode.start_timeout(self.start_timeout))
        except (ActiveMQNotInstalled, ActiveMQStartError, DockerUnavailable) as e:
            raise TargetUnavailable(f"ActiveMQ ({self.name}, {self.launch_mode}) did not start for scenario "
                                    f"{scenario.name!r}: {e}") from e
        opened = {"stomp": stomp, "mqtt": mqtt, "amqp": amqp}
        # a listener the scenario did not ask for is not there, so neither is its capability
        handle_capabilities = frozenset(c for c in capabilities
                                        if not (c.startswith("protocol.") and not opened.get(c.split(".", 1)[1])))
        return ActiveMQHandle(target=self.name, process=process, scenario=scenario, config=config,
                              capabilities=handle_capabilities,
                              credentials=(first_user[0], first_user[1]) if first_user else (None, None),
                              mode=self.mode)

    def launch_shared_store(self, scenario: Scenario, workdir: Path, *, nodes: int = 2,
                            lock_keep_alive_period_ms: int = 2000,
                            lock_acquire_sleep_interval_ms: int = 1000, jdbc: bool = False,
                            nfs=None, proxied_database: bool = False, jdbc_adapter: str = "direct") -> SharedStoreGroup:
        """A started shared-store master/slave group: node A master, the others slaves.
        Destination policies are not applied to the group.

        Process mode: local JVMs on one KahaDB directory (`activemq.shared_store.SharedStoreGroup`),
        or with ``jdbc`` on one PostgreSQL database (a private server the group stops with itself).
        Container mode: one container per node, the KahaDB directory on a named Docker volume
        mounted into each (`activemq.container_network.SharedVolumePair`); same node interface,
        so the chaos harness kills and restarts either the same way."""
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        if scenario.policies:
            raise TargetUnavailable("the shared-store group takes no destination policies yet "
                                    f"(scenario {scenario.name!r} has {len(scenario.policies)})")
        options = dict(nodes=nodes, lock_keep_alive_period_ms=lock_keep_alive_period_ms,
                       lock_acquire_sleep_interval_ms=lock_acquire_sleep_interval_ms,
                       stomp="stomp" in scenario.protocols,
                       mqtt="mqtt" in scenario.protocols and "protocol.mqtt" in self.capabilities(),
                       broker_name=_broker_name(scenario))
        if "amqp" in scenario.protocols and "protocol.amqp" in self.capabilities():
            options["amqp"] = True  # process mode only: the image has no AMQP transport
        group = self.mode.shared_store_group(workdir, jvm_heap_mb=self.jvm_heap_mb, jdbc=jdbc, nfs=nfs,
                                             proxied_database=proxied_database, jdbc_adapter=jdbc_adapter, **options)
        try:
            group.start(timeout=self.mode.group_start_timeout(self.start_timeout))
        except (ActiveMQNotInstalled, ActiveMQStartError, DockerUnavailable, RuntimeError) as e:
            raise TargetUnavailable(f"ActiveMQ ({self.name}, {self.launch_mode}) shared-store group did not "
                                    f"start: {e}") from e
        return group

    def topology_launches(self) -> dict[Shape, ShapeLaunch]:
        """One broker, a shared-store group (local JVMs on one KahaDB directory, or containers on
        one volume), a JDBC group on one database (local JVMs, where the JDBC jars and PostgreSQL
        are installed), or a network of local JVMs (`ActiveMQNetwork`; not in container mode)."""
        return {Shape.SINGLE: ShapeLaunch(self._launch_single),
                Shape.SHARED_STORE: ShapeLaunch(self._launch_store_group),
                Shape.JDBC_STORE: ShapeLaunch(self._launch_store_group, self.mode.jdbc_available,
                                              self.mode.jdbc_requirement),
                Shape.NETWORK: ShapeLaunch(self._launch_network, self.mode.network_available)}

    def _launch_single(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        return launch_single(self, topology, scenario, workdir, faultable=True, node_type=ActiveMQNode)

    def _launch_store_group(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        store = topology.shared_store
        return self.launch_shared_store(scenario, workdir, nodes=len(topology.nodes),
                                        lock_keep_alive_period_ms=store.lock_keep_alive_period_ms,
                                        lock_acquire_sleep_interval_ms=store.lock_acquire_sleep_interval_ms,
                                        jdbc=store.kind == "jdbc", nfs=store.nfs,
                                        proxied_database=store.proxied_database, jdbc_adapter=store.jdbc_adapter)

    def _launch_network(self, topology, scenario: Scenario, workdir: Path, bridge_route=None):
        ok, reason = self.availability()
        if not ok:
            raise TargetUnavailable(reason)
        network = ActiveMQNetwork(Path(workdir), topology.nodes, topology.bridges, prefix=topology.prefix,
                                  policies=topology.policies, bridge_route=bridge_route,
                                  broker_attributes=topology.broker_attributes or None,
                                  composites=topology.composites, users=topology.users or None,
                                  topology=topology, persistent=topology.persistent)
        network.start()
        return network

    def discovery_pair(self, workdir: Path, group: str):
        """Two unstarted brokers that find each other by multicast discovery in ``group`` (activemq_rigs.DiscoveryPair)."""

        return DiscoveryPair(workdir, group)

    def masterslave_rig(self, workdir: Path, reconnect: dict):
        """A master/slave pair M, S and a broker F bridging to it through a ``masterslave:``
        connector with the ``reconnect`` options (activemq_rigs.MasterSlaveRig), unstarted."""

        return MasterSlaveRig(workdir, reconnect)

    def static_fan_rig(self, workdir: Path, reconnect: dict):
        """Two independent brokers M, S and a broker F with one plain ``static:(M, S)`` connector
        with the ``reconnect`` options (rigs.StaticFanRig), unstarted."""

        return StaticFanRig(workdir, reconnect)

    def host_pair_rig(self, workdir: Path, reconnect: dict):
        """Two master/slave groups over two hosts, networked by masterslave: connectors
        (activemq_rigs.HostPairRig), unstarted."""

        return HostPairRig(workdir, reconnect)

    def __repr__(self) -> str:
        return f"<ActiveMQTarget {self.name} launch={self.launch_requested}>"
