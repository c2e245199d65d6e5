"""The real-broker targets: ActiveMQ Classic (activemq_target, activemq_policy, jmx), RabbitMQ and
Mosquitto (peer_targets).

The first half needs no broker: the scenario -> activemq.xml translation is checked on strings
(parsed as XML, so a malformed fragment fails here rather than in a JVM log). The second half
launches the Debian-packaged brokers (marker ``real_broker``) and is skipped, with the
availability reason, only when a broker is not installed.
"""

from __future__ import annotations

import socket
import threading
import xml.etree.ElementTree as ET

import psutil
import pytest
import stomp

from conformance.requirements import skip_or_fail, target_requirement
from conformance.scenario import DEFAULT_SCENARIO, DestinationPolicy, Scenario
from conformance.targets.activemq.process import ActiveMQProcess, activemq_amqp_available
from conformance.targets.activemq.policy import REDELIVERY_DELAY_MS, UnsupportedPolicy, render
from conformance.targets.activemq.target import ActiveMQHandle, ActiveMQTarget, destination_pattern, subscription_pattern
from conformance.targets.base import CAPABILITIES, BrokerHandle, TargetUnavailable
from conformance.targets.activemq.jmx import JmxError, MBean
from conformance.targets.mosquitto.process import mqtt_connack
from conformance.targets.mosquitto.target import MosquittoTarget
from conformance.targets.rabbitmq.target import RabbitMQTarget
from conformance.targets.rabbitmq.process import amqp10_open

AMQ_NS = "{http://activemq.apache.org/schema/core}"


def _entries(scenario: Scenario) -> list[ET.Element]:
    """The rendered policy entries, parsed (a malformed fragment raises ParseError here)."""
    xml = render(scenario).policy_entries_xml
    return list(ET.fromstring(f"<policyEntries>{xml}</policyEntries>"))


def _entry(scenario: Scenario, **attr: str) -> ET.Element:
    matches = [e for e in _entries(scenario) if all(e.get(k) == v for k, v in attr.items())]
    assert len(matches) == 1, f"expected one policyEntry with {attr}, got {[e.attrib for e in _entries(scenario)]}"
    return matches[0]


def _plugins(scenario: Scenario) -> ET.Element:
    return ET.fromstring(f"<plugins>{render(scenario).plugins_xml}</plugins>")


# ============================================================== activemq.xml from a scenario (no broker)


def test_constant_pending_limit_becomes_a_constant_strategy_on_the_topic_entry():
    entry = _entry(Scenario("s", policies=(DestinationPolicy("topic://slow.>", pending_message_limit=5),)),
                   topic="slow.>")
    strategy = entry.find("pendingMessageLimitStrategy/constantPendingMessageLimitStrategy")
    assert strategy is not None and strategy.get("limit") == "5"
    assert entry.get("prioritizedMessages") is None  # a queue-only flag
    assert entry.find("messageEvictionStrategy") is None  # left at the broker default


def test_prefetch_rate_multiplier_becomes_a_prefetch_rate_strategy():
    entry = _entry(Scenario("s", policies=(DestinationPolicy("topic://rate.*", prefetch_rate_multiplier=2.5),)),
                   topic="rate.*")
    strategy = entry.find("pendingMessageLimitStrategy/prefetchRatePendingMessageLimitStrategy")
    assert strategy is not None and strategy.get("multiplier") == "2.5"


@pytest.mark.parametrize("eviction, element, prop", [
    ("oldest", "oldestMessageEvictionStrategy", None),
    ("oldest_with_lowest_priority", "oldestMessageWithLowestPriorityEvictionStrategy", None),
    ("unique_property", "uniquePropertyMessageEvictionStrategy", "STOCK"),
])
def test_each_eviction_strategy_has_its_element(eviction, element, prop):
    policy = DestinationPolicy("topic://px.>", pending_message_limit=3, eviction=eviction, eviction_property=prop)
    strategies = list(_entry(Scenario("s", policies=(policy,)), topic="px.>").find("messageEvictionStrategy"))
    assert [s.tag for s in strategies] == [element]
    assert strategies[0].get("propertyName") == prop


