"""The broker's network connectors, started beside its listeners.

`NetworkService(broker, config)`: the consumer advisories (every broker of a network publishes
them, connectors or not: they are how peers see its demand) and one `Bridge` per peer of each
``static:`` connector (one per connector for ``masterslave:``, which connects to the first live
peer only). ActiveMQ "Networks of Brokers", "Starting network connectors": by default connectors
start one after the other as part of the broker's start (here: `start()` returns after each
connector's first connection attempt, in order); ``network_connector_start_async`` starts them
all at once and `start()` returns immediately.

Multicast discovery (`discovery`): a ``multicast://`` connector listens in its group and keeps one
`Bridge` per announced STOMP service (bridges to a service that says ``dead.`` or falls silent are
stopped); the broker's ``discovery_uri`` announces its own STOMP listener. Announced services that
are not STOMP (ActiveMQ announces its OpenWire ``tcp://`` connectors) are logged and skipped: a
reference bridge speaks STOMP only, ActiveMQ's bridges OpenWire only.
"""

from __future__ import annotations

import asyncio
import logging

from ..config import BrokerConfig
from ..engine.broker import Broker
from .advisories import AdvisoryPublisher
from .bridge import Bridge
from .discovery import MulticastDiscovery, PeerAdded, PeerEvent
from .network_config import NetworkConnectorConfig
from .uris import Peer

_STOMP_SCHEMES = ("stomp://", "stomp+nio://")

log = logging.getLogger("reference_broker.cluster")


def check_connector_names(connectors: list[NetworkConnectorConfig]) -> None:
    """ActiveMQ "Networks of Brokers", NetworkConnector Properties (name) and "Duplex network
    connectors": several connectors between the same two brokers need different names. Raises
    ValueError before anything starts when two connectors share a name and a peer (a listed
    address, or the same discovery group)."""
    reach: dict[str, list[tuple[int, set]]] = {}
    for index, connector in enumerate(connectors):
        uri = connector.parsed_uri
        peers = {("group", uri.discovery.group, uri.discovery.address, uri.discovery.port)} if uri.discovery else \
            {("peer", p.host, p.port) for p in uri.peers}
        for other, other_peers in reach.get(connector.name, []):
            shared = peers & other_peers
            if shared:
                raise ValueError(
                    f"network connectors #{other + 1} and #{index + 1} are both named {connector.name!r} and both "
                    f"reach {sorted(shared)[0][1:]}: connectors between the same two brokers need unique "
                    "names; set a different 'name' on one of them")
        reach.setdefault(connector.name, []).append((index, peers))


class NetworkService:
    def __init__(self, broker: Broker, config: BrokerConfig | None = None,
                 stomp_address: tuple[str, int] | None = None) -> None:
        """``stomp_address``: the bound STOMP listener to announce with ``discovery_uri`` (needed
        when the configuration says port 0; else the configured address is announced)."""
        self.broker = broker
        self.config = config or broker.config
        self.publisher: AdvisoryPublisher | None = None
        self.bridges: list[Bridge] = []
        self.stomp_address = stomp_address
        self.announcer: MulticastDiscovery | None = None
        self.discoveries: list[MulticastDiscovery] = []
        self._discovered: dict[tuple[int, str], Bridge] = {}  # (connector index, service) -> bridge
        check_connector_names(list(self.config.network_connectors))

    def announced_service(self) -> str | None:
        """``stomp://HOST:PORT`` this broker announces, or None without discovery_uri."""
        if self.config.discovery_uri is None:
            return None
        if self.stomp_address is not None:
            host, port = self.stomp_address[0], self.stomp_address[1]
        else:
            host, _, raw = (self.config.stomp or "").rpartition(":")
            port = int(raw)
            if port == 0:
                raise ValueError("discovery_uri: the STOMP listener is on port 0; pass the bound address "
                                 "(NetworkService(..., stomp_address=server.stomp_address)) or configure a port")
        # Discovery stays on loopback by default, so an any-address listener is reached there.
        host = "127.0.0.1" if host in ("", "0.0.0.0") else host.strip("[]")
        return f"stomp://{host}:{port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.publisher = AdvisoryPublisher(self.broker, schedule=loop.call_soon, later=loop.call_later)
        if self.config.discovery_uri is not None:
            self.announcer = MulticastDiscovery(self.config.discovery_uri, self_service=self.announced_service())
            await self.announcer.start()
        for index, connector in enumerate(self.config.network_connectors):
            uri = connector.parsed_uri
            if uri.discovery is not None:
                agent = MulticastDiscovery(uri.discovery, on_event=self._discovery_listener(index, connector))
                self.discoveries.append(agent)
                await agent.start()
                continue
            groups = [uri.peers] if uri.master_slave else [(peer,) for peer in uri.peers]
            for peers in groups:
                self.bridges.append(Bridge(self.broker, self.publisher, connector, peers))
        for bridge in self.bridges:
            bridge.start()
            if not self.config.network_connector_start_async:
                await bridge.first_attempt

    def _discovery_listener(self, index: int, connector: NetworkConnectorConfig):
        own = self.announced_service()

        def on_event(event: PeerEvent) -> None:
            key = (index, event.service)
            if isinstance(event, PeerAdded):
                if event.service == own or key in self._discovered:
                    return
                if not event.service.startswith(_STOMP_SCHEMES):
                    log.info("network connector %s on %s: discovered %s, not a STOMP service; a reference "
                             "bridge speaks STOMP only (an ActiveMQ tcp:// connector speaks OpenWire)",
                             connector.name, self.config.name, event.service)
                    return
                host, _, port = event.service.split("://", 1)[1].split("?", 1)[0].rpartition(":")
                try:
                    peer = Peer(host.strip("[]"), int(port))
                except ValueError:
                    log.warning("network connector %s: discovered service %r has no port; skipped",
                                connector.name, event.service)
                    return
                log.info("network connector %s on %s: discovered %s, bridging", connector.name,
                         self.config.name, event.service)
                bridge = Bridge(self.broker, self.publisher, connector, (peer,))
                self._discovered[key] = bridge
                self.bridges.append(bridge)
                bridge.start()
            else:
                bridge = self._discovered.pop(key, None)
                if bridge is not None:
                    log.info("network connector %s on %s: %s is gone (%s); stopping its bridge",
                             connector.name, self.config.name, event.service, event.reason)
                    self.bridges.remove(bridge)
                    asyncio.get_running_loop().create_task(bridge.stop())

        return on_event

    async def stop(self) -> None:
        for agent in self.discoveries:
            await agent.stop()
        self.discoveries.clear()
        self._discovered.clear()
        for bridge in self.bridges:
            await bridge.stop()
        self.bridges.clear()
        if self.announcer is not None:
            await self.announcer.stop()  # announces dead. so peers drop their bridges at once
            self.announcer = None
        if self.publisher is not None:
            self.publisher.close()
