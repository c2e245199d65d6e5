"""Multicast discovery between the reference broker and a real ActiveMQ Classic 5.17 broker
(ActiveMQ "Networks of Brokers", "Example using multicast discovery"; datagram format in
reference_broker/cluster/discovery.py).

Traffic rule: both sides join the group on the loopback interface and send through it with TTL 0
-- the reference agent by default, ActiveMQ through its agent's ``timeToLive=0``,
``networkInterface=lo`` and ``joinNetworkInterface=lo`` options (`activemq_loopback_uri`) -- so no
datagram leaves this host. Each test uses its own group name.

What can be checked across the two: each hears the other's announcement. They cannot form a bridge:
ActiveMQ bridges over OpenWire only, and the reference broker speaks STOMP/AMQP/MQTT, not OpenWire
(reference_broker/cluster/__init__.py) -- so ActiveMQ's attempt to connect to the reference broker's
announced ``stomp://`` service fails, and the reference connector skips ActiveMQ's ``tcp://``
(OpenWire) service on purpose.
"""

from __future__ import annotations

import uuid
from xml.sax.saxutils import quoteattr

import pytest

from conformance.requirements import skip_or_fail
from conformance.targets.activemq.process import ActiveMQProcess, activemq_available
from conformance.targets.reference.network import ReferenceNode
from machinery.waiting import poll
from reference_broker.cluster.discovery import PeerAdded, activemq_loopback_uri
from reference_broker.cluster.service import NetworkService
from reference_broker.config import build_config

pytestmark = pytest.mark.slow


def _require() -> None:
    ok, reason = activemq_available()
    if not ok:
        skip_or_fail("activemq", reason)  # the only reason to skip: the Debian package is not installed


def _wait_for_log(broker: ActiveMQProcess, needle: str, timeout: float) -> str:
    """The broker's log once it holds ``needle``, or as it is after ``timeout`` s (callers assert)."""
    return poll(lambda: broker.log_path.read_text(encoding="utf-8", errors="replace"), lambda text: needle in text,
                timeout=timeout, interval=0.1)


def _openwire_service(events: list, port: int) -> list:
    """ActiveMQ announces its connector's publishable URI: tcp://localhost:PORT for 127.0.0.1."""
    return [e for e in events if isinstance(e, PeerAdded) and e.service.startswith("tcp://")
            and e.service.endswith(f":{port}")]


def test_reference_and_activemq_hear_each_others_announcements(tmp_path):
    _require()
    group = f"brokerconf-{uuid.uuid4().hex[:10]}"
    amq_uri = activemq_loopback_uri(group)
    broker = ActiveMQProcess(
        tmp_path / "amq", name="disc-amq", discovery_uri=amq_uri,
        network_connectors_xml=f'      <networkConnector name="disc" uri={quoteattr(amq_uri)}/>')
    # The reference broker announces itself (discovery_uri) and has a multicast:// connector.
    node = ReferenceNode("R", "disc-ref")
    ref_uri = f"multicast://default?group={group}"
    try:
        broker.start()
        node.listen()
        node.config_data.update({"discovery_uri": ref_uri,
                                 "network_connectors": [{"uri": ref_uri, "name": "disc"}]})
        config = build_config(node.config_data)

        async def start_network():
            node.network = NetworkService(node.server.broker, config, stomp_address=node.server.stomp_address)
            await node.network.start()

        node.run_coroutine(start_network(), timeout=30)
        reference_service = f"stomp://127.0.0.1:{node.stomp_port}"
        heard = poll(lambda: _openwire_service(node.call(lambda: list(node.network.discoveries[0].events)),
                                               broker.openwire_port), timeout=20)
        log = _wait_for_log(broker, reference_service, 20)
        bridges = node.call(lambda: len(node.network.bridges))
    finally:
        node.stop()
        broker.stop()

    # The reference connector heard ActiveMQ's transportConnector discoveryUri announcement, in
    # ActiveMQ's datagram format (broker name "localhost", the OpenWire connector's URI)...
    assert heard and heard[0].broker_name == "localhost", (
        f"no announcement of ActiveMQ's OpenWire connector (port {broker.openwire_port}) in group {group}")
    # ...and does not bridge to it: that service speaks OpenWire, the reference bridge STOMP.
    assert bridges == 0
    # ActiveMQ's multicast:// network connector heard the reference broker's announcement and tried
    # to bridge to it; the attempt cannot succeed (ActiveMQ bridges over OpenWire only), so the log
    # shows the discovery ("Establishing network connection ... to stomp://...") and the failure.
    lines = [line for line in log.splitlines() if reference_service in line]
    assert any("Establishing network connection" in line for line in lines), (
        f"ActiveMQ's log never shows a connection attempt to {reference_service}; log tail:\n{log[-3000:]}")


def test_two_activemq_brokers_form_a_network_through_multicast_discovery(tmp_path):
    """NOB-MCAST-1 on ActiveMQ itself: the document's example (a multicast:// connector and a
    discoveryUri on the transport connector), confined to loopback as above."""
    _require()
    group = f"brokerconf-{uuid.uuid4().hex[:10]}"
    uri = activemq_loopback_uri(group)
    brokers = [ActiveMQProcess(tmp_path / name, name=name, discovery_uri=uri,
                               network_connectors_xml=f'      <networkConnector name="disc" uri={quoteattr(uri)}/>')
               for name in ("disc-a", "disc-b")]
    try:
        for broker in brokers:
            broker.start()
        logs = [_wait_for_log(broker, "has been established", 30) for broker in brokers]
    finally:
        for broker in brokers:
            broker.stop()
    for broker, log in zip(brokers, logs):
        assert "has been established" in log, (
            f"{broker.name} formed no bridge from multicast discovery; log tail:\n{log[-3000:]}")
    other = {"disc-a": "disc-b", "disc-b": "disc-a"}
    for broker, log in zip(brokers, logs):
        established = [line for line in log.splitlines() if "has been established" in line]
        assert any(other[broker.name] in line for line in established), established
