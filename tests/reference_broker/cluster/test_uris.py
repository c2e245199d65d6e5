"""Network connector URIs and the reconnect back-off (ActiveMQ "Networks of Brokers",
"Static discovery" and "MasterSlave Discovery")."""

import pytest

from reference_broker.cluster.uris import NetworkUriError, Peer, ReconnectPolicy, parse_network_uri


def test_static_uri_with_defaults():
    uri = parse_network_uri("static:(tcp://host1:61616,tcp://host2:61617)")
    assert uri.scheme == "static" and not uri.master_slave
    assert uri.peers == (Peer("host1", 61616), Peer("host2", 61617))
    # The "Static discovery" table's defaults.
    assert uri.reconnect == ReconnectPolicy(1000, 30000, True, 2)


def test_static_uri_reconnect_options():
    uri = parse_network_uri("static:(tcp://h:1)?maxReconnectDelay=5000&useExponentialBackOff=false"
                            "&initialReconnectDelay=250&backOffMultiplier=3")
    assert uri.reconnect == ReconnectPolicy(250, 5000, False, 3)


def test_masterslave_uri_keeps_order():
    uri = parse_network_uri("masterslave:(tcp://master:1,tcp://slave1:2,tcp://slave2:3)?initialReconnectDelay=10")
    assert uri.master_slave
    assert [p.host for p in uri.peers] == ["master", "slave1", "slave2"]
    assert uri.reconnect.initial_reconnect_delay == 10


@pytest.mark.parametrize("uri, fragment", [
    ("static:(tcp://h:1)?maxReconectDelay=5", "unknown option 'maxReconectDelay'"),
    ("static:(tcp://h:1)?useExponentialBackOff=maybe", "expected true or false"),
    ("static:(tcp://h:1)?initialReconnectDelay=-1", "at least 0"),
    ("static:(tcp://h:1)?backOffMultiplier=0.5", "at least 1"),
    ("static:()", "no peer"),
    ("static:(http://h)", "expected tcp://HOST:PORT"),
    ("failover:(tcp://h:1)", "expected static:("),
])
def test_bad_uris_say_what_is_wrong(uri, fragment):
    with pytest.raises(NetworkUriError, match=fragment.replace("(", r"\(")):
        parse_network_uri(uri)


def test_exponential_back_off_doubles_up_to_the_maximum():
    policy = ReconnectPolicy(initial_reconnect_delay=1000, max_reconnect_delay=5000)
    assert [policy.delay_ms(n) for n in range(1, 6)] == [1000, 2000, 4000, 5000, 5000]


def test_without_back_off_the_initial_delay_repeats():
    policy = ReconnectPolicy(initial_reconnect_delay=300, use_exponential_back_off=False)
    assert [policy.delay_ms(n) for n in range(1, 4)] == [300, 300, 300]


def test_back_off_multiplier():
    assert ReconnectPolicy(100, 100_000, True, 3).delay_ms(3) == 900
