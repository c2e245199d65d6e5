"""The broker's network connectors, started beside its listeners.

`NetworkService(broker, config)`: the consumer advisories (every broker of a network publishes
them, connectors or not: they are how peers see its demand) and one `Bridge` per peer of each
``static:`` connector (one per connector for ``masterslave:``, which connects to the first live
peer only). ActiveMQ "Networks of Brokers", "Starting network connectors": by default connectors
start one after the other as part of the broker's start (here: `start()` returns after each
connector's first connection attempt, in order); ``network_connector_start_async`` starts them
all at once and `start()` returns immediately.
"""

from __future__ import annotations

import asyncio
import logging

from ..config import BrokerConfig
from ..engine.broker import Broker
from .advisories import AdvisoryPublisher
from .bridge import Bridge

log = logging.getLogger("reference_broker.cluster")


class NetworkService:
    def __init__(self, broker: Broker, config: BrokerConfig | None = None) -> None:
        self.broker = broker
        self.config = config or broker.config
        self.publisher: AdvisoryPublisher | None = None
        self.bridges: list[Bridge] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.publisher = AdvisoryPublisher(self.broker, schedule=loop.call_soon)
        for connector in self.config.network_connectors:
            uri = connector.parsed_uri
            groups = [uri.peers] if uri.master_slave else [(peer,) for peer in uri.peers]
            for peers in groups:
                self.bridges.append(Bridge(self.broker, self.publisher, connector, peers))
        for bridge in self.bridges:
            bridge.start()
            if not self.config.network_connector_start_async:
                await bridge.first_attempt

    async def stop(self) -> None:
        for bridge in self.bridges:
            await bridge.stop()
        self.bridges.clear()
        if self.publisher is not None:
            self.publisher.close()
