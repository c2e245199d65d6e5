"""Thin asyncio shell around `MqttSession` (batching and back-pressure: listeners/batched.py).
A PUBACK or PUBREC for a persistent (QoS 1/2) message is written only after the journal's group
commit."""

from __future__ import annotations

from ..config import MqttConfig
from ..engine.broker import Broker
from ..protocols.mqtt.session import MqttSession, MqttSessionRegistry
from .batched import BatchedSessionProtocol


class MqttProtocol(BatchedSessionProtocol):
    protocol_name = "MQTT"

    def __init__(self, broker: Broker, options: MqttConfig, sessions: MqttSessionRegistry, registry: set) -> None:
        super().__init__(broker, registry)
        self.options = options
        self.sessions = sessions

    def make_session(self) -> MqttSession:
        return MqttSession(self.broker, self, self.sessions, self.options)