def test_memory_limit_flow_control_and_priority_on_a_queue_entry():
    policy = DestinationPolicy("queue://mem.>", memory_limit=100_000, producer_flow_control=False)
    entry = _entry(Scenario("s", policies=(policy,)), queue="mem.>")
    # MemoryPropertyEditor reads "<digits> b" as bytes (checked against the JVM in the real test below)
    assert entry.get("memoryLimit") == "100000 b"
    assert entry.get("producerFlowControl") == "false"
    assert entry.get("prioritizedMessages") == "true"


def test_every_queue_gets_prioritized_messages_through_a_catch_all_entry():
    catch_all = _entry(Scenario("s", policies=(DestinationPolicy("topic://t", pending_message_limit=1),)), queue=">")
    assert catch_all.get("prioritizedMessages") == "true"
    assert _entry(DEFAULT_SCENARIO, queue=">").get("prioritizedMessages") == "true"


def test_a_scenario_catch_all_queue_entry_is_not_duplicated():
    scenario = Scenario("s", policies=(DestinationPolicy("queue://>", producer_flow_control=False),))
    entries = [e for e in _entries(scenario) if e.get("queue") == ">"]
    assert len(entries) == 1
    assert entries[0].get("producerFlowControl") == "false" and entries[0].get("prioritizedMessages") == "true"


def test_group_buckets_map_onto_message_group_map_factories():
    scenario = Scenario("s", policies=(DestinationPolicy("queue://grp.>", group_buckets=8),
                                       DestinationPolicy("queue://all.>", group_buckets=-1)))
    buckets = _entry(scenario, queue="grp.>").find("messageGroupMapFactory/messageGroupHashBucketFactory")
    assert buckets is not None and buckets.get("bucketCount") == "8"
    assert _entry(scenario, queue="all.>").find("messageGroupMapFactory/simpleMessageGroupMapFactory") is not None


def test_group_buckets_zero_cannot_be_expressed_and_says_so():
    scenario = Scenario("s", policies=(DestinationPolicy("queue://g", group_buckets=0),))
    with pytest.raises(UnsupportedPolicy, match=r"group_buckets=0.*no ActiveMQ Classic equivalent"):
        render(scenario)


def test_launch_refuses_an_unsupported_policy_before_starting_a_jvm(tmp_path):
    if not ActiveMQTarget().availability()[0]:
        skip_or_fail("activemq", ActiveMQTarget().availability()[1])
    scenario = Scenario("s", policies=(DestinationPolicy("queue://g", group_buckets=0),))
    with pytest.raises(TargetUnavailable, match="group_buckets=0"):
        ActiveMQTarget().launch(scenario, tmp_path)
    assert not (tmp_path / "activemq" / "conf" / "activemq.xml").exists()


def test_artemis_only_group_settings_are_recorded_as_not_applied():
    policy = DestinationPolicy("queue://g.>", group_rebalance=True, group_first_key="first")
    config = render(Scenario("s", policies=(policy,)))
    assert config.not_applied == ("queue://g.>: group_rebalance=True (Artemis only)",
                                  "queue://g.>: group_first_key='first' (Artemis only)")
    assert "<!-- not applied: queue://g.>: group_rebalance=True (Artemis only) -->" in config.policy_entries_xml


