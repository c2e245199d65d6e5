"""Networks of ActiveMQ Classic brokers: two or three JVMs joined by generated ``<networkConnectors>``.

What ActiveMQ Classic's "Networks of Brokers" page (../shared/spec/activemq-classic-networks-of-brokers.md)
describes, and this launcher sets up on one machine:

* each `Bridge` is one ``<networkConnector uri="static:(tcp://127.0.0.1:PORT)">`` on its source
  broker, pointing at the target broker's OpenWire listener (section "Static discovery");
* its properties come from `NetworkConnectorOptions`, whose fields are the document's
  "NetworkConnector Properties" table in snake_case, plus the static transport's reconnect
  options ("Static discovery" table) as URI query parameters; only the options the scenario set
  are written (the broker's own defaults apply to the rest);
* destination lists (``excluded`` / ``dynamically_included`` / ``statically_included``) take the
  project's canonical names (``queue://X``, ``topic://X``, wildcards allowed as the document's
  last "N.B." says) and become ``<queue physicalName=...>`` / ``<topic physicalName=...>``.

Every broker's ports are picked before any broker starts, so any topology (a line, a duplex pair,
a triangle) renders at once; brokers are then started targets-first, so a connector's first
connection attempt usually finds its peer listening (all start together, in parallel).
`start()` returns once every bridge logged that it is established; `stop()` stops each broker by
its own handle. Demand (a consumer on another broker) reaches a broker asynchronously, so tests
wait for it with `NetworkNode.consumer_count` (the destination MBean's ConsumerCount, network
consumers included) before they produce.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from xml.sax.saxutils import quoteattr

from conformance.deployment import InFlight, Renaming
from conformance.topology import (Cluster, PEER_LIST_SCHEMES, Topology, RECONNECT_URI_OPTIONS, Bridge, BridgeFilterPolicy, BridgeRoute,
                                  CompositeDestination, NetworkConnectorOptions, check_duplex_names, static_uri,
                                  with_connector_renamed)

from conformance.targets.activemq.process import ActiveMQProcess
from conformance.targets.activemq.policy import authentication_plugin_xml
from conformance.targets.activemq.mbeans import destination_pattern, subscription_pattern
from conformance.targets.activemq.jmx import JmxClient
from machinery.process import free_ports
from conformance.targets.activemq.node import ActiveMQNode
from conformance.targets.runtime.evidence import ProcessEvidence
from machinery.waiting import Deadline, poll, wait_until

__all__ = ["Bridge", "check_duplex_names", "PEER_LIST_SCHEMES", "BridgeFilterPolicy", "CompositeDestination", "render_destination_interceptors", "BridgeRoute", "NetworkConnectorOptions", "ActiveMQNetwork", "NetworkNode",
           "NetworkStartError", "established_bridges", "render_network_connector", "render_bridge_filter_policy", "destination_element"]

#: ActiveMQ 5.17 logs this (DemandForwardingBridgeSupport, INFO) on the broker that owns the
#: connector once a bridge is up: "Network connection between vm://A#0 and tcp:///... (B) has been established."
_ESTABLISHED = re.compile(r"Network connection between vm://(?P<local>[^#\s]+)#\S* and \S+ \((?P<remote>[^)]+)\) "
                          r"has been established")


def established_bridges(process) -> list[str]:
    """Names of the remote brokers ActiveMQ broker ``process`` logged an established bridge to
    (one per bridge, each re-establishment counting again)."""
    try:
        text = process.log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [m.group("remote") for m in _ESTABLISHED.finditer(text) if m.group("local") == process.name]


class NetworkStartError(RuntimeError):
    """A broker of the network did not start or a bridge did not come up; the message has the logs."""


class PortTakenError(NetworkStartError):
    """A broker's OpenWire port, already written into its peers' connectors, was taken by another
    process before the broker bound it (`ActiveMQNetwork.start` starts again on fresh ports)."""


# --------------------------------------------------------------------------- the model


#: XML attribute of each scalar option (the document's property names)
_ATTRIBUTES = {
    "name": "name",
    "dynamic_only": "dynamicOnly",
    "decrease_network_consumer_priority": "decreaseNetworkConsumerPriority",
    "network_ttl": "networkTTL",
    "message_ttl": "messageTTL",
    "consumer_ttl": "consumerTTL",
    "conduit_subscriptions": "conduitSubscriptions",
    "use_virtual_dest_subs": "useVirtualDestSubs",
    "duplex": "duplex",
    "prefetch_size": "prefetchSize",
    "suppress_duplicate_queue_subscriptions": "suppressDuplicateQueueSubscriptions",
    "bridge_temp_destinations": "bridgeTempDestinations",
    "always_sync_send": "alwaysSyncSend",
    "static_bridge": "staticBridge",
    "user_name": "userName",
    "password": "password",
    "destination_filter": "destinationFilter",
}
_LISTS = {
    "excluded_destinations": "excludedDestinations",
    "dynamically_included_destinations": "dynamicallyIncludedDestinations",
    "statically_included_destinations": "staticallyIncludedDestinations",
}
assert set(_ATTRIBUTES) | set(_LISTS) | set(RECONNECT_URI_OPTIONS) == set(NetworkConnectorOptions.model_fields)


def _xml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def destination_element(destination: str) -> str:
    """``queue://a.b`` -> ``<queue physicalName="a.b"/>``; ValueError names a malformed destination."""
    kind, sep, name = destination.partition("://")
    if not sep or kind not in ("queue", "topic") or not name:
        raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME (wildcards allowed)")
    return f"<{kind} physicalName={quoteattr(name)}/>"


