"""Client adapters: one `Client` API over STOMP (stomp.py), MQTT (paho-mqtt) and AMQP 1.0
(python-qpid-proton). `connect()` picks the adapter by protocol name."""

from __future__ import annotations

from .base import (
    GROUP_ID,
    GROUP_SEQ,
    AckMode,
    Client,
    ClientError,
    ConnectFailed,
    ExchangeLog,
    Received,
    Subscription,
    Unsupported,
    split_destination,
)

PROTOCOLS = ("stomp", "mqtt", "amqp")

__all__ = [
    "GROUP_ID", "GROUP_SEQ", "PROTOCOLS", "AckMode", "Client", "ClientError", "ConnectFailed",
    "ExchangeLog", "Received", "Subscription", "Unsupported", "connect", "split_destination",
    "FailoverClient", "InDoubt", "connect_failover",
]


def connect(host: str, port: int, protocol: str, *, login: str | None = None, passcode: str | None = None,
            client_id: str | None = None, **options) -> Client:
    """Open a client session to ``host:port`` speaking ``protocol`` (stomp, mqtt or amqp).

    ``options`` go to the adapter: ``timeout`` (seconds, every adapter); STOMP ``heartbeats``,
    ``vhost``, ``connect_headers``; MQTT ``mqtt_version`` (3 = 3.1.1, default; 5), ``qos``,
    ``clean_session``; AMQP ``address_style`` ("prefix" or "rabbitmq"), ``nack_outcome`` ("modified"
    or "rejected", see amqp_client)."""
    # Imported here so a missing client library only matters for the protocol that needs it.
    if protocol == "stomp":
        from .stomp_client import StompClient
        return StompClient(host, port, login=login, passcode=passcode, client_id=client_id, **options)
    if protocol == "mqtt":
        from .mqtt_client import MqttClient
        return MqttClient(host, port, login=login, passcode=passcode, client_id=client_id, **options)
    if protocol == "amqp":
        from .amqp_client import AmqpClient
        return AmqpClient(host, port, login=login, passcode=passcode, client_id=client_id, **options)
    raise ValueError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")


# Last: the failover transport wraps `connect` above.
from .failover import FailoverClient, InDoubt, connect_failover  # noqa: E402
