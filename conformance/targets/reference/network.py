"""Networks of reference brokers: two to four in-process reference brokers joined by their own
network connectors (reference_broker/cluster), with the interface the networks suite uses for
`ActiveMQNetwork` (``net["A"]``, ``start()``, ``stop()``; nodes with ``host``, ``stomp_port``,
``consumer_count``, ``queue_size``, ``wait_for_consumers``).

Each broker runs on its own asyncio loop in a daemon thread. Listeners bind port 0 first; once every
broker's STOMP port is known, each starts its `NetworkService` with ``static:(tcp://127.0.0.1:PORT)``
connectors built from the same `Bridge` / `NetworkConnectorOptions` model as the ActiveMQ launcher
(so one scenario renders to both targets). Counters come straight from the engine.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from machinery.loop_thread import LoopThread
from machinery.process import free_ports
from conformance.deployment import InFlight, Renaming
from conformance.topology import (Cluster, Node, RECONNECT_URI_OPTIONS, TopologyUnsupported, Topology, Bridge, BridgeFilterPolicy, BridgeRoute, CompositeDestination,
                                  NetworkConnectorOptions, check_duplex_names, static_uri, with_connector_renamed)
from reference_broker.cluster.service import NetworkService
from reference_broker.config import build_config
from reference_broker.server import BrokerServer
from machinery.waiting import poll, wait_until

_TIMEOUT = 10.0


class ReferenceNetworkError(RuntimeError):
    """A broker of the network did not start or a bridge did not come up."""


def connector_config(peer_url: str | list[str], options: NetworkConnectorOptions, scheme: str = "static") -> dict:
    """The reference broker's ``network_connectors`` entry for a connector to ``peer_url`` (a list
    of URLs with ``scheme="masterslave"``: master first, then the slaves)."""
    # only the options the scenario set (and the name, by which connectors are found): the
    # reference broker applies the document's default to an absent one itself
    entry = options.model_dump(exclude=set(RECONNECT_URI_OPTIONS), exclude_unset=True)
    entry["name"] = options.name
    entry["uri"] = static_uri([peer_url] if isinstance(peer_url, str) else list(peer_url), options, scheme)
    return entry


def security_config(users: tuple[tuple[str, str], ...]) -> dict:
    """The reference broker's ``security`` section for (user, password) pairs: with users and no
    allow_anonymous, anonymous logins are refused (as ActiveMQ's simpleAuthenticationPlugin with
    anonymousAccessAllowed="false", what ActiveMQNetwork renders for the same ``users``). They are
    also the users connectors log in with, so they are in the broker's network group (its
    ``security.network_group``, the default here): only such logins may use network subscriptions."""
    return {"users": [{"name": u, "password": p, "groups": ["users", "network-bridges"]} for u, p in users]}


def policy_config(policy: BridgeFilterPolicy) -> dict:
    """The reference broker's ``policy_entries`` entry for a `BridgeFilterPolicy`."""
    settings = asdict(policy)
    return {"queue": settings.pop("queue"), "conditional_network_bridge_filter": settings}


#: <broker> attributes (ActiveMQNetwork's ``broker_attributes``) the reference broker has, and the
#: option each one sets in its configuration
BROKER_ATTRIBUTES = {
    "useVirtualDestSubs": "use_virtual_dest_subs",
    "useVirtualDestSubsOnCreation": "use_virtual_dest_subs_on_creation",
    "networkConnectorStartAsync": "network_connector_start_async",
    "advisorySupport": "advisory_support",
}


def broker_config(attributes: dict[str, str] | None, composites: tuple[CompositeDestination, ...]) -> dict:
    """The reference broker's options for ActiveMQ ``<broker>`` attributes and composite destinations."""
    config: dict = {}
    for attribute, value in (attributes or {}).items():
        option = BROKER_ATTRIBUTES.get(attribute)
        if option is None:
            raise ValueError(f"broker attribute {attribute!r} has no reference broker equivalent; "
                             f"known: {sorted(BROKER_ATTRIBUTES)}")
        if str(value).lower() not in ("true", "false"):
            raise ValueError(f"broker attribute {attribute}={value!r}: expected 'true' or 'false'")
        config[option] = str(value).lower() == "true"
    if composites:
        config["composite_destinations"] = [
            {"kind": c.kind, "name": c.name, "forward_to": list(c.forward_to), "forward_only": c.forward_only}
            for c in composites]
    return config


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        del self.lines[:-2000]


#: a listener's address before its first start. `ReferenceNode.listen` replaces it by a port below the
#: kernel's ephemeral range (machinery.process.free_ports): a restart binds the same port again, and
#: while the node is down a port the kernel chose (in that range) can become the local end of any
#: outgoing connection on the machine; a main job saw a cluster node's restart fail so (EADDRINUSE).
ANY_PORT = "127.0.0.1:0"