def render_network_connector(peer_urls: list[str] | tuple[str, ...], options: NetworkConnectorOptions,
                             indent: str = "      ", scheme: str = "static") -> str:
    """One ``<networkConnector>`` element with the properties the scenario set
    (``options.model_fields_set``). An unset property is left out, so ActiveMQ's own default is what
    runs: a statement "X is the default" is checked against the broker, not against a value written
    here (issue 26). That includes ``name``: an unnamed connector gets the broker's default name,
    which NOB-NAME-2 checks.
    ``scheme``: ``static`` (one bridge per peer) or ``masterslave`` (peers are master, slaves)."""
    attributes = [f"uri={quoteattr(static_uri(peer_urls, options, scheme))}"]
    given = options.model_fields_set
    values = {option: getattr(options, option) if option in given else None for option in _ATTRIBUTES}
    if values["network_ttl"] is not None and (values["message_ttl"] is not None or values["consumer_ttl"] is not None):
        # networkTTL's setter sets both TTLs, and Spring applies the attributes in name order
        # (consumerTTL, messageTTL, networkTTL: seen on 5.17, where consumerTTL="2" networkTTL="1"
        # left the consumer TTL at 1). So when networkTTL and either TTL are given, both TTLs are
        # written (the one not given takes networkTTL's value, as the table says) and networkTTL
        # is left out.
        values["message_ttl"] = options.message_ttl if options.message_ttl is not None else options.network_ttl
        values["consumer_ttl"] = options.consumer_ttl if options.consumer_ttl is not None else options.network_ttl
        values["network_ttl"] = None
    for option, attribute in _ATTRIBUTES.items():
        value = values[option]
        if value is not None:
            attributes.append(f"{attribute}={quoteattr(_xml_value(value))}")
    lines = [f"{indent}<networkConnector " + f"\n{indent}    ".join(attributes)]
    children = []
    for option, element in _LISTS.items():
        destinations = getattr(options, option)
        if destinations:
            children.append(f"{indent}  <{element}>")
            children += [f"{indent}    {destination_element(d)}" for d in destinations]
            children.append(f"{indent}  </{element}>")
    if children:
        lines[0] += ">"
        lines += children
        lines.append(f"{indent}</networkConnector>")
    else:
        lines[0] += "/>"
    return "\n".join(lines)