def test_maximum_redeliveries_installs_the_redelivery_plugin_and_the_scheduler():
    scenario = Scenario("s", policies=(DestinationPolicy("queue://retry.>", maximum_redeliveries=2),
                                       DestinationPolicy("queue://other", producer_flow_control=True)))
    config = render(scenario)
    assert config.scheduler_support
    plugin = _plugins(scenario).find("redeliveryPlugin")
    assert plugin.get("sendToDlqIfMaxRetriesExceeded") == "true" and plugin.get("fallbackToDeadLetter") == "true"
    policies = plugin.findall("redeliveryPolicyMap/redeliveryPolicyMap/redeliveryPolicyEntries/redeliveryPolicy")
    assert [p.attrib for p in policies] == [{
        "queue": "retry.>", "maximumRedeliveries": "2",
        "initialRedeliveryDelay": str(REDELIVERY_DELAY_MS), "redeliveryDelay": str(REDELIVERY_DELAY_MS)}]


def test_no_redelivery_setting_means_no_plugin_and_no_scheduler():
    config = render(Scenario("s", policies=(DestinationPolicy("queue://q", memory_limit=10),)))
    assert config.plugins_xml == "" and not config.scheduler_support


def test_users_turn_on_simple_authentication():
    plugin = _plugins(Scenario("s", users=(("alice", "s3cret"), ("bob", "p&w")))).find("simpleAuthenticationPlugin")
    assert plugin.get("anonymousAccessAllowed") == "false"
    users = [(u.get("username"), u.get("password")) for u in plugin.findall("users/authenticationUser")]
    assert users == [("alice", "s3cret"), ("bob", "p&w")]


def test_duplicate_patterns_are_refused():
    scenario = Scenario("s", policies=(DestinationPolicy("queue://q", memory_limit=10),
                                       DestinationPolicy("queue://q", producer_flow_control=False)))
    with pytest.raises(UnsupportedPolicy, match="given twice"):
        render(scenario)


def test_process_renders_jmx_plugins_scheduler_and_byte_memory_limit(tmp_path):
    scenario = Scenario("s", memory_limit=64 * 1024 * 1024,
                        policies=(DestinationPolicy("queue://retry", maximum_redeliveries=1),))
    process = ActiveMQProcess(tmp_path / "w", jmx=True, **render(scenario).process_options())
    process.stomp_port, process.openwire_port, process.jmx_port = 1111, 2222, 3333
    broker = ET.fromstring(process.render_config()).find(f"{AMQ_NS}broker")
    assert broker.get("useJmx") == "true" and broker.get("schedulerSupport") == "true"
    assert broker.find(f"{AMQ_NS}managementContext/{AMQ_NS}managementContext").get("createConnector") == "false"
    assert broker.find(f"{AMQ_NS}plugins/{AMQ_NS}redeliveryPlugin") is not None
    memory = broker.find(f"{AMQ_NS}systemUsage/{AMQ_NS}systemUsage/{AMQ_NS}memoryUsage/{AMQ_NS}memoryUsage")
    assert memory.get("limit") == "67108864 b"
    jvm = process.build_command()
    assert "-Dcom.sun.management.jmxremote.port=3333" in jvm and "-Dcom.sun.management.jmxremote.host=127.0.0.1" in jvm
    assert process.jmx_url == "service:jmx:rmi:///jndi/rmi://127.0.0.1:3333/jmxrmi"


def test_mbean_names_are_encoded_like_activemq_does():
    assert destination_pattern("b", "queue://orders.eu") == (
        "org.apache.activemq:type=Broker,brokerName=b,destinationType=Queue,destinationName=orders.eu")
    # JMXSupport.encodeObjectNamePart: `*` is not a pattern wildcard, `,` `:` become `_`
    assert subscription_pattern("b", "topic://p.*,x:y") == (
        "org.apache.activemq:type=Broker,brokerName=b,destinationType=Topic,destinationName=p.&ast;_x_y,"
        "endpoint=Consumer,*")
    with pytest.raises(ValueError, match="queue://NAME or topic://NAME"):
        destination_pattern("b", "/queue/x")


