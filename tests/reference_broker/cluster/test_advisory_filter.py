"""destinationFilter and advisorySupport of the reference broker's networks (ActiveMQ "Networks of
Brokers", "Dynamic networks", "Pure static networks", "Configuration Pitfalls")."""

import pytest

from reference_broker.cluster.advisories import advisory_subscriptions, publishes_advisories
from reference_broker.cluster.network_config import NetworkConnectorProperties
from reference_broker.config import build_config


def test_without_a_filter_every_consumer_advisory_is_heard():
    assert advisory_subscriptions(None) == ["/topic/ActiveMQ.Advisory.Consumer.>"]


def test_the_prefix_is_implied_unless_an_entry_has_it():
    # the document's example: the first entry without the prefix, the second with it
    assert advisory_subscriptions("Queue.include.test.foo,ActiveMQ.Advisory.Consumer.Topic.include.test.bar") == [
        "/topic/ActiveMQ.Advisory.Consumer.Queue.include.test.foo",
        "/topic/ActiveMQ.Advisory.Consumer.Topic.include.test.bar"]


def test_a_filter_with_spaces_or_slashes_is_refused():
    with pytest.raises(ValueError, match="destination_filter"):
        NetworkConnectorProperties(destination_filter="Queue.a, Queue.b")


def test_advisories_are_published_unless_switched_off_explicitly():
    assert publishes_advisories(build_config({"network_connectors": []}))
    assert publishes_advisories(build_config({"advisory_support": True}))
    assert not publishes_advisories(build_config({"advisory_support": False}))
