"""Multi-broker ActiveMQ Classic scenarios across containers (issue 8 part 2), with real faults:

* a network of brokers A -> B (A's networkConnector to B's internal OpenWire address) whose
  bridge is partitioned with iptables inside the containers (chaos.nemesis.container): messages
  produced on A stop reaching B's consumer and wait on A; after the heal they arrive, none lost
  (store-and-forward: "Networks of Brokers", ../shared/spec/activemq-classic-networks-of-brokers.md);
* the same network with B taken off the Docker network and put back (disconnect / reconnect);
* a shared-file master/slave pair on one named Docker volume: the master container is killed,
  the slave takes the store's lock and serves the persistent messages the master had accepted
  (A-MQ fault-tolerant messaging guide, 3.1 "Shared File System Master/Slave").

Artemis (issue 16): the nemesis itself on the Artemis image (iptables with NET_ADMIN, as root):
two brokerconf/artemis containers on one network, cut apart and healed. An Artemis cluster's
message flow across a cut link (issue 19) is tests/docker/test_artemis_container_cluster.py.

Every test skips (or fails where BROKERCONF_REQUIRE names docker) with docker_env's reason where
the engine or the image is not usable."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from chaos.history import History, read_history
from chaos.nemesis.container import ContainerPartitionNemesis
from conformance.clients import connect
from conformance.requirements import skip_or_fail
from conformance.targets.activemq.container_network import ActiveMQContainerNetwork, SharedVolumePair
from conformance.targets.activemq.network import Bridge, NetworkConnectorOptions
from machinery.docker_env import ACTIVEMQ_IMAGE, docker_client, image_available
from conformance.targets.artemis.dist import ARTEMIS_IMAGE

pytestmark = [pytest.mark.container, pytest.mark.slow]

#: generous: after a heal the bridge's TCP connection either resumes (retransmission) or is
#: dropped by the inactivity monitor (30 s by default) and the connector reconnects
ARRIVAL_TIMEOUT = 120.0


def _require_image(image: str = ACTIVEMQ_IMAGE) -> None:
    ok, reason = image_available(image)
    if not ok:  # build it with docker/build-images.sh
        skip_or_fail("docker", reason)


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    _require_image()
    # a short reconnect delay so a bridge dropped during a fault comes back quickly once healed
    options = NetworkConnectorOptions(initial_reconnect_delay=1000, max_reconnect_delay=2000)
    net = ActiveMQContainerNetwork(tmp_path_factory.mktemp("nob-containers"), ("A", "B"),
                                   (Bridge("A", "B", options),), prefix=f"nob{uuid.uuid4().hex[:6]}")
    with net:
        yield net


def _ids(messages) -> list[str]:
    return [m.text for m in messages]


def _flow(net, queue: str, tag: str, count: int) -> tuple[object, object, list[str]]:
    """A consumer on B, demand seen on A, then ``count`` messages produced on A: (B's connection,
    its subscription, the ids sent)."""
    consumer = connect(net.host, net["B"].stomp_port, "stomp", timeout=10)
    sub = consumer.subscribe(queue, ack="client-individual")
    seen = net["A"].wait_for_consumers(queue, 1, timeout=30)
    assert seen == 1, f"NOB-DEMAND-1: B's consumer on {queue} never reached A over the bridge (A sees {seen})"
    ids = [f"{tag}-{i}" for i in range(count)]
    with connect(net.host, net["A"].stomp_port, "stomp", timeout=10) as producer:
        for i in ids:
            producer.send(queue, i)
    return consumer, sub, ids


def _receive_all(sub, expected: int, timeout: float) -> list:
    got = sub.receive_n(expected, timeout=timeout)
    for m in got:
        sub.ack(m)
    return got


def test_partitioned_bridge_holds_messages_on_a_until_healed(network, tmp_path):
    queue = f"queue://part.{uuid.uuid4().hex[:8]}"
    history = History(tmp_path / "history.jsonl", run="container-partition", target="activemq:container")
    consumer, sub, before = _flow(network, queue, "before", 5)
    try:
        assert sorted(_ids(_receive_all(sub, 5, 30))) == sorted(before), "bridge A->B does not forward"
        nemesis = ContainerPartitionNemesis({n: network[n].process for n in ("A", "B")}, history)
        with nemesis:
            nemesis.invoke("partition", shape="halves", groups=[["A"], ["B"]])
            during = [f"during-{i}" for i in range(5)]
            with connect(network.host, network["A"].stomp_port, "stomp", timeout=10) as producer:
                for i in during:
                    producer.send(queue, i)  # A accepts them: the producer talks to A through the host
            leaked = sub.receive_n(5, timeout=5)
            assert leaked == [], f"messages crossed the partitioned bridge: {_ids(leaked)}"
            held = network["A"].queue_size(queue)
            assert held == 5, f"A should hold the 5 messages produced during the partition, holds {held}"
            nemesis.heal()
            after = _receive_all(sub, 5, ARRIVAL_TIMEOUT)
        got = _ids(after) + _ids(sub.drain(quiet=1.0))
        lost = sorted(set(during) - set(got))
        assert not lost, f"NOB-RELIABLE-1: lost {lost} after the partition healed (got {got})"
        assert set(got) <= set(during), f"unexpected messages {sorted(set(got) - set(during))}"
    finally:
        consumer.close()
        history.close()
    events = read_history(tmp_path / "history.jsonl")
    windows = [w for e in events if e["f"] == "heal" and e["value"]["phase"] == "end"
               for w in e["value"].get("fault_window", [])]
    assert [w["fault"] for w in windows] == ["partition"], events
    assert windows[0]["start"] < windows[0]["end"], windows
    # the cut is recorded in the nemesis's Jepsen shape (chaos.nemesis.container.grudge)
    cut, = [e["value"] for e in events if e["f"] == "partition" and e["value"]["phase"] == "end"]
    assert (cut["shape"], cut["cuts"]) == ("halves", ["A->B", "B->A"]), cut


def test_disconnected_broker_rejoins_with_its_alias(network, tmp_path):
    queue = f"queue://disc.{uuid.uuid4().hex[:8]}"
    history = History(tmp_path / "history.jsonl", run="container-disconnect", target="activemq:container")
    consumer = None
    try:
        with ContainerPartitionNemesis({n: network[n].process for n in ("A", "B")}, history) as nemesis:
            nemesis.invoke("disconnect", node="B")
            result = nemesis.invoke("reconnect", node="B")
            assert nemesis.address("B")
        # the host's published STOMP port of B came back, possibly on a new number, and the
        # launcher follows it
        assert network["B"].stomp_port == int(result["published"]["61613/tcp"]), result
        # the bridge uses B's network alias (tcp://<prefix>-B:61616): forwarding works again
        consumer, sub, ids = _flow(network, queue, "rejoin", 3)
        got = _receive_all(sub, 3, ARRIVAL_TIMEOUT)
        assert sorted(_ids(got)) == sorted(ids), f"NOB-DEMAND-1 after reconnect: got {_ids(got)}"
    finally:
        if consumer is not None:
            consumer.close()
        history.close()


def test_shared_volume_master_slave_failover_keeps_persistent_messages(tmp_path):
    _require_image()
    pair = SharedVolumePair(tmp_path / "pair", broker_name=f"sv{uuid.uuid4().hex[:6]}",
                            lock_keep_alive_period_ms=1000, lock_acquire_sleep_interval_ms=500)
    with pair:
        master, slave = pair.nodes.values()
        assert pair.master() is master and slave.process.waiting_for_lock()
        client = docker_client()
        try:
            for node in pair.nodes.values():  # both containers mount the one named volume
                mounts = client.containers.get(node.process.container_id).attrs["Mounts"]
                assert pair.volume_name in [m.get("Name") for m in mounts], mounts
        finally:
            client.close()
        queue = f"queue://sv.{uuid.uuid4().hex[:8]}"
        sent = [f"p{i}" for i in range(10)]
        with connect(pair.host, master.port("stomp"), "stomp", timeout=10) as producer:
            for body in sent:
                producer.send(queue, body, persistent=True)  # receipted: in the store before kill
        master.kill()
        new_master = pair.wait_for_master(60)
        assert new_master is slave, f"shared-file master/slave (A-MQ guide 3.1): the slave did not take over\n{pair.log_tail(40)}"
        with connect(pair.host, slave.port("stomp"), "stomp", timeout=10) as consumer:
            sub = consumer.subscribe(queue, ack="client-individual")
            got = _receive_all(sub, len(sent), 30)
        assert sorted(_ids(got)) == sorted(sent), \
            f"shared-file master/slave (A-MQ guide 3.1): persistent messages lost in the failover: {sorted(set(sent) - set(_ids(got)))}"
    client = docker_client()
    try:  # stop() removed the containers, the network and the volume
        assert not client.volumes.list(filters={"name": pair.volume_name})
    finally:
        client.close()


# ---------------------------------------------------------------- Artemis containers


def _core_port_reachable(broker, peer: str) -> bool:
    """Whether ``broker``'s container opens a TCP connection to ``peer``'s core port (61616) on the
    scenario network within 3 s (bash's /dev/tcp; the peer is named by its network alias)."""
    code, _ = broker._wrapped().exec_run(["timeout", "3", "bash", "-c", f"exec 3<>/dev/tcp/{peer}/61616"])
    return code == 0


@pytest.mark.timeout(300)  # two Artemis containers start (each JVM up to a minute on a loaded machine), a cut, a heal
def test_partition_cuts_artemis_containers_apart_until_healed(tmp_path):
    from conformance.targets.artemis import container as art  # noqa: PLC0415 - needs the docker SDK

    _require_image(ARTEMIS_IMAGE)
    tag = uuid.uuid4().hex[:6]
    net = art._new_network(f"brokerconf-artpart-{tag}", {art.LABEL: "artemis_container_test"})
    brokers = {n: art.ArtemisContainer(tmp_path / n, name=f"artpart-{tag}-{n}", network=net, mqtt=False, amqp=False)
               for n in ("A", "B")}
    history = History(tmp_path / "history.jsonl", run="artemis-partition", target="artemis:container")
    try:
        with ThreadPoolExecutor(max_workers=len(brokers)) as pool:  # side by side: each start waits on its JVM
            for started in [pool.submit(broker.start) for broker in brokers.values()]:
                started.result()
        a, b = brokers["A"], brokers["B"].name
        assert _core_port_reachable(a, b), "A cannot reach B's core port before any fault"
        with ContainerPartitionNemesis(brokers, history) as nemesis:
            nemesis.invoke("partition", shape="halves", groups=[["A"], ["B"]])
            assert not _core_port_reachable(a, b), "A still reaches B through the partition"
            # the cut is between the containers only: clients on the host still reach both brokers
            assert all(broker.serving(timeout=5) for broker in brokers.values())
            nemesis.heal()
            assert _core_port_reachable(a, b), "A cannot reach B after the heal"
    finally:
        history.close()
        for broker in brokers.values():
            broker.stop()
        net.remove()
    cut, = [e["value"] for e in read_history(tmp_path / "history.jsonl")
            if e["f"] == "partition" and e["value"]["phase"] == "end"]
    assert (cut["shape"], cut["cuts"]) == ("halves", ["A->B", "B->A"]), cut
