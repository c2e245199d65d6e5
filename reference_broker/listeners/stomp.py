"""Thin asyncio shell around `StompSession` (batching and back-pressure: listeners/batched.py).
A RECEIPT for a persistent send is written only after the journal's group commit."""

from __future__ import annotations

from ..config import StompConfig
from ..engine.broker import Broker
from ..protocols.stomp.session import StompSession
from .batched import BatchedSessionProtocol


class StompProtocol(BatchedSessionProtocol):
    protocol_name = "STOMP"

    def __init__(self, broker: Broker, options: StompConfig, registry: set) -> None:
        super().__init__(broker, registry)
        self.options = options

    def make_session(self) -> StompSession:
        return StompSession(self.broker, self, self.options)