def render_bridge_filter_policy(policy: BridgeFilterPolicy, indent: str = "          ") -> str:
    """The document's ``<policyEntry queue=...><networkBridgeFilterFactory>
    <conditionalNetworkBridgeFilterFactory .../>`` (every attribute written out)."""
    attributes = " ".join(f"{name}={quoteattr(_xml_value(getattr(policy, option)))}" for option, name in (
        ("replay_when_no_consumers", "replayWhenNoConsumers"), ("replay_delay", "replayDelay"),
        ("rate_limit", "rateLimit"), ("rate_duration", "rateDuration")))
    return (f"{indent}<policyEntry queue={quoteattr(policy.queue)}>\n"
            f"{indent}  <networkBridgeFilterFactory>\n"
            f"{indent}    <conditionalNetworkBridgeFilterFactory {attributes}/>\n"
            f"{indent}  </networkBridgeFilterFactory>\n"
            f"{indent}</policyEntry>")


def render_destination_interceptors(composites: tuple[CompositeDestination, ...], indent: str = "    ") -> str:
    """``<destinationInterceptors>`` with the composites. Declaring the interceptor replaces
    ActiveMQ's default one, so the default virtual topic (``VirtualTopic.>``, consumer queues
    ``Consumer.*.``) is declared again beside them."""
    rows = [f'{indent}      <virtualTopic name="VirtualTopic.&gt;" prefix="Consumer.*." selectorAware="false"/>']
    for c in composites:
        element = "compositeTopic" if c.kind == "topic" else "compositeQueue"
        rows.append(f"{indent}      <{element} name={quoteattr(c.name)} forwardOnly={quoteattr(_xml_value(c.forward_only))}>")
        rows.append(f"{indent}        <forwardTo>")
        rows += [f"{indent}          {destination_element(d)}" for d in c.forward_to]
        rows.append(f"{indent}        </forwardTo>")
        rows.append(f"{indent}      </{element}>")
    return (f"{indent}<destinationInterceptors>\n{indent}  <virtualDestinationInterceptor>\n"
            f"{indent}    <virtualDestinations>\n" + "\n".join(rows) + f"\n{indent}    </virtualDestinations>\n"
            f"{indent}  </virtualDestinationInterceptor>\n{indent}</destinationInterceptors>")


# --------------------------------------------------------------------------- one broker