class ReferenceNode(Node, InFlight):
    """One reference broker of the network."""

    host = "127.0.0.1"

    def __init__(self, name: str, broker_name: str, policies: tuple[BridgeFilterPolicy, ...] = (),
                 extra_config: dict | None = None) -> None:
        self.name = name
        self.broker_name = broker_name
        self.server = None
        self.network = None
        self.config_data: dict = {"name": broker_name, "stomp": ANY_PORT, "advisory_support": True,
                                  "expiry_check_period_ms": 100,
                                  "policy_entries": [policy_config(p) for p in policies], **(extra_config or {})}
        self._loop = LoopThread(f"reference-net-{broker_name}")
        self.logs: _Logs | None = None  # the network's log handler (ReferenceNetwork.start)
        self.stomp_port = 0
        self._stopped = False

    def call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Run ``fn()`` on the broker's loop (the engine is single-threaded)."""
        return self._loop.call(fn, timeout)

    def run_coroutine(self, coroutine, timeout: float = _TIMEOUT) -> Any:
        return self._loop.run(coroutine, timeout)

    def listen(self) -> None:
        if self.config_data["stomp"] == ANY_PORT:
            self.config_data["stomp"] = f"127.0.0.1:{free_ports(1)[0]}"

        async def start():
            self.server = BrokerServer(build_config(self.config_data))
            await self.server.start()

        self.run_coroutine(start())
        self.stomp_port = self.server.stomp_address[1]

    def start_network(self, connectors: list[dict]) -> None:
        self.config_data["network_connectors"] = connectors
        config = build_config(self.config_data)  # validated; the running server keeps its own copy

        async def start():
            self.network = NetworkService(self.server.broker, config, stomp_address=self.server.stomp_address)
            await self.network.start()

        self.run_coroutine(start(), timeout=60)

    # ------------------------------------------------------------ what tests read

    @property
    def running(self) -> bool:
        return self.server is not None and not self._stopped

    def _queue_field(self, destination: str, read: Callable) -> int:
        def get():
            queue = self.server.broker.queues.get(destination)
            return read(queue) if queue is not None else 0
        return self.call(get)

    def network_connector_names(self) -> list[str]:
        """The names of this broker's network connectors, as its configuration resolved them."""
        config = self.network.config if self.network else None
        return sorted(c.name for c in config.network_connectors) if config else []

    def consumer_count(self, destination: str) -> int:
        """Consumers of ``destination`` here, local and network consumers alike."""
        if destination.startswith("topic://"):
            def topic_count():
                publisher = self.network.publisher if self.network else None
                return len(publisher.consumers.get(destination, {})) if publisher else 0
            return self.call(topic_count)
        return self._queue_field(destination, lambda q: len(q.consumers))

    def consumer_priorities(self, destination: str) -> list[int]:
        """The dispatch priority of each consumer of queue ``destination`` here (local and network
        consumers alike), lowest first; [] when the queue does not exist here."""
        def get():
            queue = self.server.broker.queues.get(destination)
            if queue is None:
                return []
            consumers = queue.consumers.values() if isinstance(queue.consumers, dict) else queue.consumers
            return sorted(c.priority for c in consumers)
        return self.call(get)

    def queue_size(self, destination: str) -> int:
        """Messages held here for ``destination``: pending plus delivered-but-unacknowledged (as
        ActiveMQ's QueueSize counts them)."""
        return self._queue_field(destination, lambda q: q.pending_count + q.in_flight_count)

    def in_flight_count(self, destination: str) -> int:
        """Messages of ``destination`` delivered to its consumers (network consumers included) and
        not yet acknowledged (as ActiveMQ's InFlightCount)."""
        return self._queue_field(destination, lambda q: q.in_flight_count)

    def wait_for_consumers(self, destination: str, count: int, timeout: float = 10.0) -> int:
        return poll(lambda: self.consumer_count(destination), lambda seen: seen == count,
                    timeout=timeout, interval=0.05)

    def bridges_up(self) -> int:
        return self.call(lambda: sum(1 for b in self.network.bridges if b.local is not None) if self.network else 0)

    # ------------------------------------------------------------ the Node contract

    pid = None  # in-process: no process of its own to signal

    def address(self, protocol: str) -> tuple[str, int]:
        if protocol != "stomp" or not self.stomp_port:
            raise KeyError(f"node {self.name} has no {protocol} listener (open: ['stomp'])")
        return self.host, self.stomp_port

    def serving(self) -> bool:
        return self.server is not None and not self._stopped and not self._loop.paused

    def log_tail(self, lines: int = 80) -> str:
        """This broker's lines of the network's log (its records name it)."""
        own = [line for line in (self.logs.lines if self.logs else []) if self.broker_name in line]
        return "\n".join(own[-lines:])

    def kill(self) -> None:
        """In-process, a kill is a stop: the engine's state goes with it unless a journal keeps it."""
        self.halt()

    def pause(self) -> None:
        """Freeze the broker's loop (`LoopThread.pause`: as SIGSTOP freezes a process)."""
        self._loop.pause()

    def resume(self) -> None:
        self._loop.resume()

    def stop(self) -> None:
        """Stop bridges, listeners and store; `start` brings the node back (`halt`)."""
        self.resume()
        self.halt()

    def close(self) -> None:
        """End the node for good: broker stopped and its loop thread ended."""
        self.resume()
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.network is not None:
                self.run_coroutine(self.network.stop())
            if self.server is not None:
                self.run_coroutine(self.server.stop())
        finally:
            self._loop.stop(_TIMEOUT)

    def restart(self) -> None:
        """Stop this broker (bridges, listeners, store) and start it again on the same STOMP port
        with the same connectors; with a journal store (`ReferenceNetwork.use_journal_stores`) its
        durable subscriptions and their messages survive, as on a persistent ActiveMQ broker."""
        self.halt()
        self.start()

    def halt(self) -> None:
        """Stop bridges, listeners and store but keep the node's loop, so `start` can start it
        again (`stop` ends the node for good)."""
        if self.network is not None:
            self.run_coroutine(self.network.stop())
            self.network = None
        if self.server is not None:
            self.run_coroutine(self.server.stop())
            self.server = None

    def start(self, timeout: float = 30, connectors: list[dict] | None = None) -> None:
        """Start again after `halt` / `stop`, on the same STOMP port, with ``connectors`` (default:
        the ones it had)."""
        if connectors is None:
            connectors = self.config_data.get("network_connectors", [])
        self.config_data["stomp"] = f"127.0.0.1:{self.stomp_port}"
        self.listen()
        self.start_network(connectors)

    def __repr__(self) -> str:
        return f"<ReferenceNode {self.name} stomp={self.stomp_port}>"


