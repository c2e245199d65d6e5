"""broker.xml for a local Artemis instance, generated from a Scenario (artemis_config.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.scenario import DestinationPolicy, Scenario
from conformance.targets.artemis.config import UnsupportedArtemisPolicy, render

NS = {"c": "urn:activemq:core"}
PORTS = {"core": 10001, "stomp": 10002, "mqtt": 10003, "amqp": 10004}


def _core(config) -> ET.Element:
    return ET.fromstring(config.broker_xml()).find("c:core", NS)


def _settings(core) -> dict[str, dict[str, str]]:
    return {s.get("match"): {c.tag.split("}")[1]: c.text for c in s}
            for s in core.findall("c:address-settings/c:address-setting", NS)}


def _render(scenario: Scenario):
    return render(scenario, name="b1", host="127.0.0.1", ports=PORTS, admin=("brokerconf-admin", "secret"))


def test_one_acceptor_per_listener_on_loopback_with_routing_prefixes():
    core = _core(_render(Scenario("s")))
    acceptors = {a.get("name"): a.text for a in core.findall("c:acceptors/c:acceptor", NS)}
    assert set(acceptors) == set(PORTS)
    for name, url in acceptors.items():
        assert url.startswith(f"tcp://127.0.0.1:{PORTS[name]}?"), url
    assert "protocols=STOMP" in acceptors["stomp"] and "anycastPrefix=/queue/" in acceptors["stomp"]
    assert "multicastPrefix=topic://" in acceptors["amqp"] and "protocols=AMQP" in acceptors["amqp"]
    assert "protocols=MQTT" in acceptors["mqtt"] and "protocols=CORE" in acceptors["core"]


def test_group_and_redelivery_fields_become_address_settings():
    core = _core(_render(Scenario("s", policies=(
        DestinationPolicy("queue://grp.rebalance.>", group_rebalance=True),
        DestinationPolicy("queue://grp.b7.>", group_buckets=7),
        DestinationPolicy("queue://grp.first.>", group_first_key="FirstKey"),
        DestinationPolicy("queue://dlq.>", maximum_redeliveries=2),
    ))))
    got = _settings(core)
    assert got["grp.rebalance.#"] == {"default-group-rebalance": "true"}
    assert got["grp.b7.#"] == {"default-group-buckets": "7"}
    assert got["grp.first.#"] == {"default-group-first-key": "FirstKey"}
    # Classic's maximumRedeliveries counts redeliveries; Artemis counts every delivery attempt
    assert got["dlq.#"] == {"max-delivery-attempts": "3"}
    catch_all = got["#"]
    assert catch_all["dead-letter-address"] == "DLQ" and catch_all["expiry-address"] == "ExpiryQueue"
    assert catch_all["auto-create-queues"] == "true" and catch_all["redistribution-delay"] == "0"
    addresses = {a.get("name") for a in core.findall("c:addresses/c:address", NS)}
    assert {"DLQ", "ExpiryQueue"} <= addresses


def test_security_gives_the_role_every_permission_and_lists_the_users():
    config = _render(Scenario("s", users=(("alice", "pw1"), ("bob", "pw2"))))
    core = _core(config)
    perms = {p.get("type"): p.get("roles") for p in core.findall("c:security-settings/c:security-setting/c:permission",
                                                                   NS)}
    assert perms["send"] == perms["consume"] == perms["manage"] == "amq"
    assert config.users_properties().splitlines() == ["brokerconf-admin = secret", "alice = pw1", "bob = pw2"]
    assert config.roles_properties().strip() == "amq = brokerconf-admin,alice,bob"
    assert not config.anonymous and _render(Scenario("s")).anonymous


@pytest.mark.parametrize("field,value", [("pending_message_limit", 10), ("memory_limit", 1024),
                                         ("eviction", "oldest"), ("producer_flow_control", False),
                                         ("prefetch_rate_multiplier", 2.0)])
def test_classic_only_policy_fields_are_refused_by_name(field, value):
    with pytest.raises(UnsupportedArtemisPolicy, match=field):
        _render(Scenario("s", policies=(DestinationPolicy("topic://slow.>", **{field: value}),)))


def test_broker_wide_memory_limit_is_refused_by_name():
    with pytest.raises(UnsupportedArtemisPolicy, match="memory_limit"):
        _render(Scenario("s", memory_limit=1 << 20))


def test_the_admin_name_is_reserved():
    with pytest.raises(UnsupportedArtemisPolicy, match="brokerconf-admin"):
        _render(Scenario("s", users=(("brokerconf-admin", "x"),)))


@pytest.mark.parametrize("role", ["primary", "backup"])
def test_shared_store_nodes_get_their_ha_policy_and_the_shared_directories(role):
    config = render(Scenario(name="ha"), name="b1", host="127.0.0.1", ports=PORTS, admin=("brokerconf-admin", "s"),
                    ha_policy=role, data_directory="/shared/data")
    core = _core(config)
    ns = "{urn:activemq:core}"
    for element in ("journal", "bindings", "paging", "large-messages"):
        assert core.find(f"{ns}{element}-directory").text == f"/shared/data/{element}"
    node = core.find(f"{ns}ha-policy/{ns}shared-store/{ns}{role}")
    assert node is not None and node.find(f"{ns}failover-on-shutdown").text == "true"
    if role == "backup":  # a restarted primary waits for the lock instead of taking the store back
        assert node.find(f"{ns}allow-failback").text == "false"


def test_without_ha_policy_the_broker_keeps_its_own_data_directory():
    core = _core(_render(Scenario(name="plain")))
    assert core.find("{urn:activemq:core}ha-policy") is None
    assert core.find("{urn:activemq:core}journal-directory").text == "data/journal"


def test_journal_file_size_is_10m_unless_the_launcher_asks_for_another():
    # the simulated NFS store's groups ask for 1M (artemis/shared_store.py NFS_JOURNAL_FILE_SIZE):
    # each journal file is written out in full at creation, slow through the FUSE mount
    assert _core(_render(Scenario("s"))).find("c:journal-file-size", NS).text == "10M"
    small = render(Scenario("s"), name="b1", host="127.0.0.1", ports=PORTS, admin=("brokerconf-admin", "secret"),
                   journal_file_size="1M")
    assert _core(small).find("c:journal-file-size", NS).text == "1M"
