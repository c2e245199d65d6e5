"""The sans-IO multicast discovery core and its datagram format (reference_broker.cluster.discovery),
checked against ActiveMQ's MulticastDiscoveryAgent format (../shared/REFERENCES.md)."""

import pytest

from reference_broker.cluster.discovery import (
    DEFAULT_ADDRESS, DiscoveryCore, DiscoveryUriError, PeerAdded, PeerRemoved, activemq_loopback_uri,
    format_announcement, parse_announcement, parse_discovery_uri,
)

SELF = "stomp://127.0.0.1:61613"
PEER = "tcp://127.0.0.1:61616"


def alive(service: str, group: str = "g1") -> bytes:
    return format_announcement(group, True, service)


# ---------------------------------------------------------------- datagrams


def test_alive_and_dead_datagrams_have_activemqs_layout():
    assert alive(PEER, "default") == b"default.ActiveMQ-4.alive.%localhost%tcp://127.0.0.1:61616"
    assert format_announcement("g1", False, SELF) == b"g1.ActiveMQ-4.dead.%localhost%stomp://127.0.0.1:61613"


def test_parse_reads_group_state_name_and_service():
    a = parse_announcement(b"g1.ActiveMQ-4.alive.%brokerX%tcp://h:1?x=%41", "g1")
    assert (a.group, a.alive, a.broker_name, a.service) == ("g1", True, "brokerX", "tcp://h:1?x=%41")
    assert parse_announcement(format_announcement("g1", False, SELF), "g1").alive is False


@pytest.mark.parametrize("data", [
    b"g2.ActiveMQ-4.alive.%localhost%tcp://h:1",      # another group
    b"g1x.ActiveMQ-4.alive.%localhost%tcp://h:1",     # a group whose name only starts like ours
    b"g1.ActiveMQ-5.alive.%localhost%tcp://h:1",      # another type
    b"g1.ActiveMQ-4.sleepy.%localhost%tcp://h:1",     # neither alive nor dead
    b"g1.ActiveMQ-4.alive.localhost%tcp://h:1",       # no opening %
    b"g1.ActiveMQ-4.alive.%localhost",                # no closing %
    b"g1.ActiveMQ-4.alive.%localhost%",               # no service
    b"\xff\xfe",                                      # not UTF-8
])
def test_foreign_or_malformed_datagrams_are_ignored(data):
    assert parse_announcement(data, "g1") is None


# ---------------------------------------------------------------- URIs


def test_default_uri_is_activemqs_group_address_and_port():
    uri = parse_discovery_uri("multicast://default")
    assert (uri.address, uri.port, uri.group, uri.keep_alive_ms) == (DEFAULT_ADDRESS, 6155, "default", 500)
    assert (uri.interface, uri.time_to_live) == ("127.0.0.1", 0)  # loopback only unless told otherwise


def test_uri_options():
    uri = parse_discovery_uri("multicast://239.1.2.3:7000?group=g7&keepAliveInterval=100&timeToLive=1")
    assert (uri.address, uri.port, uri.group, uri.keep_alive_ms, uri.time_to_live) == ("239.1.2.3", 7000, "g7", 100, 1)


@pytest.mark.parametrize("uri, words", [
    ("multicast://mygroup", "multicast://default?group=mygroup"),
    ("multicast://10.0.0.1:6155", "multicast address"),
    ("static:(tcp://h:1)", "expected multicast://"),
    ("multicast://default?colour=blue", "unknown option 'colour'"),
    ("multicast://default?timeToLive=300", "0..255"),
    ("multicast://default?group=", "non-empty"),
    ("multicast://default?interface=eth0", "IPv4 address"),
])
def test_bad_uris_say_what_to_write(uri, words):
    with pytest.raises(DiscoveryUriError, match=words.replace("?", r"\?").replace(".", r"\.")):
        parse_discovery_uri(uri)


def test_activemq_loopback_uri_names_the_agent_options():
    assert activemq_loopback_uri("g9") == ("multicast://default?group=g9&timeToLive=0"
                                           "&networkInterface=lo&joinNetworkInterface=lo")


# ---------------------------------------------------------------- core