class ReferenceNetwork(Cluster, Renaming):
    """Reference brokers ``names`` joined by ``bridges`` (`Bridge` from the ActiveMQ launcher)."""

    host = "127.0.0.1"

    def __init__(self, workdir: Path | None = None, names: tuple[str, ...] = ("A", "B"),
                 bridges: tuple[Bridge, ...] = (), *, prefix: str = "nob",
                 policies: tuple[BridgeFilterPolicy, ...] = (), bridge_route: BridgeRoute | None = None,
                 broker_attributes: dict[str, dict[str, str]] | None = None,
                 composites: tuple[CompositeDestination, ...] = (),
                 users: dict[str, tuple[tuple[str, str], ...]] | None = None,
                 topology: Topology | None = None) -> None:
        if not 2 <= len(names) <= 4 or len(set(names)) != len(names):
            raise ValueError(f"a network here has 2 to 4 distinct brokers, not {names!r}")
        check_duplex_names(bridges)
        self.bridge_route = bridge_route  # as ActiveMQNetwork's: dial a fault proxy, not the peer
        for bridge in bridges:
            for end in (bridge.source, bridge.target):
                if end not in names:
                    raise ValueError(f"bridge {bridge.source}->{bridge.target} names {end!r}, not one of {names}")
            if bridge.transport != "tcp":
                raise TopologyUnsupported(f"bridge {bridge.source}->{bridge.target}: the reference broker's bridges "
                                          f"speak STOMP over tcp only, not {bridge.transport}")
        pairs = [(b.source, b.target, b.options.name) for b in bridges]
        if len(set(pairs)) != len(pairs):
            raise ValueError(f"two connectors between the same brokers need different names: {pairs}")
        self.workdir = workdir
        self.bridges = tuple(bridges)
        self.prefix = prefix
        self.policies = tuple(policies)
        unknown = set(broker_attributes or {}) - set(names)
        if unknown:
            raise ValueError(f"broker_attributes names unknown brokers {sorted(unknown)} (brokers: {names})")
        self.extra_config = {n: broker_config((broker_attributes or {}).get(n), tuple(composites)) for n in names}
        unknown = set(users or {}) - set(names)
        if unknown:
            raise ValueError(f"users names unknown brokers {sorted(unknown)} (brokers: {names})")
        for n, pairs in (users or {}).items():
            if pairs:
                self.extra_config[n]["security"] = security_config(tuple(pairs))
        self.names = names
        self.topology = topology or Topology(tuple(names), tuple(bridges), prefix=prefix)
        self.nodes: dict[str, ReferenceNode] = {}
        self._logs = _Logs()

    def __getitem__(self, name: str) -> ReferenceNode:
        return self.nodes[name]

    def start(self, timeout: float = 30) -> None:
        logger = logging.getLogger("reference_broker")
        logger.addHandler(self._logs)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        try:
            for name in self.names:
                self.nodes[name] = ReferenceNode(name, f"{self.prefix}-{name}", self.policies, self.extra_config[name])
                self.nodes[name].logs = self._logs
                self.nodes[name].listen()
            for name, node in self.nodes.items():
                node.start_network([connector_config(self.peer_url(b), b.options)
                                    for b in self.bridges if b.source == name])
            self.wait_for_bridges(timeout)
        except BaseException:
            self.stop()
            raise

    def use_journal_stores(self, directory: Path) -> None:
        """Give every broker a journal store under ``directory`` (call before `start`), so a
        `restart` keeps durable subscriptions and persistent messages."""
        for name in self.names:
            self.extra_config[name]["store"] = {"kind": "journal", "directory": str(Path(directory) / name)}

    def restart(self, name: str, timeout: float = 30) -> None:
        """Restart broker ``name`` (`ReferenceNode.restart`) and wait until its bridges are up again."""
        self.nodes[name].restart()
        self.wait_for_bridges(timeout)

    def stop_broker(self, name: str) -> None:
        """Stop broker ``name`` alone (`ReferenceNode.halt`); `start_broker` brings it back."""
        self.nodes[name].halt()

    def start_broker(self, name: str, timeout: float = 30) -> None:
        """Start broker ``name`` again after `stop_broker`, with its current connectors (see
        `rename_connector`), and wait until its own bridges are up."""
        node = self.nodes[name]
        node.start(connectors=[connector_config(self.peer_url(b), b.options) for b in self.bridges if b.source == name])
        want = sum(1 for b in self.bridges if b.source == name and b.expect_established)
        wait_until(lambda: node.bridges_up() >= want, timeout, 0.05,
                   on_timeout=lambda _: ReferenceNetworkError(f"broker {name}'s bridges did not come up within "
                                                              f"{timeout:.0f} s after its start\n" + self.log_tail(30)))

    def rename_connector(self, source: str, old: str, new: str) -> None:
        """As `ActiveMQNetwork.rename_connector`: takes effect at broker ``source``'s next `start_broker`."""
        bridges = with_connector_renamed(self.bridges, source, old, new)
        if len({(b.source, b.options.name) for b in bridges}) != len(bridges):
            raise ValueError(f"broker {source} already has a connector named {new!r}; pick another name")
        self.bridges = bridges

    def peer_url(self, bridge: Bridge) -> str:
        """The address ``bridge``'s connector dials: the target's STOMP listener, or where
        ``bridge_route`` sends it (a fault proxy in front of that listener)."""
        peer = self.nodes[bridge.target]
        host, port = peer.host, peer.stomp_port
        if self.bridge_route is not None:
            host, port = self.bridge_route(bridge, host, port)
        return f"tcp://{host}:{port}"

    def wait_for_bridges(self, timeout: float) -> None:
        expected = {name: sum(1 for b in self.bridges if b.source == name and b.expect_established)
                    for name in self.nodes}
        missing = poll(lambda: {n: want for n, want in expected.items() if self.nodes[n].bridges_up() < want},
                       lambda missing: not missing, timeout=timeout, interval=0.05)
        if missing:
            raise ReferenceNetworkError(f"bridges not established within {timeout:.0f} s: {missing}\n"
                                        + self.log_tail(30))

    def stop(self) -> None:
        errors = []
        for name, node in self.nodes.items():
            try:
                node.close()
            except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
                errors.append(f"{name}: {exc}")
        logging.getLogger("reference_broker").removeHandler(self._logs)
        if errors:
            raise RuntimeError(f"could not stop every reference broker of the network: {errors}")

    # ------------------------------------------------------------ the Cluster contract

    def addresses(self, protocol: str) -> list[tuple[str, int]]:
        return [node.address(protocol) for node in self.nodes.values()]

    def serving(self) -> list[str]:
        return [name for name, node in self.nodes.items() if node.serving()]

    def bridge_establishments(self) -> int:
        """Bridge sessions established so far, each reconnect counting once (each Bridge counts them)."""
        return sum(node.call(lambda node=node: sum(b.connections for b in node.network.bridges))
                   for node in self.nodes.values() if node.network is not None)

    def subscription_discards(self, destination: str) -> list[int] | None:
        return None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self._logs.lines[-lines:])

    def config_text(self) -> str:
        return "\n".join(f"--- broker {n} ---\n{node.config_data}" for n, node in self.nodes.items())

    def __enter__(self) -> "ReferenceNetwork":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        links = ", ".join(f"{b.source}{'<->' if b.options.duplex else '->'}{b.target}" for b in self.bridges)
        return f"<ReferenceNetwork {list(self.nodes)} [{links}]>"