class NetworkNode(ProcessEvidence, ActiveMQNode, InFlight):
    """One ActiveMQ broker of a topology (`Node`): its process, addresses, and the counters tests
    wait on (the destination MBeans over JMX). ``start_options``: the process's ``start`` options
    (a shared-store slave waits for the lock: ``wait_for="lock"``)."""

    def __init__(self, name: str, process: ActiveMQProcess, **start_options) -> None:
        super().__init__(name, process, None, **start_options)
        self._jmx: JmxClient | None = None

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def stomp_port(self) -> int:
        return self.process.stomp_port

    def address(self, protocol: str) -> tuple[str, int]:
        ports = {"stomp": self.process.stomp_port, "openwire": self.process.openwire_port,
                 "mqtt": self.process.mqtt_port or 0,
                 "amqp": getattr(self.process, "amqp_port", 0)}  # a container node has no AMQP
        if not ports.get(protocol):
            raise KeyError(f"node {self.name} has no {protocol} connector")
        return self.host, ports[protocol]

    def serving(self) -> bool:
        return self.process.serving(timeout=0.5)

    def kill(self) -> None:
        self._close_jmx()
        super().kill()

    def _close_jmx(self) -> None:
        if self._jmx is not None:
            self._jmx.close()
            self._jmx = None

    def _client(self) -> JmxClient:
        if not self.process.running:
            raise NetworkStartError(f"broker {self.name} is not running; log tail:\n{self.log_tail(20)}")
        if self._jmx is None:
            self._jmx = JmxClient(self.process.jmx_url, log_path=self.process.workdir / "jmx-helper.log")
        return self._jmx

    def destination_attributes(self, destination: str, attributes: tuple[str, ...] = (
            "ConsumerCount", "EnqueueCount", "DequeueCount", "QueueSize")) -> dict | None:
        """The destination MBean's attributes on this broker; None when the broker does not know it."""
        found = self._client().query(destination_pattern(self.process.name, destination), list(attributes))
        return dict(found[0].attributes) if found else None

    def network_connector_names(self) -> list[str]:
        """The names this broker gives its network connectors (their MBeans' networkConnectorName)."""
        pattern = (f"org.apache.activemq:type=Broker,brokerName={self.process.name},"
                   "connector=networkConnectors,networkConnectorName=*")
        return sorted(m.group(1) for bean in self._client().query(pattern, ["Name"])
                      if (m := re.search(r"networkConnectorName=([^,]+)", bean.name)))

    def consumer_count(self, destination: str) -> int:
        """Consumers of ``destination`` on this broker, local and network (bridge) consumers alike."""
        attributes = self.destination_attributes(destination, ("ConsumerCount",))
        return int(attributes["ConsumerCount"]) if attributes else 0

    def subscribed_destinations(self) -> list[str]:
        """The destination of every consumer on this broker (each consumer MBean's DestinationName,
        a wildcard or composite name as subscribed), advisory topics and network consumers included."""
        pattern = f"org.apache.activemq:type=Broker,brokerName={self.process.name},endpoint=Consumer,*"
        return sorted(str(bean.attributes["DestinationName"]) for bean in self._client().query(pattern, ["DestinationName"]))

    def consumer_priorities(self, destination: str) -> list[int]:
        """The dispatch priority of each consumer of ``destination`` on this broker (local and
        network consumers alike: each consumer MBean's Priority), lowest first."""
        found = self._client().query(subscription_pattern(self.process.name, destination), ["Priority"])
        return sorted(int(bean.attributes["Priority"]) for bean in found)

    def queue_size(self, destination: str) -> int:
        """Messages held on this broker for ``destination`` (0 when it does not exist here)."""
        attributes = self.destination_attributes(destination, ("QueueSize",))
        return int(attributes["QueueSize"]) if attributes else 0

    def in_flight_count(self, destination: str) -> int:
        """Messages of ``destination`` dispatched to its consumers (network consumers included) and
        not yet acknowledged: the destination MBean's InFlightCount (0 when the broker does not know it)."""
        attributes = self.destination_attributes(destination, ("InFlightCount",))
        return int(attributes["InFlightCount"]) if attributes else 0

    def wait_for_consumers(self, destination: str, count: int, timeout: float = 10.0) -> int:
        """Poll until ``destination`` has ``count`` consumers here (demand crosses a bridge
        asynchronously, as an advisory message); returns the last count seen, for the caller's
        assertion message."""
        return poll(lambda: self.consumer_count(destination), lambda seen: seen == count,
                    timeout=timeout, interval=0.1)

    def established_bridges(self) -> list[str]:
        """Names of the remote brokers this broker logged an established bridge to (one per bridge)."""
        return established_bridges(self.process)

    def stop(self) -> None:
        try:
            self._close_jmx()
        finally:
            self.process.stop()


# --------------------------------------------------------------------------- the network


def _advisory_support(attributes: dict[str, str] | None) -> bool:
    """advisorySupport among a broker's attributes ("Configuration Pitfalls"; on unless "false"):
    ActiveMQProcess writes that attribute itself, so it is passed to it as an option."""
    return str((attributes or {}).get("advisorySupport", "true")).lower() != "false"


def _without_advisory_support(attributes: dict[str, str] | None) -> dict[str, str] | None:
    return {k: v for k, v in attributes.items() if k != "advisorySupport"} if attributes else attributes


