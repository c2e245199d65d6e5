"""`connect()`: one client session by protocol name (the adapter is imported when first used, so a
missing client library only matters for the protocol that needs it). Its own module so the
failover transport (failover.py) wraps it without importing the package it belongs to."""

from __future__ import annotations

from .base import Client

PROTOCOLS = ("stomp", "mqtt", "amqp")


def connect(host: str, port: int, protocol: str, *, login: str | None = None, passcode: str | None = None,
            client_id: str | None = None, **options) -> Client:
    """Open a client session to ``host:port`` speaking ``protocol`` (stomp, mqtt or amqp).

    ``options`` go to the adapter: ``timeout`` (seconds, every adapter); STOMP ``heartbeats``,
    ``vhost``, ``connect_headers``; MQTT ``mqtt_version`` (3 = 3.1.1, default; 5), ``qos``,
    ``clean_session``; AMQP ``address_style`` ("prefix" or "rabbitmq"), ``nack_outcome`` ("modified"
    or "rejected", see amqp_client). ``tls``: a `ClientTls` (conformance/clients/tls.py) to speak
    over TLS, every adapter."""
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
