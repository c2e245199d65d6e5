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
from .direct import PROTOCOLS, connect
from .failover import FailoverClient, InDoubt, connect_failover
from .load_balancing import BalancedConnections, load_balancing_policy
from .tls import ClientTls

__all__ = [
    "GROUP_ID", "GROUP_SEQ", "PROTOCOLS", "AckMode", "Client", "ClientError", "ConnectFailed",
    "ExchangeLog", "Received", "Subscription", "Unsupported", "connect", "split_destination",
    "FailoverClient", "InDoubt", "connect_failover", "ClientTls", "BalancedConnections",
    "load_balancing_policy",
]


