"""ActiveMQ Classic in a container (conformance.targets.activemq.container).

The fast tests check the rendered configuration and the failure path without an engine. The
`container` tests start real containers from brokerconf/activemq-classic:5.17 (docker/build-images.sh
builds it) and skip, with docker_env's reason, where Docker or the image is not available."""

from __future__ import annotations

import socket
import uuid
import xml.etree.ElementTree as ET

import pytest

from conformance.clients import connect
from conformance.requirements import skip_or_fail
from conformance.targets.activemq import container as mod
from conformance.targets.activemq.process import ActiveMQStartError
from conformance.targets.activemq.container import LABEL, ActiveMQContainer
from machinery.docker_env import ACTIVEMQ_IMAGE, DockerUnavailable, docker_client, image_available

CORE = "{http://activemq.apache.org/schema/core}"


def _require_image() -> None:
    ok, reason = image_available(ACTIVEMQ_IMAGE)
    if not ok:
        skip_or_fail("docker", reason)  # not applicable here: no engine, no permission, or no image


def _ours(client, kind: str, broker: str) -> list:
    """Containers or networks this module's launcher labelled for `broker` that still exist."""
    filters = {"label": [f"{LABEL}=activemq_container", f"org.brokerconf.broker={broker}"]}
    if kind == "containers":
        return client.containers.list(all=True, filters=filters, ignore_removed=True)
    return client.networks.list(filters=filters)


# ---------------------------------------------------------------- no engine needed


def test_config_binds_image_ports_on_all_container_interfaces(tmp_path):
    amq = ActiveMQContainer(tmp_path, name="cfg", mqtt=True, persistent=True,
                            policy_entries_xml='<policyEntry queue=">" maxPageSize="7"/>')
    root = ET.fromstring(amq.render_config())
    uris = sorted(c.get("uri") for c in root.iter(f"{CORE}transportConnector"))
    assert uris == ["mqtt://0.0.0.0:1883", "stomp://0.0.0.0:61613?transport.closeAsync=false",
                    "tcp://0.0.0.0:61616"]
    broker = root.find(f"{CORE}broker")
    assert broker.get("brokerName") == "cfg"
    assert broker.get("dataDirectory") == "/var/lib/brokerconf/data"  # the image's data volume, not tmp_path
    assert root.find(f".//{CORE}kahaDB").get("directory") == "/var/lib/brokerconf/data/kahadb"
    assert root.find(f".//{CORE}policyEntry").get("maxPageSize") == "7"  # same renderer as the process target


def test_shared_kahadb_is_mounted_path(tmp_path):
    amq = ActiveMQContainer(tmp_path / "a", name="m", persistent=True, kahadb_directory=tmp_path / "shared")
    kahadb = ET.fromstring(amq.render_config()).find(f".//{CORE}kahaDB")
    assert kahadb.get("directory") == "/var/lib/brokerconf/shared-kahadb"


def test_process_options_are_validated(tmp_path):
    with pytest.raises(ValueError, match="stomp_scheme"):
        ActiveMQContainer(tmp_path, stomp_scheme="stomp+ssl")


def test_missing_image_raises_reason_before_touching_docker(tmp_path, monkeypatch):
    reason = "the Docker image brokerconf/activemq-classic:5.17 is not present in the engine; build it with ..."
    monkeypatch.setattr(mod, "image_available", lambda image: (False, reason))
    amq = ActiveMQContainer(tmp_path)
    with pytest.raises(DockerUnavailable, match="build it with"):
        amq.start()
    assert amq.container_id is None and amq.network_name is None
    assert not (tmp_path / "conf" / "activemq.xml").exists()


# ---------------------------------------------------------------- real containers


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    _require_image()
    amq = ActiveMQContainer(tmp_path_factory.mktemp("amq-container"), name=f"rt-{uuid.uuid4().hex[:6]}", mqtt=True)
    with amq:
        yield amq


@pytest.mark.container
@pytest.mark.slow
def test_stomp_round_trip_through_container(broker):
    host, port = broker.stomp_address
    assert host == "127.0.0.1"
    queue = f"queue://docker.rt.{uuid.uuid4().hex[:8]}"
    with connect(host, port, "stomp", timeout=10) as consumer, connect(host, port, "stomp", timeout=10) as producer:
        sub = consumer.subscribe(queue, ack="client-individual")
        for i in range(3):
            producer.send(queue, f"m{i}".encode(), {"seq": i})
        got = sub.receive_n(3, timeout=10)
        for m in got:
            sub.ack(m)
    assert [m.text for m in got] == ["m0", "m1", "m2"]
    assert [m.destination for m in got] == [queue] * 3