def test_a_missing_counter_attribute_is_an_error_not_zero(tmp_path):
    """A counter the MBean does not have must not read as 0 (it would satisfy "nothing discarded")."""
    handle = ActiveMQHandle(target="activemq", process=ActiveMQProcess(tmp_path / "w"), scenario=DEFAULT_SCENARIO,
                            config=render(DEFAULT_SCENARIO), capabilities=frozenset(), credentials=(None, None))
    handle.mbeans = lambda pattern, attributes: [MBean("org.apache.activemq:type=Broker,endpoint=Consumer",
                                                       {"PendingQueueSize": 0, "DispatchedCounter": 3})]
    with pytest.raises(JmxError, match=r"no readable \['DiscardedCount'\]"):
        handle.subscription_counters("topic://t")


def test_capabilities_are_documented_and_leave_out_what_classic_lacks():
    amq = ActiveMQTarget().capabilities()
    assert amq <= set(CAPABILITIES), sorted(amq - set(CAPABILITIES))
    assert not amq & {"groups.rebalance", "groups.first_key"}
    # AMQP only with the transport fetched into .tools (conformance.targets.activemq.amqp)
    assert ("protocol.amqp" in amq) == activemq_amqp_available()[0]
    assert {"protocol.stomp", "scenario.policies", "counters.subscription", "counters.destination",
            "slow_consumer.pending_limit", "groups.buckets", "process.kill"} <= amq
    for peer in (RabbitMQTarget(), MosquittoTarget()):
        assert all(c.startswith("protocol.") for c in peer.capabilities()), peer
    assert MosquittoTarget().capabilities() == {"protocol.mqtt"}
    assert (ActiveMQTarget().name, RabbitMQTarget().name, MosquittoTarget().name) == ("activemq", "rabbitmq", "mosquitto")


# ============================================================== real brokers


def _require(target) -> None:
    ok, reason = target.availability()
    if not ok:
        skip_or_fail(target_requirement(target), reason)  # the only reason to skip: the broker is not installed here


