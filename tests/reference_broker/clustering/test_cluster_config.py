"""The [cluster_connection] section (artemis-clusters.md, "Configuring Cluster Connections":
the options in snake_case with the chapter's defaults) and the redistribution_delay address
setting ("Message Redistribution"); bad values are refused naming the option."""

from __future__ import annotations

import pytest

from reference_broker.config import ConfigError, build_config
from reference_broker.engine.names import QUEUE, DestinationName
from reference_broker.engine.policy import Policies


def test_the_chapters_defaults():
    cc = build_config({"cluster_connection": {}}).cluster_connection
    assert (cc.address, cc.message_load_balancing, cc.max_hops) == ("", "ON_DEMAND", 1)
    assert (cc.retry_interval, cc.retry_interval_multiplier, cc.max_retry_interval) == (500, 1.0, 2000)
    assert (cc.initial_connect_attempts, cc.reconnect_attempts, cc.use_duplicate_detection) == (-1, -1, True)
    assert (cc.check_period, cc.connection_ttl) == (30000, 60000)
    assert (cc.scale_down, cc.scale_down_group_name, cc.grouping_handler, cc.discovery) == (False, None, None, None)
    discovery = build_config({"cluster_connection": {"discovery": {}}}).cluster_connection.discovery
    assert (discovery.broadcast_period, discovery.refresh_timeout) == (2000, 10000)
    grouping = build_config({"cluster_connection": {"grouping_handler": {"type": "LOCAL"}}}).cluster_connection.grouping_handler
    assert (grouping.timeout, grouping.group_timeout, grouping.reaper_period) == (5000, -1, 30000)
    assert build_config({}).cluster_connection is None


@pytest.mark.parametrize("section, named", [
    ({"message_load_balancing": "SOMETIMES"}, "cluster_connection.message_load_balancing"),
    ({"max_hops": -1}, "cluster_connection.max_hops"),
    ({"static_connectors": ["nohost"]}, "cluster_connection.static_connectors"),
    ({"retry_interval": 0}, "cluster_connection.retry_interval"),
    ({"retry_interval_multiplier": 0.5}, "cluster_connection.retry_interval_multiplier"),
    ({"retry_interval": 3000}, "max_retry_interval"),
    ({"reconnect_attempts": -2}, "cluster_connection.reconnect_attempts"),
    ({"acceptor": "nowhere"}, "cluster_connection.acceptor"),
    ({"discovery": {"group_address": "not-an-ip"}}, "cluster_connection.discovery.group_address"),
    ({"discovery": {"refresh_timeout": 0}}, "cluster_connection.discovery.refresh_timeout"),
    ({"grouping_handler": {"type": "SOMEWHERE"}}, "cluster_connection.grouping_handler.type"),
    ({"grouping_handler": {"type": "REMOTE"}}, "local_node"),
    ({"grouping_handler": {"type": "LOCAL", "group_timeout": 0}}, "cluster_connection.grouping_handler.group_timeout"),
    ({"connection_ttl": 0}, "cluster_connection.connection_ttl"),
    ({"max_hop": 2}, "did you mean 'max_hops'"),
])
def test_bad_values_are_refused_naming_the_option(section, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        build_config({"cluster_connection": section})


def test_address_prefix_matching_with_exclusions_winning():
    cc = build_config({"cluster_connection": {"address": "eu,!eu.uk"}}).cluster_connection
    assert cc.matches("eu.de") and cc.matches("europe") and not cc.matches("eu.uk.london") and not cc.matches("us")
    assert build_config({"cluster_connection": {}}).cluster_connection.matches("anything")
    assert build_config({"cluster_connection": {"address": "!eu"}}).cluster_connection.matches("us")


def test_wildcard_characters_in_the_address_are_literal():
    """CLU-ADDR-4: prefixes only; "eu.#" covers "eu.#.x", not "eu.fr", and is named at start."""
    cc = build_config({"cluster_connection": {"address": "eu.#,!us.*"}}).cluster_connection
    assert not cc.matches("eu.fr") and cc.matches("eu.#.x")
    assert cc.literal_wildcards() == ["eu.#", "us.*"]


def test_redistribution_delay_address_setting():
    policies = Policies(build_config({"address_settings": [
        {"match": "#", "redistribution_delay": 0}, {"match": "orders.#", "redistribution_delay": 5000},
        {"match": "orders.eu", "default_group_buckets": 4}]}))
    assert policies.redistribution_delay_for(DestinationName(QUEUE, "other")) == 0
    assert policies.redistribution_delay_for(DestinationName(QUEUE, "orders.eu")) == 5000, \
        "the most specific setting that sets it wins"
    assert Policies(build_config({})).redistribution_delay_for(DestinationName(QUEUE, "x")) == -1, "-1: the default"
    with pytest.raises(ConfigError, match="redistribution_delay"):
        build_config({"address_settings": [{"match": "#", "redistribution_delay": -2}]})
