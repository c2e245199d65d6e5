"""Demand tracking (reference_broker/cluster/demand.py) after ActiveMQ "Networks of Brokers":
conduit collapse, consumer TTL and loop suppression, priorities, destination lists with wildcards."""

from reference_broker.cluster.demand import (
    RemoteConsumer,
    desired_consumers,
    dynamically_forwarded,
    static_demand,
)
from reference_broker.cluster.network_config import NetworkConnectorConfig

Q = "queue://Q.TEST"


def config(**options) -> NetworkConnectorConfig:
    return NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)", **options)


def local(n: int, selector: str | None = None) -> list[RemoteConsumer]:
    return [RemoteConsumer(f"c{i}", (), 0, selector) for i in range(n)]


def test_conduit_collapses_a_peers_consumers_into_one():
    wanted = desired_consumers(config(), Q, "B", "A", local(2))
    assert list(wanted) == ["conduit"]
    assert wanted["conduit"].path == ("B",)


def test_without_conduit_one_network_consumer_per_remote_consumer():
    wanted = desired_consumers(config(conduit_subscriptions=False), Q, "B", "A", local(2, "colour = 'red'"))
    assert sorted(wanted) == ["c0", "c1"]
    # Without conduit each network consumer keeps its consumer's selector; conduit ignores them.
    assert {d.selector for d in wanted.values()} == {"colour = 'red'"}
    assert desired_consumers(config(), Q, "B", "A", local(2, "colour = 'red'"))["conduit"].selector is None


def test_no_consumers_no_demand():
    assert desired_consumers(config(), Q, "B", "A", []) == {}


def test_consumer_ttl_limits_how_far_demand_travels():
    from_c = [RemoteConsumer("nc", ("C",), -5)]  # B announces a network consumer for C's consumer
    assert desired_consumers(config(network_ttl=1), Q, "B", "A", from_c) == {}
    wanted = desired_consumers(config(network_ttl=2), Q, "B", "A", from_c)
    assert wanted["conduit"].path == ("B", "C")
    # consumer_ttl alone decides for subscriptions; message_ttl does not matter here.
    assert desired_consumers(config(network_ttl=1, consumer_ttl=2), Q, "B", "A", from_c)
    assert not desired_consumers(config(network_ttl=2, consumer_ttl=1), Q, "B", "A", from_c)


def test_loop_suppression_ignores_demand_that_came_through_this_broker():
    # B's network consumer exists because of A's own consumer: A must not forward to it.
    looped = [RemoteConsumer("nc", ("A",), -5)]
    assert desired_consumers(config(network_ttl=5), Q, "B", "A", looped) == {}
    # In a mesh, the nearest eligible path wins for the conduit.
    mixed = [RemoteConsumer("far", ("C", "D"), -6), RemoteConsumer("near", (), 0), RemoteConsumer("loop", ("A",))]
    assert desired_consumers(config(network_ttl=5), Q, "B", "A", mixed)["conduit"].path == ("B",)


def test_decreased_priority_drops_with_hops():
    one = desired_consumers(config(), Q, "B", "A", local(1))["conduit"]
    two = desired_consumers(config(network_ttl=2), Q, "B", "A", [RemoteConsumer("n", ("C",))])["conduit"]
    assert (one.priority, two.priority) == (-5, -6)
    flat = desired_consumers(config(decrease_network_consumer_priority=False), Q, "B", "A", local(1))
    assert flat["conduit"].priority == 0


def test_excluded_destinations_with_wildcards():
    c = config(excluded_destinations=("queue://nob.excluded.>", "topic://*.secret"))
    assert not dynamically_forwarded(c, "queue://nob.excluded.a.b")
    assert dynamically_forwarded(c, "queue://nob.allowed")
    assert not dynamically_forwarded(c, "topic://x.secret")
    assert dynamically_forwarded(c, "topic://x.y.secret")  # * is one element
    assert dynamically_forwarded(c, "topic://nob.excluded.a")  # kinds differ
    assert desired_consumers(c, "queue://nob.excluded.q", "B", "A", local(1)) == {}


def test_dynamically_included_limits_demand_and_exclusion_wins():
    c = config(dynamically_included_destinations=("queue://include.>",),
               excluded_destinations=("queue://include.not",))
    assert dynamically_forwarded(c, "queue://include.me")
    assert not dynamically_forwarded(c, "queue://other")
    assert not dynamically_forwarded(c, "queue://include.not")


def test_static_inclusion_ignores_exclusions_and_static_bridge_ignores_demand():
    c = config(excluded_destinations=("queue://nob.excluded.>",),
               statically_included_destinations=("queue://nob.excluded.always",), static_bridge=True)
    assert list(static_demand(c, "B")) == ["queue://nob.excluded.always"]
    assert desired_consumers(c, "queue://anything", "B", "A", local(1)) == {}