def started(self_service=SELF, now=0.0) -> DiscoveryCore:
    core = DiscoveryCore("g1", self_service)
    step = core.start(now)
    assert step.datagrams == [alive(self_service)] if self_service else step.datagrams == []
    return core


def test_heartbeat_every_keep_alive_interval():
    core = started()
    assert core.tick(499).datagrams == []
    assert core.tick(500).datagrams == [alive(SELF)]
    assert core.tick(900).datagrams == []
    assert core.tick(1000).datagrams == [alive(SELF)]


def test_listen_only_core_sends_nothing():
    core = started(self_service=None)
    assert core.tick(5000).datagrams == [] and core.stop(6000).datagrams == []


def test_new_peer_is_added_once_and_answered_at_once():
    core = started()
    step = core.datagram_received(alive(PEER), 100)
    assert step.events == [PeerAdded(PEER, "localhost")]
    assert step.datagrams == [alive(SELF)]  # the newcomer hears us without waiting for our next beat
    again = core.datagram_received(alive(PEER), 600)
    assert again.events == [] and again.datagrams == []
    assert list(core.peers) == [PEER]


def test_own_announcements_are_ignored():
    core = started()
    assert core.datagram_received(alive(SELF), 10).events == []
    assert core.datagram_received(format_announcement("g1", False, SELF), 20).events == []
    assert core.peers == {}


def test_other_groups_are_ignored():
    core = started()
    assert core.datagram_received(alive(PEER, "g2"), 10).events == [] and core.peers == {}


def test_peer_expires_after_ten_missed_heartbeats():
    core = started()
    core.datagram_received(alive(PEER), 1000)
    # ten intervals of 500 ms after its last heartbeat it is still there...
    assert core.tick(1000 + 5000).events == []
    # ...and gone just after the tenth missed one
    assert core.tick(1000 + 5001).events == [PeerRemoved(PEER, "expired")]
    assert core.peers == {}


def test_heartbeats_keep_a_peer():
    core = started()
    for t in range(0, 20000, 500):
        core.datagram_received(alive(PEER), t)
        assert core.tick(t + 250).events == []
    assert list(core.peers) == [PEER]


def test_dead_announcement_removes_the_peer_and_a_later_alive_adds_it_again():
    core = started()
    core.datagram_received(alive(PEER), 0)
    assert core.datagram_received(format_announcement("g1", False, PEER), 10).events == [PeerRemoved(PEER, "dead")]
    assert core.datagram_received(format_announcement("g1", False, PEER), 20).events == []  # unknown now
    assert core.datagram_received(alive(PEER), 30).events == [PeerAdded(PEER, "localhost")]


def test_stop_announces_dead_and_forgets_peers():
    core = started()
    core.datagram_received(alive(PEER), 0)
    step = core.stop(100)
    assert step.datagrams == [format_announcement("g1", False, SELF)] and step.events == []
    assert core.peers == {}
    assert core.datagram_received(alive(PEER), 200).events == []  # stopped: deaf
    assert core.stop(300).datagrams == []  # only once


# ---------------------------------------------------------------- network connector URIs


def test_multicast_network_connector_uri_carries_discovery_and_reconnect_options():
    from reference_broker.cluster.network_config import NetworkConnectorConfig
    from reference_broker.cluster.uris import parse_network_uri

    uri = parse_network_uri("multicast://default?group=g5&initialReconnectDelay=100&keepAliveInterval=200")
    assert (uri.scheme, uri.peers, uri.discovery.group, uri.discovery.keep_alive_ms) == ("multicast", (), "g5", 200)
    # ActiveMQ's multicast agent defaults, except the option given
    assert (uri.reconnect.initial_reconnect_delay, uri.reconnect.max_reconnect_delay,
            uri.reconnect.use_exponential_back_off) == (100, 30000, False)
    assert NetworkConnectorConfig(uri="multicast://default").parsed_uri.discovery.address == DEFAULT_ADDRESS


def test_bad_multicast_network_connector_uri_says_what_to_write():
    from reference_broker.cluster.uris import NetworkUriError, parse_network_uri

    with pytest.raises(NetworkUriError, match=r"multicast://default\?group=east"):
        parse_network_uri("multicast://east")
    with pytest.raises(NetworkUriError, match="unknown option 'colour'.*reconnect options"):
        parse_network_uri("multicast://default?colour=1")