class StompPeer(stomp.ConnectionListener):
    """A stomp.py connection that collects MESSAGE and RECEIPT frames for the test to wait on."""

    def __init__(self, handle, login: tuple[str | None, str | None]) -> None:
        self.messages: list[stomp.utils.Frame] = []
        self.receipts: set[str] = set()
        self.changed = threading.Condition()
        # host:/ because RabbitMQ reads the STOMP host header as its virtual host; ActiveMQ ignores it
        self.conn = stomp.Connection12([(handle.host, handle.ports["stomp"])], heartbeats=(0, 0), timeout=5,
                                       vhost="/")
        self.conn.set_listener("collector", self)
        self.conn.connect(login[0], login[1], wait=True)

    def on_message(self, frame) -> None:
        with self.changed:
            self.messages.append(frame)
            self.changed.notify_all()

    def on_receipt(self, frame) -> None:
        with self.changed:
            self.receipts.add(frame.headers["receipt-id"])
            self.changed.notify_all()

    def wait_for(self, predicate, timeout: float = 5.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def receipt(self, receipt_id: str) -> None:
        assert self.wait_for(lambda: receipt_id in self.receipts), f"no RECEIPT {receipt_id!r} within 5 s"

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()


SCENARIO = Scenario(
    "targets-real",
    policies=(
        DestinationPolicy("topic://slow.>", pending_message_limit=5),
        DestinationPolicy("queue://mem.>", memory_limit=100_000),
        DestinationPolicy("queue://retry.>", maximum_redeliveries=1),
    ),
    protocols=("stomp", "mqtt", "amqp"),
    memory_limit=64 * 1024 * 1024,
    users=(("alice", "s3cret"),),
)


@pytest.fixture(scope="module")
def activemq(tmp_path_factory):
    target = ActiveMQTarget()
    _require(target)
    handle = target.launch(SCENARIO, tmp_path_factory.mktemp("activemq-target"))
    yield handle
    handle.stop()


@pytest.fixture
def peers(activemq):
    opened: list[StompPeer] = []

    def connect() -> StompPeer:
        peer = StompPeer(activemq, activemq.credentials)
        opened.append(peer)
        return peer

    yield connect
    for peer in opened:
        peer.close()


@pytest.mark.real_broker
def test_activemq_handle_shape(activemq):
    assert isinstance(activemq, BrokerHandle)
    assert (activemq.target, activemq.kind, activemq.launch, activemq.host) == ("activemq", "activemq", "process", "127.0.0.1")
    assert activemq.credentials == ("alice", "s3cret")
    capabilities = ActiveMQTarget().capabilities()
    expected = {"stomp"} | {p for p in ("mqtt", "amqp") if f"protocol.{p}" in capabilities}
    assert set(activemq.ports) == expected  # amqp only with the transport in .tools (activemq_amqp)
    for port in activemq.ports.values():
        with socket.create_connection((activemq.host, port), timeout=3):
            pass
    if "mqtt" in activemq.ports:
        ok, why = mqtt_connack(activemq.ports["mqtt"], timeout=3)
        assert not ok and "return code" in why, f"anonymous MQTT CONNECT must be refused with users set: {why}"
    if "amqp" in activemq.ports:
        user, password = activemq.credentials
        ok, why = amqp10_open(activemq.ports["amqp"], timeout=10, user=user, password=password)
        assert ok, f"AMQP 1.0 open with the scenario's user failed: {why}"
        ok, why = amqp10_open(activemq.ports["amqp"], timeout=10, user=user, password=password + "-wrong")
        assert not ok, "AMQP 1.0 open with a wrong password must be refused with users set"


@pytest.mark.real_broker
def test_activemq_config_text_holds_the_scenario_policy(activemq):
    broker = ET.fromstring(activemq.config_text()).find(f"{AMQ_NS}broker")
    entries = broker.findall(f"{AMQ_NS}destinationPolicy/{AMQ_NS}policyMap/{AMQ_NS}policyEntries/{AMQ_NS}policyEntry")
    slow = [e for e in entries if e.get("topic") == "slow.>"]
    assert len(slow) == 1
    limit = slow[0].find(f"{AMQ_NS}pendingMessageLimitStrategy/{AMQ_NS}constantPendingMessageLimitStrategy")
    assert limit is not None and limit.get("limit") == "5"
    assert f'brokerName="{activemq.process.name}"' in activemq.config_text()


@pytest.mark.real_broker
def test_activemq_refuses_anonymous_stomp_when_the_scenario_has_users(activemq):
    with pytest.raises(stomp.exception.ConnectFailedException):
        StompPeer(activemq, (None, None))


@pytest.mark.real_broker
def test_slow_subscriber_discards_beyond_the_pending_limit_and_jmx_shows_it(activemq, peers):
    """SLOW-LIMIT-1, SLOW-STATS-1 (activemq-classic-slow-consumer-handling.md, "Constant
    PendingMessageLimitStrategy", "Monitoring the Status of Slow Consumers"): with a constant limit
    of 5 and a prefetch of 1, a subscriber that never acknowledges holds 1 in its prefetch and 5
    waiting; the other 44 of 50 are discarded. A subscriber that keeps up discards nothing."""
    topic, sent, prefetch, limit = "slow.prices", 50, 1, 5
    slow, fast, producer = peers(), peers(), peers()
    slow.conn.subscribe(f"/topic/{topic}", id="slow", ack="client-individual",
                        headers={"activemq.prefetchSize": str(prefetch), "receipt": "slow-sub"})
    slow.receipt("slow-sub")
    fast.conn.subscribe(f"/topic/{topic}", id="fast", ack="auto", headers={"receipt": "fast-sub"})
    fast.receipt("fast-sub")
    for i in range(sent):
        producer.conn.send(f"/topic/{topic}", body=f"price {i}", headers={"receipt": "sent"} if i == sent - 1 else {})
    producer.receipt("sent")  # frames are handled in order: every send has been dispatched
    assert fast.wait_for(lambda: len(fast.messages) == sent), f"fast subscriber got {len(fast.messages)}/{sent}"

    counters = activemq.subscription_counters(f"topic://{topic}")
    assert len(counters) == 2, counters
    slow_c = next(c for c in counters if c.raw["PrefetchSize"] == prefetch)
    fast_c = next(c for c in counters if c is not slow_c)
    assert slow_c.discarded > 0, f"SLOW-STATS-1: nothing discarded for the slow subscriber: {slow_c}"
    assert (slow_c.dispatched, slow_c.matched, slow_c.discarded) == (prefetch, limit, sent - prefetch - limit), (
        f"SLOW-LIMIT-1: expected {prefetch} dispatched, {limit} waiting, {sent - prefetch - limit} discarded: {slow_c}")
    assert (fast_c.discarded, fast_c.dispatched) == (0, sent), f"SLOW-FAST-1: the fast subscriber lost messages: {fast_c}"

    destination = activemq.destination_counters(f"topic://{topic}")
    assert destination is not None
    assert (destination.enqueued, destination.consumers) == (sent, 2), destination
    # scenario memory_limit reaches destinations without their own limit (systemUsage memoryUsage)
    assert destination.memory_limit == SCENARIO.memory_limit, destination


@pytest.mark.real_broker
def test_destination_counters_show_a_policy_memory_limit_and_unknown_is_none(activemq, peers):
    producer = peers()
    producer.conn.send("/queue/mem.orders", body="x" * 100, headers={"receipt": "mem"})
    producer.receipt("mem")
    counters = activemq.destination_counters("queue://mem.orders")
    assert counters is not None and counters.enqueued == 1
    assert counters.memory_limit == 100_000, f"memoryLimit=\"100000 b\" was not applied as bytes: {counters}"
    assert counters.memory_usage > 0, counters
    assert activemq.destination_counters("queue://never.used") is None


@pytest.mark.real_broker
def test_nack_is_redelivered_up_to_maximum_redeliveries_then_dead_lettered(activemq, peers):
    """maximum_redeliveries=1 through the redeliveryPlugin: a NACKed persistent message comes back
    once (after the plugin's 1 s minimum delay), the second NACK sends it to ActiveMQ.DLQ."""
    consumer = peers()
    dlq_before = activemq.destination_counters("queue://ActiveMQ.DLQ")
    consumer.conn.send("/queue/retry.orders", body="poison", headers={"persistent": "true", "receipt": "p"})
    consumer.receipt("p")
    consumer.conn.subscribe("/queue/retry.orders", id="r", ack="client-individual")
    deliveries = []
    for attempt in range(2):
        assert consumer.wait_for(lambda: len(consumer.messages) > attempt, REDELIVERY_DELAY_MS / 1000 + 4), (
            f"delivery {attempt + 1} did not arrive; log:\n{activemq.log_tail(20)}")
        deliveries.append(consumer.messages[attempt])
        consumer.conn.nack(consumer.messages[attempt].headers["ack"])
    assert [m.body for m in deliveries] == ["poison", "poison"]
    assert deliveries[1].headers.get("redelivered") == "true"
    assert not consumer.wait_for(lambda: len(consumer.messages) > 2, REDELIVERY_DELAY_MS / 1000 + 0.5), (
        "a third delivery arrived although maximum_redeliveries=1")
    dlq = activemq.destination_counters("queue://ActiveMQ.DLQ")
    assert dlq is not None and dlq.enqueued == (dlq_before.enqueued if dlq_before else 0) + 1, dlq


@pytest.mark.real_broker
def test_jmx_queries_after_the_first_are_fast(activemq):
    for _ in range(5):
        activemq.destination_counters("topic://slow.prices")
    timing = activemq.jmx_timing
    assert timing is not None and timing.count >= 5
    print(f"JMX helper start {timing.startup:.2f} s; {timing.count} queries, mean {timing.mean * 1000:.1f} ms, "
          f"slowest {timing.slowest * 1000:.1f} ms")
    assert timing.mean < 0.5, f"JMX queries are slow: {timing}"


@pytest.mark.real_broker
def test_activemq_kill_restart_and_stop_leave_no_process(tmp_path):
    target = ActiveMQTarget()
    _require(target)
    handle = target.launch(Scenario("lifecycle", protocols=("stomp",)), tmp_path)
    try:
        assert set(handle.ports) == {"stomp"} and "protocol.mqtt" not in handle.capabilities
        assert handle.destination_counters("queue://none") is None  # starts the JMX helper
        helper = psutil.Process(handle.jmx_helper_pid)
        jvm_pid, port = handle.pid, handle.ports["stomp"]
        handle.kill()
        assert not psutil.pid_exists(jvm_pid) or psutil.Process(jvm_pid).status() == psutil.STATUS_ZOMBIE
        assert not helper.is_running() or helper.status() == psutil.STATUS_ZOMBIE
        handle.restart()
        assert handle.ports["stomp"] == port and handle.process.stomp_port == port
        peer = StompPeer(handle, (None, None))
        peer.conn.send("/queue/after.restart", body="x", headers={"receipt": "r"})
        peer.receipt("r")
        peer.close()
        assert handle.destination_counters("queue://after.restart").enqueued == 1
        jvm = psutil.Process(handle.pid)
        helper = psutil.Process(handle.jmx_helper_pid)
    finally:
        handle.stop()
    for proc in (jvm, helper):
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE, f"{proc} survived stop()"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.mark.real_broker
def test_rabbitmq_target_opens_each_protocol(tmp_path):
    target = RabbitMQTarget()
    _require(target)
    handle = target.launch(DEFAULT_SCENARIO, tmp_path)
    try:
        assert isinstance(handle, BrokerHandle)
        assert (handle.kind, handle.launch, handle.host) == ("rabbitmq", "process", "127.0.0.1")
        assert set(handle.ports) == {p.split(".", 1)[1] for p in target.capabilities()}
        assert handle.capabilities == target.capabilities()
        assert "scenario.policies" not in handle.capabilities
        if "amqp" in handle.ports:
            ok, why = amqp10_open(handle.ports["amqp"], timeout=5, user=handle.credentials[0],
                                  password=handle.credentials[1])
            assert ok, f"AMQP 1.0 open failed: {why}"
        if "mqtt" in handle.ports:
            ok, why = mqtt_connack(handle.ports["mqtt"], timeout=5)
            assert ok, f"MQTT CONNECT failed: {why}"
        if "stomp" in handle.ports:
            StompPeer(handle, handle.credentials).close()
        assert "stomp.listeners.tcp.1 = 127.0.0.1:" in handle.config_text()
        with pytest.raises(NotImplementedError, match="counters.destination"):
            handle.destination_counters("queue://q")
        pid = handle.process.pid
    finally:
        handle.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.real_broker
def test_mosquitto_target_opens_mqtt_only(tmp_path):
    target = MosquittoTarget()
    _require(target)
    handle = target.launch(DEFAULT_SCENARIO, tmp_path)
    try:
        assert isinstance(handle, BrokerHandle)
        assert (handle.kind, handle.launch, set(handle.ports)) == ("mosquitto", "process", {"mqtt"})
        ok, why = mqtt_connack(handle.ports["mqtt"], timeout=5)
        assert ok, f"MQTT CONNECT failed: {why}"
        assert f"listener {handle.ports['mqtt']} 127.0.0.1" in handle.config_text()
        with pytest.raises(NotImplementedError, match="counters.subscription"):
            handle.subscription_counters("topic://t")
        pid = handle.process.pid
    finally:
        handle.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(TargetUnavailable, match="MQTT only"):
        target.launch(Scenario("stomp-only", protocols=("stomp",)), tmp_path / "again")
