"""The client side of the multicast discovery agent (A-MQ FT 2.2.2.4 "Multicast Discovery Agent",
``discovery:(multicast://default?group=NAME)``): listen to the group for a while and return the
services the brokers announce alive in it.

The datagrams are ActiveMQ Classic's (its MulticastDiscoveryAgent's format, group address, port),
which the reference broker's agent already speaks: `reference_broker.cluster.discovery` parses
the URI and the announcements, and opens the group's socket on the loopback interface with TTL 0,
so listening (we never send) stays on this machine.
"""

from __future__ import annotations

import select

from machinery.waiting import Deadline
from reference_broker.cluster.discovery import (  # noqa: PLC2701 - one socket set-up for both agents
    DiscoveryUriError, _multicast_socket, parse_announcement, parse_discovery_uri)

__all__ = ["DiscoveryUriError", "check_agent_uri", "listen"]


def check_agent_uri(uri: str) -> None:
    """Raise ValueError naming what is wrong with a ``multicast://`` agent URI."""
    parse_discovery_uri(uri)


def listen(uri: str, seconds: float) -> list[str]:
    """The services announced alive in the agent URI's group during ``seconds`` (and not announced
    dead after), in the order first heard."""
    agent = parse_discovery_uri(uri)
    heard: dict[str, bool] = {}
    sock = _multicast_socket(agent)
    try:
        deadline = Deadline(seconds)
        # a listener, not a `wait_until`: it hears the group for the whole window, keeping what it hears
        while (left := deadline.remaining()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                continue
            try:
                data = sock.recv(8192)
            except BlockingIOError:
                continue
            announcement = parse_announcement(data, agent.group)
            if announcement is not None:
                heard[announcement.service] = announcement.alive
    finally:
        sock.close()
    return [service for service, alive in heard.items() if alive]
