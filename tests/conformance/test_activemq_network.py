"""The networks-of-brokers launcher (conformance.targets.activemq.network): the activemq.xml it
generates for each network-connector property of the "Networks of Brokers" page, its defaults, and
the topology checks, all without starting a broker."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from conformance.targets.activemq.process import ActiveMQProcess
from conformance.targets.activemq.network import (
    ActiveMQNetwork,
    Bridge,
    BridgeFilterPolicy,
    NetworkConnectorOptions,
    NetworkNode,
    destination_element,
    render_network_connector,
    static_uri,
)

CORE = "{http://activemq.apache.org/schema/core}"
PEER = ["tcp://127.0.0.1:61616"]


def connector(options: NetworkConnectorOptions) -> ET.Element:
    return ET.fromstring(render_network_connector(PEER, options))


def test_defaults_are_the_documents_table():
    o = NetworkConnectorOptions()
    assert (o.name, o.dynamic_only, o.decrease_network_consumer_priority, o.network_ttl) == ("bridge", False, True, 1)
    assert (o.message_ttl, o.consumer_ttl) == (None, None)  # taken from network_ttl by the broker
    assert (o.conduit_subscriptions, o.duplex, o.prefetch_size, o.static_bridge) == (True, False, 1000, False)
    assert (o.suppress_duplicate_queue_subscriptions, o.bridge_temp_destinations, o.always_sync_send) == (False, True, False)
    assert (o.use_virtual_dest_subs, o.user_name, o.password) == (False, None, None)
    assert (o.excluded_destinations, o.dynamically_included_destinations, o.statically_included_destinations) == ((), (), ())
    assert (o.initial_reconnect_delay, o.max_reconnect_delay, o.use_exponential_back_off, o.back_off_multiplier) == (
        1000, 30000, True, 2)


def test_default_connector_writes_nothing_the_scenario_did_not_set():
    # issue 26: unset options, the name included, are left to ActiveMQ (its defaults are what a
    # default statement checks: NOB-NAME-2 for the name; tests/conformance/test_unset_options_are_left_to_the_broker.py)
    element = connector(NetworkConnectorOptions())
    assert element.attrib == {"uri": "static:(tcp://127.0.0.1:61616)"}
    assert list(element) == []  # no destination lists


@pytest.mark.parametrize("option, value, attribute, text", [
    ("name", "queues_only", "name", "queues_only"),
    ("dynamic_only", True, "dynamicOnly", "true"),
    ("decrease_network_consumer_priority", False, "decreaseNetworkConsumerPriority", "false"),
    ("network_ttl", 3, "networkTTL", "3"),
    ("message_ttl", 2, "messageTTL", "2"),
    ("consumer_ttl", 1, "consumerTTL", "1"),
    ("conduit_subscriptions", False, "conduitSubscriptions", "false"),
    ("use_virtual_dest_subs", True, "useVirtualDestSubs", "true"),
    ("duplex", True, "duplex", "true"),
    ("prefetch_size", 7, "prefetchSize", "7"),
    ("suppress_duplicate_queue_subscriptions", True, "suppressDuplicateQueueSubscriptions", "true"),
    ("bridge_temp_destinations", False, "bridgeTempDestinations", "false"),
    ("always_sync_send", True, "alwaysSyncSend", "true"),
    ("static_bridge", True, "staticBridge", "true"),
])
def test_each_property_becomes_its_attribute(option, value, attribute, text):
    assert connector(NetworkConnectorOptions(**{option: value})).get(attribute) == text


def test_credentials_are_written_only_when_set():
    element = connector(NetworkConnectorOptions(user_name="bridge-user", password="s3cret&<"))
    assert (element.get("userName"), element.get("password")) == ("bridge-user", "s3cret&<")  # escaped, parses back
    assert "userName" not in connector(NetworkConnectorOptions()).attrib


def test_destination_lists_become_queue_and_topic_elements():
    element = connector(NetworkConnectorOptions(
        excluded_destinations=("queue://exclude.test.foo", "topic://>"),
        dynamically_included_destinations=("queue://include.test.*",),
        statically_included_destinations=("topic://always.include.topic",)))
    def names(tag):
        return [(child.tag, child.get("physicalName")) for child in element.find(tag)]
    assert names("excludedDestinations") == [("queue", "exclude.test.foo"), ("topic", ">")]
    assert names("dynamicallyIncludedDestinations") == [("queue", "include.test.*")]
    assert names("staticallyIncludedDestinations") == [("topic", "always.include.topic")]


def test_reconnect_options_go_on_the_static_uri():
    options = NetworkConnectorOptions(max_reconnect_delay=5000, use_exponential_back_off=False,
                                      initial_reconnect_delay=250, back_off_multiplier=3)
    uri = static_uri(["tcp://h1:1", "tcp://h2:2"], options)
    assert uri.startswith("static:(tcp://h1:1,tcp://h2:2)?")
    assert set(uri.split("?", 1)[1].split("&")) == {
        "initialReconnectDelay=250", "maxReconnectDelay=5000", "useExponentialBackOff=false", "backOffMultiplier=3"}
    # & in the URI is escaped in the attribute and parses back
    assert connector(options).get("uri").count("&") == 3


@pytest.mark.parametrize("kwargs, message", [
    ({"prefetch_size": 0}, "prefetch_size must be > 0"),
    ({"network_ttl": 0}, "network_ttl counts brokers"),
    ({"message_ttl": 0}, "message_ttl counts brokers"),
    ({"name": "has space"}, "network connector name"),
    ({"excluded_destinations": "queue://a"}, "is a tuple of destinations"),
    ({"dynamically_included_destinations": ("a.b",)}, "must be queue://NAME"),
    ({"statically_included_destinations": ("queue://a.>",)}, "takes no wildcards"),
    ({"user_name": "u"}, "user_name and password go together"),
    ({"back_off_multiplier": 0}, "back_off_multiplier > 0"),
])
def test_bad_options_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NetworkConnectorOptions(**kwargs)


def test_every_option_is_rendered_somewhere():
    # a field added to the model without a place in the XML or the URI would be silently ignored
    changed = {"name": "x", "user_name": "u", "password": "p", "message_ttl": 4, "consumer_ttl": 4,
               "excluded_destinations": ("queue://e",), "dynamically_included_destinations": ("queue://d",),
               "statically_included_destinations": ("queue://s",), "initial_reconnect_delay": 5,
               "max_reconnect_delay": 6, "back_off_multiplier": 5, "destination_filter": "Queue.f"}
    defaults = NetworkConnectorOptions()
    baseline = render_network_connector(PEER, defaults)
    for name in NetworkConnectorOptions.model_fields:
        default = getattr(defaults, name)
        value = changed.get(name, (not default) if isinstance(default, bool) else
                            (default + 1 if isinstance(default, int) else default))
        kwargs = {name: value}
        if name in ("user_name", "password"):  # they go together
            kwargs = {"user_name": "u", "password": "p"}
        assert render_network_connector(PEER, NetworkConnectorOptions(**kwargs)) != baseline, name


def test_destination_element_escapes_and_checks():
    element = ET.fromstring(destination_element('queue://a"b<c'))  # quoted so that it parses back
    assert (element.tag, element.get("physicalName")) == ("queue", 'a"b<c')
    with pytest.raises(ValueError, match="queue://NAME or topic://NAME"):
        destination_element("temp-queue://x")


# --------------------------------------------------------------------------- ActiveMQProcess hook


def test_process_without_network_keeps_its_old_config(tmp_path):
    root = ET.fromstring(ActiveMQProcess(tmp_path).render_config())
    broker = root.find(f"{CORE}broker")
    assert broker.find(f"{CORE}networkConnectors") is None
    assert "networkConnectorStartAsync" not in broker.attrib


def test_process_renders_network_connectors_and_broker_attributes(tmp_path):
    xml = render_network_connector(PEER, NetworkConnectorOptions(duplex=True))
    process = ActiveMQProcess(tmp_path, network_connectors_xml=xml,
                              broker_attributes={"networkConnectorStartAsync": "true"})
    broker = ET.fromstring(process.render_config()).find(f"{CORE}broker")
    connectors = broker.findall(f"{CORE}networkConnectors/{CORE}networkConnector")
    assert [c.get("duplex") for c in connectors] == ["true"]
    assert broker.get("networkConnectorStartAsync") == "true"


def test_process_refuses_a_bad_broker_attribute_name(tmp_path):
    with pytest.raises(ValueError, match="XML attribute names"):
        ActiveMQProcess(tmp_path, broker_attributes={"bad name": "x"})


# --------------------------------------------------------------------------- topology


def line_network(tmp_path, **options) -> ActiveMQNetwork:
    return ActiveMQNetwork(tmp_path, ("A", "B", "C"), (
        Bridge("A", "B", NetworkConnectorOptions(**options)), Bridge("B", "C", NetworkConnectorOptions(**options))))


def test_each_broker_gets_connectors_to_its_peers_ports(tmp_path):
    net = line_network(tmp_path, network_ttl=2)
    net._assign_ports()
    ports = {n: node.process.openwire_port for n, node in net.nodes.items()}
    assert len(set(ports.values())) == 3 and all(ports.values())
    a = ET.fromstring(f"<r>{net.connectors_xml('A')}</r>")
    assert [c.get("uri") for c in a] == [f"static:(tcp://127.0.0.1:{ports['B']})"]
    assert [c.get("networkTTL") for c in a] == ["2"]
    assert net.connectors_xml("C") == ""  # the end of the line has no connector
    assert net.start_order() == ["C", "B", "A"]  # targets first
    assert net.expected_bridges() == {"A": ["nob-B"], "B": ["nob-C"], "C": []}


def test_the_established_line_of_the_log_is_recognised(tmp_path):
    node = NetworkNode("A", ActiveMQProcess(tmp_path, name="nob-A"))
    tmp_path.mkdir(exist_ok=True)
    node.process.log_path.write_text(
        "2026-11-22 08:55:26,282 | INFO  | Network connection between vm://nob-A#0 and tcp:///127.0.0.1:48385@56350 "
        "(nob-B) has been established. | org.apache.activemq.network.DemandForwardingBridgeSupport | x\n"
        "... | Network connection between vm://nob-Z#2 and tcp:///127.0.0.1:1@2 (nob-A) has been established. | y\n")
    assert node.established_bridges() == ["nob-B"]  # only the lines of its own connectors


@pytest.mark.parametrize("names, bridges, message", [
    (("A",), (), "2 to 4 distinct brokers"),
    (("A", "A"), (), "2 to 4 distinct brokers"),
    (("A", "B"), (Bridge("A", "C"),), "names 'C'"),
    (("A", "B"), (Bridge("A", "B"), Bridge("A", "B")), "need different names"),
    (("A", "B", "C"), (Bridge("A", "B"), Bridge("A", "C")), "connectors on one broker need different names"),
])
def test_bad_topologies_are_refused(tmp_path, names, bridges, message):
    with pytest.raises(ValueError, match=message):
        ActiveMQNetwork(tmp_path, names, bridges)


def test_a_bridge_to_itself_is_refused():
    with pytest.raises(ValueError, match="to itself"):
        Bridge("A", "A")


def test_two_named_connectors_between_the_same_pair_are_allowed(tmp_path):
    net = ActiveMQNetwork(tmp_path, ("A", "B"), (Bridge("A", "B", NetworkConnectorOptions(name="one")),
                                                 Bridge("A", "B", NetworkConnectorOptions(name="two"))))
    net._assign_ports()
    assert [c.get("name") for c in ET.fromstring(f"<r>{net.connectors_xml('A')}</r>")] == ["one", "two"]
    assert net.expected_bridges()["A"] == ["nob-B", "nob-B"]


@pytest.mark.parametrize("launcher", ["activemq", "reference"])
@pytest.mark.parametrize("reverse", [False, True], ids=["same-direction", "opposite-direction"])
def test_duplex_connectors_with_one_name_are_refused_before_start(tmp_path, launcher, reverse):
    """The networks page asks for a name of its own for each duplex connector between two brokers
    ("Duplex network connectors"): both launchers refuse a configuration that breaks this before
    starting anything, naming the option. A check of the harness's input, not of a broker: what a
    broker does with two of one name the page does not say (NOB-DUPLEX-3 is checked on the broker by
    test_named_duplex_connectors_split_destinations)."""
    if launcher == "activemq":
        network_class = ActiveMQNetwork
    else:
        from conformance.targets.reference.network import ReferenceNetwork as network_class
    second = ("B", "A") if reverse else ("A", "B")
    bridges = (Bridge("A", "B", NetworkConnectorOptions(name="twin", duplex=True,
                                                        dynamically_included_destinations=("queue://x.>",))),
               Bridge(*second, NetworkConnectorOptions(name="twin", duplex=True,
                                                       dynamically_included_destinations=("queue://y.>",))))
    with pytest.raises(ValueError) as refused:
        network_class(tmp_path, ("A", "B"), bridges)  # raises in the constructor: nothing started
    assert "twin" in str(refused.value) and "name" in str(refused.value), (
        f"the error should name the connectors' shared name and the option to change: {refused.value}")


def test_stopping_a_network_that_never_started_is_harmless(tmp_path):
    net = line_network(tmp_path)
    net.stop()
    assert not any(node.running for node in net.nodes.values())


def test_bridge_filter_policy_renders_the_documents_policy_entry(tmp_path):
    policy = BridgeFilterPolicy("TEST.>", replay_when_no_consumers=True, replay_delay=500)
    net = ActiveMQNetwork(tmp_path, ("A", "B"), (Bridge("A", "B"),), policies=(policy,))
    for node in net.nodes.values():
        broker = ET.fromstring(node.process.render_config()).find(f"{CORE}broker")
        entries = broker.findall(f"{CORE}destinationPolicy/{CORE}policyMap/{CORE}policyEntries/{CORE}policyEntry")
        assert [e.get("queue") for e in entries] == ["TEST.>"]
        factory = entries[0].find(f"{CORE}networkBridgeFilterFactory/{CORE}conditionalNetworkBridgeFilterFactory")
        assert dict(factory.attrib) == {"replayWhenNoConsumers": "true", "replayDelay": "500",
                                        "rateLimit": "0", "rateDuration": "1000"}


@pytest.mark.parametrize("kwargs, message", [
    (dict(queue="queue://TEST.>"), "policy pattern"),
    (dict(queue="T", replay_delay=-1), ">= 0"),
    (dict(queue="T", rate_duration=0), "rate_duration > 0"),
])
def test_bad_bridge_filter_policies_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BridgeFilterPolicy(**kwargs)


def test_a_separate_ttl_writes_both_ttls_and_no_network_ttl():
    # networkTTL would override both (its setter sets both; Spring applies it after the others).
    element = connector(NetworkConnectorOptions(network_ttl=3, consumer_ttl=2))
    assert (element.get("networkTTL"), element.get("messageTTL"), element.get("consumerTTL")) == (None, "3", "2")
    element = connector(NetworkConnectorOptions(network_ttl=2))
    assert (element.get("networkTTL"), element.get("messageTTL"), element.get("consumerTTL")) == ("2", None, None)
    # without networkTTL the other TTL stays unset (ActiveMQ's default applies to it)
    element = connector(NetworkConnectorOptions(consumer_ttl=2))
    assert (element.get("networkTTL"), element.get("messageTTL"), element.get("consumerTTL")) == (None, None, "2")


class _FakeProcess:
    """Stands in for ActiveMQProcess: ``start`` re-picks the OpenWire port the first
    ``taken_starts`` times, as ActiveMQProcess does when its port was taken before the JVM bound it."""

    def __init__(self, real: ActiveMQProcess, taken_starts: int) -> None:
        self.real = real
        self.taken_starts = taken_starts
        self.starts: list[int] = []  # the OpenWire port each start was asked to use
        self.connectors_at_start: list[str] = []
        self.running = False
        self.name = real.name
        self.host = real.host
        self.stomp_port = self.openwire_port = self.jmx_port = 0
        self.network_connectors_xml = ""

    @property
    def openwire_url(self) -> str:
        return f"tcp://{self.host}:{self.openwire_port}"

    def start(self, timeout: float = 60) -> None:
        self.starts.append(self.openwire_port)
        self.connectors_at_start.append(self.network_connectors_xml)
        if len(self.starts) <= self.taken_starts:
            self.openwire_port += 1  # start() chose another port: the peers' connectors are stale
        self.running = True

    def stop(self) -> None:
        self.running = False


def _fake_network(tmp_path, taken_starts_of_a: int) -> ActiveMQNetwork:
    net = ActiveMQNetwork(tmp_path, ("A", "B"), (Bridge("A", "B"), Bridge("B", "A")))
    for name, node in net.nodes.items():
        node.process = _FakeProcess(node.process, taken_starts_of_a if name == "A" else 0)
    net.wait_for_bridges = lambda timeout=30: None
    return net


def test_a_port_taken_before_its_broker_bound_it_starts_the_network_again_on_fresh_ports(tmp_path):
    net = _fake_network(tmp_path, taken_starts_of_a=1)
    net.start(timeout=30)
    a, b = net["A"].process, net["B"].process
    assert len(a.starts) == 2 and len(b.starts) == 2, "every broker starts again, not only the one that lost its port"
    assert a.running and b.running
    # the second start's connectors name the ports the brokers really bound
    assert f":{a.openwire_port})" in b.connectors_at_start[-1]
    assert f":{b.openwire_port})" in a.connectors_at_start[-1]


def test_a_port_taken_at_every_start_is_reported_after_the_last_attempt(tmp_path):
    from conformance.targets.activemq.network import PortTakenError

    net = _fake_network(tmp_path, taken_starts_of_a=ActiveMQNetwork.START_ATTEMPTS)
    with pytest.raises(PortTakenError, match=r"broker A's OpenWire port \d+ was taken"):
        net.start(timeout=30)
    assert len(net["A"].process.starts) == ActiveMQNetwork.START_ATTEMPTS
    assert not net["A"].process.running and not net["B"].process.running, "a failed start leaves no broker running"


def test_free_ports_stay_out_of_the_ephemeral_range():
    # Outgoing connections take their local ports from the ephemeral range; a port picked for a
    # broker there can be taken by one before the JVM binds it (seen in CI).
    from machinery.process import LISTEN_PORTS_FROM, ephemeral_port_range, free_ports

    low, high = ephemeral_port_range()
    ports = free_ports(12)
    assert len(set(ports)) == 12
    if low - LISTEN_PORTS_FROM >= 1200:
        assert all(LISTEN_PORTS_FROM <= p < low for p in ports), (ports, low, high)
