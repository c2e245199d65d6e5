"""Client-side connection load balancing (conformance/clients/load_balancing.py) without brokers:
the four policies of the Artemis "Clusters" chapter, "Client-Side Load balancing" (CLU-CLIENT-2
to -6), checked as distribution properties over seeded random generators, and the factory that
spreads connections over a cluster's addresses."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conformance.clients import ConnectFailed
from conformance.clients.load_balancing import (
    ARTEMIS_CLASS_NAMES,
    DEFAULT_POLICY,
    POLICIES,
    BalancedConnections,
    FirstElement,
    Random,
    RandomSticky,
    RoundRobin,
    load_balancing_policy,
)
from tests.conformance.test_failover import FakeNetwork

SEEDS = range(20)


def picks(policy, size: int, n: int) -> list[int]:
    return [policy.select(size) for _ in range(n)]


# --------------------------------------------------------------------------- the policies

@pytest.mark.parametrize("seed", SEEDS)
def test_round_robin_visits_every_node_once_per_cycle_in_list_order_from_its_start(seed):
    order = picks(RoundRobin(random.Random(seed)), 4, 12)
    start = order[0]
    assert order == [(start + i) % 4 for i in range(12)], f"CLU-CLIENT-2: round robin went {order}"
    for cycle in range(3):
        assert sorted(order[4 * cycle:4 * cycle + 4]) == [0, 1, 2, 3]


def test_round_robin_starts_at_a_random_node():
    starts = {RoundRobin(random.Random(seed)).select(4) for seed in range(200)}
    assert starts == {0, 1, 2, 3}, f"CLU-CLIENT-2: the first pick should be random, was only ever {starts}"


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sticky_repeats_its_random_first_pick(seed):
    order = picks(RandomSticky(random.Random(seed)), 3, 30)
    assert order == [order[0]] * 30, f"CLU-CLIENT-4: random sticky moved: {order}"


def test_random_sticky_first_pick_is_random():
    firsts = {RandomSticky(random.Random(seed)).select(3) for seed in range(200)}
    assert firsts == {0, 1, 2}


def test_first_element_always_picks_index_0():
    assert picks(FirstElement(), 5, 50) == [0] * 50


def test_random_covers_every_node_and_does_not_cycle():
    order = picks(Random(random.Random(7)), 3, 3000)
    counts = Counter(order)
    assert set(counts) == {0, 1, 2}
    # each node gets about a third (binomial sd ~26 over 3000 draws; 200 is beyond 7 sd)
    assert all(abs(c - 1000) < 200 for c in counts.values()), counts
    # not round robin in disguise: some pick repeats the previous one (1/3 of the time on average)
    assert sum(a == b for a, b in zip(order, order[1:])) > 500


def test_the_same_seed_gives_the_same_picks():
    for name in POLICIES:
        a = picks(load_balancing_policy(name, random.Random(3)), 5, 20)
        b = picks(load_balancing_policy(name, random.Random(3)), 5, 20)
        assert a == b, name


def test_a_policy_whose_position_no_longer_fits_a_shorter_list_starts_afresh():
    for policy in (RoundRobin(random.Random(1)), RandomSticky(random.Random(1))):
        policy.select(5)
        policy.position = 4  # as if the last pick had been node 4 of 5
        assert 0 <= policy.select(2) < 2


def test_an_empty_list_is_refused():
    with pytest.raises(ValueError, match="1 or more addresses"):
        RoundRobin().select(0)


# --------------------------------------------------------------------------- the lookup

def test_default_policy_is_round_robin():
    assert DEFAULT_POLICY == "round_robin"
    assert isinstance(load_balancing_policy(), RoundRobin)
    assert isinstance(load_balancing_policy(None), RoundRobin)


def test_every_name_and_artemis_class_name_resolves():
    assert POLICIES == ("round_robin", "random", "random_sticky", "first_element")
    for name in POLICIES:
        assert load_balancing_policy(name).name == name
    for class_name, name in ARTEMIS_CLASS_NAMES.items():
        assert load_balancing_policy(class_name).name == name


def test_an_unknown_name_is_refused_naming_the_option_and_the_valid_names():
    with pytest.raises(ValueError) as info:
        load_balancing_policy("least_loaded")
    message = str(info.value)
    assert "load_balancing_policy" in message and "'least_loaded'" in message
    assert all(name in message for name in POLICIES)


# --------------------------------------------------------------------------- the factory

class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, host, port, protocol, **options):
        self.calls.append((host, port, protocol, options))
        return (host, port)


ADDRESSES = [("127.0.0.1", 6001), ("127.0.0.1", 6002), ("127.0.0.1", 6003)]


def test_factory_spreads_connections_round_robin_by_default():
    recorder = Recorder()
    factory = BalancedConnections(ADDRESSES, "stomp", rng=random.Random(5), connect=recorder, timeout=3.0)
    made = [factory.connect() for _ in range(6)]
    ports = [port for _, port in made]
    start = ADDRESSES.index(made[0])
    assert ports == [ADDRESSES[(start + i) % 3][1] for i in range(6)]
    assert factory.picks == [(start + i) % 3 for i in range(6)]
    assert all(call[2] == "stomp" and call[3] == {"timeout": 3.0} for call in recorder.calls)


def test_factory_options_are_overridden_per_connection():
    recorder = Recorder()
    factory = BalancedConnections(["h:1"], "amqp", policy="first_element", connect=recorder, login="a")
    factory.connect(login="b", client_id="c")
    assert recorder.calls == [("h", 1, "amqp", {"login": "b", "client_id": "c"})]


@pytest.mark.parametrize("bad", [[], ["nohost"], ["h:port"]])
def test_factory_refuses_bad_addresses(bad):
    with pytest.raises(ValueError):
        BalancedConnections(bad, "stomp")


def test_factory_refuses_an_unknown_policy_name():
    with pytest.raises(ValueError, match="load_balancing_policy 'sticky'"):
        BalancedConnections(ADDRESSES, "stomp", policy="sticky")


def test_factory_lets_a_refused_connection_raise():
    def refuse(host, port, protocol, **options):
        raise ConnectFailed(f"cannot open a socket to {host}:{port}")
    factory = BalancedConnections(ADDRESSES, "stomp", policy="first_element", connect=refuse)
    with pytest.raises(ConnectFailed, match="6001"):
        factory.connect()


def test_failover_uri_starts_at_the_pick_and_wraps():
    factory = BalancedConnections(ADDRESSES, "stomp")
    assert factory.failover_uri(2, "timeout=500") == (
        "failover:(stomp://127.0.0.1:6003,stomp://127.0.0.1:6001,stomp://127.0.0.1:6002)"
        "?randomize=false&timeout=500")


def test_failover_clients_start_on_the_node_the_policy_picks_and_fail_over_to_the_others():
    network = FakeNetwork(1, 2, 3)
    factory = BalancedConnections(["h:1", "h:2", "h:3"], "stomp", rng=random.Random(11), connect=network.connect)
    clients = [factory.connect_failover("initialReconnectDelay=1", monitor_interval=0.005) for _ in range(3)]
    try:
        assert sorted(c.uri.port for c in clients) == [1, 2, 3]
        assert [c.uri.port for c in clients] == [p + 1 for p in factory.picks]
    finally:
        for c in clients:
            c.close()
    network.brokers[1].up = False
    sticky = BalancedConnections(["h:1", "h:2", "h:3"], "stomp", policy="first_element", connect=network.connect)
    client = sticky.connect_failover("initialReconnectDelay=1", monitor_interval=0.005)
    try:
        assert client.uri.port == 2  # node 0 refused: the failover list goes on to the next one
    finally:
        client.close()