class ActiveMQNetwork(Cluster, Renaming):
    """Brokers ``names`` (e.g. ``("A", "B", "C")``) joined by ``bridges``; `start()` returns once
    every bridge is established, `stop()` stops every broker. The broker names are the
    ActiveMQ broker names, ``<prefix>-<name>`` (the bridge log lines and MBeans carry them)."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path, names: tuple[str, ...] = ("A", "B"), bridges: tuple[Bridge, ...] = (), *,
                 prefix: str = "nob", jvm_heap_mb: int = 256, memory_limit_mb: int = 96,
                 broker_attributes: dict[str, dict[str, str]] | None = None,
                 policies: tuple[BridgeFilterPolicy, ...] = (), bridge_route: BridgeRoute | None = None,
                 composites: tuple[CompositeDestination, ...] = (),
                 users: dict[str, tuple[tuple[str, str], ...]] | None = None,
                 topology: Topology | None = None, persistent: bool = False) -> None:
        """``users``: broker -> (user name, password) pairs; such a broker gets a
        simpleAuthenticationPlugin with anonymous access off (NOB-AUTH-1), so its clients and the
        connectors that reach it must log in."""
        if not 2 <= len(names) <= 4 or len(set(names)) != len(names):
            raise ValueError(f"a network here has 2 to 4 distinct brokers, not {names!r}")
        self.bridge_route = bridge_route
        self.topology = topology or Topology(tuple(names), tuple(bridges), prefix=prefix)
        check_duplex_names(bridges)
        for bridge in bridges:
            for end in (bridge.source, bridge.target):
                if end not in names:
                    raise ValueError(f"bridge {bridge.source}->{bridge.target} names {end!r}, not one of {names}")
        self.workdir = Path(workdir).absolute()
        self.bridges = tuple(bridges)
        pairs = [(b.source, b.target, b.options.name) for b in self.bridges]
        if len(set(pairs)) != len(pairs):
            raise ValueError("two connectors between the same brokers need different names (the document's "
                             f"'name' property): {pairs}")
        # ActiveMQ's XML makes each connector's name a Spring bean name: two connectors named alike
        # on one broker stop it from starting ("Bean name ... is already used"), whatever their peers.
        by_broker = [(b.source, b.options.name) for b in self.bridges]
        if len(set(by_broker)) != len(by_broker):
            raise ValueError("connectors on one broker need different names (ActiveMQ uses the name as a Spring "
                             f"bean name): {by_broker}")
        extra = broker_attributes or {}
        unknown = set(extra) - set(names)
        if unknown:
            raise ValueError(f"broker_attributes names unknown brokers {sorted(unknown)} (brokers: {names})")
        self.policies = tuple(policies)
        policy_xml = "\n".join(render_bridge_filter_policy(p) for p in self.policies)
        self.composites = tuple(composites)
        interceptors_xml = render_destination_interceptors(self.composites) if self.composites else ""
        self.users = {name: tuple(pairs) for name, pairs in (users or {}).items() if pairs}
        unknown = set(self.users) - set(names)
        if unknown:
            raise ValueError(f"users names unknown brokers {sorted(unknown)} (brokers: {names})")
        self.nodes: dict[str, NetworkNode] = {
            name: NetworkNode(name, ActiveMQProcess(
                self.workdir / name, name=f"{prefix}-{name}", stomp=True, openwire=True, jmx=True,
                jvm_heap_mb=jvm_heap_mb, memory_limit_mb=memory_limit_mb,
                advisory_support=_advisory_support(extra.get(name)),
                broker_attributes=_without_advisory_support(extra.get(name)),
                policy_entries_xml=policy_xml, destination_interceptors_xml=interceptors_xml,
                plugins_xml=authentication_plugin_xml(self.users.get(name, ())),
                ready_login=self.users[name][0] if name in self.users else None, persistent=persistent))
            for name in names
        }

    def __getitem__(self, name: str) -> NetworkNode:
        return self.nodes[name]

    # ----------------------------------------------------------------- configuration
    def _assign_ports(self) -> None:
        # Every port up front: a connector's URI needs its peer's OpenWire port before that peer
        # starts. ActiveMQProcess keeps ports that are already set (start(): keep_ports).
        ports = iter(free_ports(3 * len(self.nodes)))
        for node in self.nodes.values():
            p = node.process
            if not p.openwire_port:
                p.stomp_port, p.openwire_port, p.jmx_port = next(ports), next(ports), next(ports)

    def connectors_xml(self, name: str) -> str:
        """The ``<networkConnector>`` elements of broker ``name`` (ports must be assigned)."""
        return "\n".join(render_network_connector([self.peer_url(b)], b.options)
                         for b in self.bridges if b.source == name)

    def peer_url(self, bridge: Bridge) -> str:
        """The address ``bridge``'s connector dials: the target's OpenWire listener, or where
        ``bridge_route`` sends it (a fault proxy in front of that listener)."""
        peer = self.nodes[bridge.target].process
        host, port = peer.host, peer.openwire_port
        if self.bridge_route is not None:
            host, port = self.bridge_route(bridge, peer.host, peer.openwire_port)
        # another client transport over the same OpenWire listener (NOB-TRANSPORT-1: nio)
        return f"{bridge.transport}://{host}:{port}"

    def start_order(self) -> list[str]:
        """Targets before sources where the bridges allow it (a cycle falls back to name order)."""
        order: list[str] = []
        remaining = list(self.nodes)
        while remaining:
            ready = [n for n in remaining
                     if all(b.target in order for b in self.bridges if b.source == n and b.target in remaining)]
            pick = ready[0] if ready else remaining[0]
            order.append(pick)
            remaining.remove(pick)
        return order

    # ----------------------------------------------------------------- lifecycle
    #: starts on fresh ports after a `PortTakenError` before giving up
    START_ATTEMPTS = 3

    def start(self, timeout: float = 90) -> None:
        """Start every broker at once (JVM start-up dominates; measured here, 2 cores: a pair
        forms in about 7 s in parallel against 11-15 s one after the other), then wait for the
        bridges. A connector whose peer is not listening yet retries after
        ``initial_reconnect_delay`` (1 s by default), so parallel start costs at most that.

        When a port the peers' connectors name was taken before its broker bound it, every
        broker is stopped and the network starts again on fresh ports (at most
        `START_ATTEMPTS` starts within ``timeout``)."""
        deadline = Deadline(timeout)
        for attempt in range(1, self.START_ATTEMPTS + 1):
            try:
                self._start_once(deadline)
                return
            except PortTakenError:
                # _start_once stopped every broker already
                if attempt == self.START_ATTEMPTS or deadline.expired():
                    raise
                self._forget_ports()

    def _forget_ports(self) -> None:
        for node in self.nodes.values():
            p = node.process
            p.stomp_port = p.openwire_port = p.jmx_port = 0

    def _start_once(self, deadline: Deadline) -> None:
        try:
            self._assign_ports()
            for name, node in self.nodes.items():
                node.process.network_connectors_xml = self.connectors_xml(name)
            errors: dict[str, BaseException] = {}

            def start_one(name: str) -> None:
                node = self.nodes[name]
                assigned = node.process.openwire_port
                try:
                    node.process.start(timeout=max(1.0, deadline.remaining()))
                    if node.process.openwire_port != assigned:
                        # start() re-picks ports when one was taken meanwhile: the peers' URIs are stale
                        raise PortTakenError(f"broker {name}'s OpenWire port {assigned} was taken by another "
                                             "process before it started; start the network again")
                except BaseException as exc:  # noqa: BLE001 - reported below with every broker's error
                    errors[name] = exc

            threads = [threading.Thread(target=start_one, args=(name,), name=f"start-{name}")
                       for name in self.start_order()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                error_type = (PortTakenError if all(isinstance(e, PortTakenError) for e in errors.values())
                              else NetworkStartError)
                raise error_type("broker(s) of the network did not start: "
                                 + "; ".join(f"{n}: {e}" for n, e in errors.items()))
            self.wait_for_bridges(max(1.0, deadline.remaining()))
        except BaseException:
            self.stop()
            raise

    def expected_bridges(self) -> dict[str, list[str]]:
        """Broker -> the ActiveMQ names of the brokers its connectors reach (one entry per connector)."""
        expected: dict[str, list[str]] = {name: [] for name in self.nodes}
        for b in self.bridges:
            if b.expect_established:
                expected[b.source].append(self.nodes[b.target].process.name)
        return expected

    def missing_bridges(self) -> dict[str, list[str]]:
        missing = {}
        for name, remotes in self.expected_bridges().items():
            seen = self.nodes[name].established_bridges()
            lacking = [r for r in remotes if r not in seen]
            if lacking:
                missing[name] = lacking
        return missing

    def wait_for_bridges(self, timeout: float = 30) -> None:
        """Until each connector logged its bridge established (a restarted broker logs again)."""
        def missing_while_all_run() -> dict[str, list[str]]:
            missing = self.missing_bridges()
            dead = [n for n, node in self.nodes.items() if not node.running] if missing else []
            if dead:
                raise NetworkStartError(f"broker(s) {dead} exited while the network was forming\n{self.log_tail(30)}")
            return missing

        missing = poll(missing_while_all_run, lambda missing: not missing, timeout=timeout, interval=0.1)
        if missing:
            raise NetworkStartError(f"bridges not established within {timeout:.0f} s: {missing} "
                                    f"(broker -> peers it has not connected to)\n{self.log_tail(30)}")

    def restart(self, name: str, timeout: float = 90) -> None:
        """Stop broker ``name`` and start it again on the same ports and data directory (a broker
        whose process has ``persistent`` set keeps its durable subscriptions in KahaDB), then wait
        until its connectors logged their bridges established again (each start logs afresh)."""
        node = self.nodes[name]
        node.stop()
        node.process.start(timeout=timeout)
        self._wait_for_bridges_of(name, timeout, f"did not come back within {timeout:.0f} s after its restart")

    def stop_broker(self, name: str) -> None:
        """Stop broker ``name`` alone (its bridges and the bridges to it go down); `start_broker`
        brings it back on the same ports and data directory."""
        self.nodes[name].stop()

    def start_broker(self, name: str, timeout: float = 90) -> None:
        """Start broker ``name`` again (after `stop_broker`) with its current connectors, and wait
        until they logged their bridges established (each start logs afresh)."""
        node = self.nodes[name]
        node.process.network_connectors_xml = self.connectors_xml(name)
        node.process.start(timeout=timeout)
        self._wait_for_bridges_of(name, timeout, f"did not come up within {timeout:.0f} s after its start")

    def _wait_for_bridges_of(self, name: str, timeout: float, failure: str) -> None:
        """Wait until broker ``name`` (just started) logged all its expected bridges established
        (each start logs afresh); else NetworkStartError "broker NAME's bridges <failure>" with the
        broker's log tail."""
        node = self.nodes[name]
        want = len(self.expected_bridges()[name])
        wait_until(lambda: len(node.established_bridges()) >= want, timeout, 0.1,
                   on_timeout=lambda _: NetworkStartError(f"broker {name}'s bridges {failure}\n{node.log_tail(30)}"))

    def rename_connector(self, source: str, old: str, new: str) -> None:
        """Rename broker ``source``'s connector ``old`` to ``new``; it takes effect when that broker
        next starts (`start_broker`). The document's N.B. on names ("Example Configuration using
        NetworkConnector properties") is what renaming tests (NOB-DURNAME-1)."""
        bridges = with_connector_renamed(self.bridges, source, old, new)
        if len({(b.source, b.options.name) for b in bridges}) != len(bridges):
            raise ValueError(f"broker {source} already has a connector named {new!r}; pick another name")
        self.bridges = bridges

    def stop(self) -> None:
        """Stop every broker by its own handle, all at once (each JVM takes seconds to shut down)."""
        errors: list[str] = []

        def stop_one(name: str) -> None:
            try:
                self.nodes[name].stop()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                errors.append(f"{name}: {exc}")

        threads = [threading.Thread(target=stop_one, args=(name,), name=f"stop-{name}") for name in self.nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"could not stop every broker of the network in {self.workdir}: {errors}")

    def __enter__(self) -> "ActiveMQNetwork":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----------------------------------------------------------------- the Cluster contract
    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [node.address(protocol) for node in self.nodes.values()]

    def serving(self) -> list[str]:
        return [name for name, node in self.nodes.items() if node.running and node.serving()]

    def bridge_establishments(self) -> int:
        """Bridges established so far, each reconnect counting once (one log line each)."""
        return sum(len(node.established_bridges()) for node in self.nodes.values())

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    # ----------------------------------------------------------------- evidence
    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- broker {name} ---\n{node.log_tail(lines)}" for name, node in self.nodes.items())

    def config_text(self) -> str:
        return "\n".join(f"--- broker {name} ---\n{node.config_text()}" for name, node in self.nodes.items())

    def __repr__(self) -> str:
        links = ", ".join(f"{b.source}{'<->' if b.options.duplex else '->'}{b.target}" for b in self.bridges)
        return f"<ActiveMQNetwork {list(self.nodes)} [{links}]>"
