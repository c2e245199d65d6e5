"""Multicast discovery over real sockets (reference_broker.cluster.discovery, .service).

Traffic rule: every agent here joins the group on the loopback interface and sends through it with
TTL 0 (the shell's default, see discovery.py), so no datagram leaves this host; each test uses its
own group name, so parallel runs (and any other agent on port 6155) do not hear each other.
"""

import asyncio
import uuid

import pytest

from conformance.clients.stomp_client import StompClient
from conformance.targets.reference.network import ReferenceNode
from machinery.waiting import poll, poll_async
from reference_broker.cluster.discovery import MulticastDiscovery, PeerAdded, PeerRemoved
from reference_broker.cluster.service import NetworkService
from reference_broker.config import build_config


def unique_group() -> str:
    return f"brokerconf-{uuid.uuid4().hex[:10]}"


def test_two_agents_hear_each_other_and_the_dead_announcement():
    async def scenario():
        uri = f"multicast://default?group={unique_group()}&keepAliveInterval=100"
        a = MulticastDiscovery(uri, self_service="stomp://127.0.0.1:1001")
        b = MulticastDiscovery(uri, self_service="stomp://127.0.0.1:1002")
        listener = MulticastDiscovery(uri)  # listen-only, as a multicast:// network connector
        for agent in (a, b, listener):
            await agent.start()
        try:
            assert await poll_async(lambda: a.peers == ["stomp://127.0.0.1:1002"] and b.peers == ["stomp://127.0.0.1:1001"]
                                    and sorted(listener.peers) == ["stomp://127.0.0.1:1001", "stomp://127.0.0.1:1002"],
                                    timeout=5.0, interval=0.02), \
                f"agents did not discover each other: a={a.peers} b={b.peers} listener={listener.peers}"
            assert a.peers == ["stomp://127.0.0.1:1002"]  # never itself
            await b.stop()
            assert await poll_async(lambda: a.peers == [] and listener.peers == ["stomp://127.0.0.1:1001"],
                                    timeout=0.5, interval=0.02), \
                "b's dead. announcement did not remove it (0.5 s is far less than the 1 s expiry here)"
            assert PeerRemoved("stomp://127.0.0.1:1002", "dead") in a.events
            assert PeerAdded("stomp://127.0.0.1:1002", "localhost") in a.events
        finally:
            for agent in (a, b, listener):
                await agent.stop()

    asyncio.run(scenario())


def test_silent_peer_expires_after_ten_intervals():
    async def scenario():
        uri = f"multicast://default?group={unique_group()}&keepAliveInterval=50"
        a = MulticastDiscovery(uri, self_service="stomp://127.0.0.1:2001")
        b = MulticastDiscovery(uri, self_service="stomp://127.0.0.1:2002")
        for agent in (a, b):
            await agent.start()
        try:
            assert await poll_async(lambda: a.peers == ["stomp://127.0.0.1:2002"], timeout=5.0, interval=0.02)
            # b goes silent without its dead. announcement (as a killed broker would)
            b._ticker.cancel()
            b._transport.close()
            b._transport = None
            assert await poll_async(lambda: a.peers == [], timeout=5.0, interval=0.02)
            assert a.events[-1] == PeerRemoved("stomp://127.0.0.1:2002", "expired")
        finally:
            for agent in (a, b):
                await agent.stop()

    asyncio.run(scenario())


def _start_network(node: ReferenceNode, data: dict) -> None:
    """Like ReferenceNode.start_network, but tells the service the bound STOMP port to announce."""
    node.config_data.update(data)
    config = build_config(node.config_data)

    async def start():
        node.network = NetworkService(node.server.broker, config, stomp_address=node.server.stomp_address)
        await node.network.start()

    node.run_coroutine(start(), timeout=30)


def test_two_reference_brokers_discover_each_other_and_a_message_crosses():
    group = unique_group()
    a, b = ReferenceNode("A", "disc-A"), ReferenceNode("B", "disc-B")
    clients = []
    try:
        a.listen()
        b.listen()
        # B announces itself (a transportConnector discoveryUri); A's connector bridges to what it hears.
        _start_network(b, {"discovery_uri": f"multicast://default?group={group}"})
        _start_network(a, {"network_connectors": [{"uri": f"multicast://default?group={group}", "name": "disc"}]})
        assert poll(a.bridges_up, lambda up: up == 1, timeout=10) == 1, \
            "A's multicast:// connector did not bridge to B's announcement"
        assert a.call(lambda: a.network.bridges[0].remote_name) == "disc-B"

        consumer = StompClient("127.0.0.1", b.stomp_port)
        clients.append(consumer)
        sub = consumer.subscribe("queue://DISC.Q")
        assert a.wait_for_consumers("queue://DISC.Q", 1) == 1, "B's consumer demand did not reach A"
        producer = StompClient("127.0.0.1", a.stomp_port)
        clients.append(producer)
        producer.send("queue://DISC.Q", b"over the discovered bridge")
        got = sub.receive(timeout=10)
        assert got is not None and got.body == b"over the discovered bridge"

        # B stops: its dead. announcement makes A drop the bridge (no 5 s expiry wait needed).
        for client in clients:
            client.close()
        clients.clear()
        b.stop()
        assert poll(lambda: a.call(lambda: len(a.network.bridges)), lambda n: n == 0, timeout=3) == 0, \
            "A kept the bridge to a broker that announced dead."
        assert a.call(lambda: a.network.discoveries[0].events[-1]) == PeerRemoved(
            f"stomp://127.0.0.1:{b.stomp_port}", "dead")
    finally:
        for client in clients:
            client.close()
        b.stop()
        a.stop()


def test_discovery_uri_requires_a_stomp_listener_and_a_valid_uri():
    from reference_broker.config import ConfigError

    with pytest.raises(ConfigError, match="set 'stomp'"):
        build_config({"stomp": None, "discovery_uri": "multicast://default"})
    with pytest.raises(ConfigError, match=r"multicast://default\?group=oops"):
        build_config({"discovery_uri": "multicast://oops"})
    assert build_config({"discovery_uri": "multicast://default"}).advisory_support is True
    assert build_config({"discovery_uri": "multicast://default", "advisory_support": False}).advisory_support is False