@pytest.mark.container
@pytest.mark.slow
def test_mqtt_connector_answers_connack(broker):
    host, port = broker.mqtt_address
    with socket.create_connection((host, port), timeout=10) as s:
        # MQTT 3.1.1 CONNECT, clean session, keepalive 60, empty client id
        s.sendall(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 60, 0, 0]))
        assert s.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted


@pytest.mark.container
@pytest.mark.slow
def test_the_containers_jvm_has_the_quick_start_of_a_local_one(broker):
    """A container's broker lives as briefly as a local one, on the same cores: it gets the same
    quick start (conformance/targets/runtime/jvm.py), read off its java command line."""
    from conformance.targets.runtime.jvm import quick_start_options

    client = docker_client()
    try:
        processes = client.containers.get(broker.container_id).top(ps_args="-eo pid,args")["Processes"]
    finally:
        client.close()
    [java] = [args for _, args in processes if args.split()[0].endswith("java")]
    assert set(quick_start_options()) <= set(java.split()), java


@pytest.mark.container
@pytest.mark.slow
def test_container_is_on_its_scenario_network_with_net_admin(broker):
    client = docker_client()
    try:
        container = client.containers.get(broker.container_id)
        assert "NET_ADMIN" in (container.attrs["HostConfig"]["CapAdd"] or [])
        assert broker.network_name in container.attrs["NetworkSettings"]["Networks"]
        assert broker.ip_address and broker.ip_address.count(".") == 3
        # later partitions use iptables inside the container: it must work there
        rc, out = container.exec_run(["iptables", "-S", "INPUT"])
        assert rc == 0, out
        published = container.attrs["NetworkSettings"]["Ports"]["61613/tcp"]
        assert {b["HostIp"] for b in published} == {"127.0.0.1"}
    finally:
        client.close()
    assert "Apache ActiveMQ" in broker.log_tail(200)


@pytest.mark.container
@pytest.mark.slow
def test_container_and_network_removed_when_body_raises(tmp_path):
    _require_image()
    name = f"boom-{uuid.uuid4().hex[:6]}"
    seen = {}
    with pytest.raises(ZeroDivisionError):
        with ActiveMQContainer(tmp_path, name=name) as amq:
            seen.update(container=amq.container_id, network=amq.network_name)
            1 / 0
    client = docker_client()
    try:
        assert seen["container"] and seen["network"]
        assert _ours(client, "containers", name) == []
        assert _ours(client, "networks", name) == []
    finally:
        client.close()
    # the evidence outlives the container
    assert "Apache ActiveMQ" in (tmp_path / "activemq.log").read_text(encoding="utf-8")


@pytest.mark.container
@pytest.mark.slow
def test_failed_start_reports_log_and_leaves_nothing(tmp_path):
    _require_image()
    name = f"bad-{uuid.uuid4().hex[:6]}"
    amq = ActiveMQContainer(tmp_path, name=name, policy_entries_xml='<policyEntry queue=">" noSuchAttribute="1"/>')
    with pytest.raises(ActiveMQStartError) as info:
        amq.start(timeout=60)
    message = str(info.value)
    assert "key lines:" in message and "noSuchAttribute" in message  # the cause, from the container's log
    assert "\tat " not in message  # stack frames omitted
    client = docker_client()
    try:
        assert _ours(client, "containers", name) == []
        assert _ours(client, "networks", name) == []
    finally:
        client.close()


@pytest.mark.container
@pytest.mark.slow
def test_kill_and_restart_keeps_ports_and_persistent_messages(tmp_path):
    _require_image()
    queue = "queue://docker.persist"
    with ActiveMQContainer(tmp_path, name=f"kr-{uuid.uuid4().hex[:6]}", persistent=True) as amq:
        port = amq.stomp_port
        with connect(*amq.stomp_address, "stomp", timeout=10) as producer:
            producer.send(queue, b"survives", persistent=True)
        amq.kill()
        assert not amq.running
        amq.start()
        assert amq.stomp_port == port  # same published address for reconnecting clients
        with connect(*amq.stomp_address, "stomp", timeout=10) as consumer:
            got = consumer.subscribe(queue).receive(timeout=10)
    assert got is not None and got.text == "survives"


@pytest.mark.container
@pytest.mark.slow
def test_jmx_counters_readable_through_published_port(tmp_path):
    # The activemq target reads its counters over JMX; the container publishes the JDK agent on
    # the same port number inside and out, since the RMI stub tells the client that port.
    _require_image()
    from conformance.targets.activemq.jmx import JmxClient

    name = f"jmx-{uuid.uuid4().hex[:6]}"
    with ActiveMQContainer(tmp_path, name=name, jmx=True) as amq:
        client = JmxClient(amq.jmx_url, log_path=tmp_path / "jmx-helper.log")
        try:
            found = client.query(f"org.apache.activemq:type=Broker,brokerName={name}", ["BrokerName"])
        finally:
            client.close()
    assert [m.attributes["BrokerName"] for m in found] == [name]
