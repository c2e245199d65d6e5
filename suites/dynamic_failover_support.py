"""What the dynamic-failover suites on ActiveMQ's own clients share (issue 28): brokers started
with a name, OpenWire connector attributes and bridges, and the reading of the brokers' announcements
(OpenWire ConnectionControl commands, which the Java driver reports as ``connection-control``
events).

Not a suite (no ``test_`` prefix).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conformance.clients.java_driver import Event, port_of
from conformance.targets.activemq.network import established_bridges
from conformance.targets.activemq.process import ActiveMQProcess

#: seconds a broker has to start, and a bridge to come up (JVMs starting side by side on a loaded
#: 2-core machine; they usually take one or two)
BROKER_START = 180.0
BRIDGE_UP = 90.0
#: the guide's Table 2.2 attribute that makes a transport connector announce its network's brokers
UPDATES = {"updateClusterClients": "true"}


def start_broker(workdir: Path, name: str, attributes: dict[str, str], bridges_to=()) -> ActiveMQProcess:
    """ActiveMQ broker ``name`` with its OpenWire connector carrying ``attributes`` and a duplex
    bridge to each broker of ``bridges_to``, started and with every bridge up. OpenWire only: the
    broker's announced address is its first connector's, and the clients here speak OpenWire."""
    bridges = "".join(f'<networkConnector name="{name}-{peer.name}" '
                      f'uri="static:(tcp://127.0.0.1:{peer.openwire_port})" duplex="true"/>' for peer in bridges_to)
    broker = ActiveMQProcess(workdir / name, name=name, stomp=False, jvm_heap_mb=256, memory_limit_mb=96,
                             openwire_attributes=attributes, network_connectors_xml=bridges)
    broker.start(timeout=BROKER_START)
    try:
        for peer in bridges_to:
            wait_for_bridge(broker, peer.name)
    except BaseException:
        broker.stop()
        raise
    return broker


def wait_for_bridge(broker: ActiveMQProcess, remote: str) -> None:
    deadline = time.monotonic() + BRIDGE_UP
    while remote not in established_bridges(broker):
        if time.monotonic() > deadline:
            pytest.fail(f"setup: {broker.name}'s bridge to {remote} did not come up in {BRIDGE_UP:.0f} s\n"
                        f"{broker.log_tail(20)}")
        time.sleep(0.1)


def announced_ports(event: Event) -> list[int]:
    """The OpenWire ports a ConnectionControl event names, in the broker's order."""
    text = event.detail.get("connected_brokers") or ""
    return [port_of(uri) for uri in text.split(",") if uri.strip()]


def announcements(conn, since: float = 0.0) -> list[Event]:
    """The ConnectionControl commands ``conn`` received after ``since`` (time.monotonic scale)."""
    return [e for e in conn.events("connection-control") if e.mono >= since]


def ports_of(uris) -> set[int]:
    return {port_of(uri) for uri in uris or ()}
