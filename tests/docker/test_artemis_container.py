"""ActiveMQ Artemis in a container (conformance.targets.artemis.container) and the artemis target
(registry.ArtemisTarget).

The fast tests use a fake testcontainers container (no engine): environment, published ports,
address settings, readiness (log line, then STOMP CONNECTED) and cleanup on failure. The
`container` tests start the real image (by default the local brokerconf/artemis one from
docker/build-images.sh) and skip, or fail where BROKERCONF_REQUIRE names docker, with docker_env's
reason where it is missing."""

from __future__ import annotations

import socket
import subprocess
import uuid
import xml.etree.ElementTree as ET

import pytest

from conformance.clients import connect
from conformance.requirements import skip_or_fail
from conformance.scenario import DestinationPolicy, Scenario
from conformance.targets.artemis import container as mod
from conformance.targets.artemis.container import (
    ArtemisContainer,
    ArtemisStartError,
    UnsupportedArtemisPolicy,
    address_settings_xml,
    artemis_match,
    from_scenario,
)
from conformance.targets.base import TargetUnavailable
from machinery.docker_env import DockerUnavailable, docker_client, image_available
from conformance.targets.artemis.target import ArtemisTarget
from conformance.targets.artemis.dist import ARTEMIS_IMAGE
from chaos.nemesis.process import ProcessNemesis
from conformance.targets.runtime.jvm import quick_start_options
from conformance.targets.runtime.node import ProcessNode


# ---------------------------------------------------------------- fakes


class FakeDockerContainer:
    """The docker SDK container object testcontainers wraps (what the launcher touches)."""

    def __init__(self, ports: dict, log: bytes) -> None:
        self.id = "c0ffee" + uuid.uuid4().hex
        self.short_id = self.id[:10]
        self.status = "running"
        self.attrs = {"NetworkSettings": {"Ports": {k: [{"HostIp": h, "HostPort": str(p)}] for k, (h, p) in ports.items()}}}
        self.log = log
        self.removed = False
        self.actions: list[str] = []

    def reload(self):
        if self.removed:
            raise RuntimeError("404 no such container")

    def logs(self, **kw):
        return self.log

    def stop(self, timeout):
        self.actions.append("stop")
        self.status = "exited"

    def remove(self, force, v):
        self.actions.append("remove")
        self.removed = True

    def kill(self, signal):
        self.actions.append(f"kill {signal}")
        self.status = "exited"

    def wait(self, timeout):
        return {"StatusCode": 137}

    def start(self):
        self.actions.append("start")
        self.status = "running"
        self.log += b"AMQ241001: HTTP Server started at http://0.0.0.0:8161\n"  # the restarted broker is ready


class FakeTC:
    """testcontainers' DockerContainer, as far as the launcher uses it."""

    made: list["FakeTC"] = []

    def __init__(self, image, *, env=None, network=None, network_aliases=None, ready=True,
                 log=b"AMQ241001: HTTP Server started at http://0.0.0.0:8161\n") -> None:
        self.image, self.env, self.network, self.network_aliases = image, env, network, network_aliases
        self.ports: dict = {}
        self.volumes: list = []
        self.kwargs: dict = {}
        self.name = None
        self.strategy = None
        self.ready = ready
        self.log = log
        self._container = None
        FakeTC.made.append(self)

    def with_name(self, name):
        self.name = name
        return self

    def with_volume_mapping(self, host, container, mode):
        self.volumes.append((host, container, mode))
        return self

    def with_kwargs(self, **kw):
        self.kwargs.update(kw)
        return self

    def waiting_for(self, strategy):
        self.strategy = strategy
        return self

    def start(self):
        self._container = FakeDockerContainer(self.ports, self.log)
        if not self.ready:
            raise TimeoutError("Container did not emit logs containing 'HTTP Server started' within 5 seconds")
        return self

    def get_docker_client(self):
        # the launcher closes testcontainers' own client once the container is gone (no socket leak)
        fake = self

        class _Client:
            def close(self):
                fake.client_closed = True

        return type("DockerClient", (), {"client": _Client()})()


class FakeNetwork:
    def __init__(self, name):
        self.name = name
        self.removed = False

    def remove(self):
        self.removed = True


class FakeClient:
    def close(self):
        pass


@pytest.fixture
def engine(monkeypatch):
    """No Docker: image present, fake containers and networks; STOMP answered by a fake."""
    FakeTC.made = []
    networks: list[FakeNetwork] = []
    state = {"stomp": (True, ""), "tc": {}}
    monkeypatch.setattr(mod, "image_available", lambda image: (True, ""))
    monkeypatch.setattr(mod, "docker_client", lambda: FakeClient())
    monkeypatch.setattr(mod, "_configure_reaper", lambda client: None)
    monkeypatch.setattr(mod, "_new_network", lambda name, labels: networks.append(FakeNetwork(name)) or networks[-1])
    monkeypatch.setattr(mod, "_wait_strategy", lambda pattern, timeout: ("log", pattern))
    monkeypatch.setattr(mod, "_docker_container", lambda image, **kw: FakeTC(image, **kw, **state["tc"]))
    calls: list = []
    monkeypatch.setattr(mod, "stomp_handshake",
                        lambda port, timeout, login: (calls.append((port, login)), state["stomp"])[1])
    state.update(networks=networks, stomp_calls=calls)
    return state


# ---------------------------------------------------------------- address settings


def test_wildcards_become_artemis_syntax():
    assert artemis_match("queue://grp.>") == "grp.#"
    assert artemis_match("topic://a.*.c") == "a.*.c"
    assert artemis_match("queue://orders") == "orders"


def test_group_fields_map_to_documented_address_settings():
    xml = address_settings_xml((
        DestinationPolicy("queue://grp.>", group_buckets=16, group_rebalance=True),
        DestinationPolicy("queue://first.>", group_first_key="JMSXGroupFirstForConsumer"),
        DestinationPolicy("queue://plain"),  # nothing for Artemis: no element
    ))
    root = ET.fromstring(f"<address-settings>{xml}</address-settings>")
    got = {s.get("match"): {c.tag: c.text for c in s} for s in root}
    assert got == {"grp.#": {"default-group-buckets": "16", "default-group-rebalance": "true"},
                   "first.#": {"default-group-first-key": "JMSXGroupFirstForConsumer"}}


def test_no_group_fields_no_fragment():
    assert address_settings_xml((DestinationPolicy("queue://q"),)) == ""


@pytest.mark.parametrize("field,value", [("pending_message_limit", 10), ("memory_limit", 1024),
                                         ("producer_flow_control", False)])
def test_classic_only_settings_are_refused_not_dropped(field, value):
    with pytest.raises(UnsupportedArtemisPolicy, match=field):
        address_settings_xml((DestinationPolicy("topic://slow.>", **{field: value}),))


def test_queue_and_topic_with_one_name_must_agree():
    with pytest.raises(UnsupportedArtemisPolicy, match="default-group-buckets"):
        address_settings_xml((DestinationPolicy("queue://g", group_buckets=1),
                              DestinationPolicy("topic://g", group_buckets=2)))


# ---------------------------------------------------------------- launcher with a fake engine


def test_environment_ports_and_labels(engine, tmp_path):
    amq = ArtemisContainer(tmp_path, name="art", users=(("alice", "pw"),), mqtt=True, amqp=False)
    amq.start()
    tc = FakeTC.made[-1]
    assert tc.image == ARTEMIS_IMAGE
    assert tc.env == {"ARTEMIS_USER": "alice", "ARTEMIS_PASSWORD": "pw", "ANONYMOUS_LOGIN": "false",
                      "EXTRA_ARGS": "--http-host 0.0.0.0 --relax-jolokia",
                      "JAVA_ARGS_APPEND": " ".join(["-Xms64m -Xmx384m", *quick_start_options()])}
    assert set(tc.ports) == {"61616/tcp", "61613/tcp", "1883/tcp"}  # no AMQP asked, no console
    assert {host for host, _ in tc.ports.values()} == {"127.0.0.1"}
    assert tc.network is engine["networks"][0] and tc.network_aliases == ["art"]
    assert tc.kwargs["labels"]["org.brokerconf.launcher"] == "artemis_container"
    assert tc.kwargs["cap_add"] == ["NET_ADMIN"]
    # no policies: the start script still runs (routing prefixes), with no address settings to add
    assert tc.kwargs["entrypoint"] == ["/bin/sh", "/etc/brokerconf/start-artemis.sh"]
    assert tc.volumes == [(str(tmp_path / "conf"), "/etc/brokerconf", "ro")]
    assert not (tmp_path / "conf" / "address-settings.xml").exists()
    assert tc.strategy == ("log", ".*HTTP Server started.*")
    # ready only after STOMP answered, with the instance user's credentials
    assert engine["stomp_calls"] == [(amq.ports["stomp"], ("alice", "pw"))]
    assert amq.stomp_address == ("127.0.0.1", tc.ports["61613/tcp"][1])
    assert amq.mqtt_address[1] == tc.ports["1883/tcp"][1] and amq.amqp_address is None
    amq.stop()
    assert tc._container.removed and engine["networks"][0].removed


def test_anonymous_when_scenario_has_no_users(engine, tmp_path):
    amq = from_scenario(Scenario("anon", protocols=("stomp",)), tmp_path)
    assert amq.environment()["ANONYMOUS_LOGIN"] == "true" and amq.ready_login is None
    assert amq.listeners() == ["core", "stomp"]


def test_policies_mount_fragment_and_start_script(engine, tmp_path):
    scenario = Scenario("grp", policies=(DestinationPolicy("queue://grp.>", group_buckets=4),))
    with from_scenario(scenario, tmp_path) as amq:
        tc = FakeTC.made[-1]
        assert tc.volumes == [(str(tmp_path / "conf"), "/etc/brokerconf", "ro")]
        assert tc.kwargs["entrypoint"] == ["/bin/sh", "/etc/brokerconf/start-artemis.sh"]
        script = (tmp_path / "conf" / "start-artemis.sh").read_text()
        assert "/docker-run.sh version" in script and script.rstrip().endswith("exec /docker-run.sh run")
        fragment = (tmp_path / "conf" / "address-settings.xml").read_text()
        assert '<address-setting match="grp.#">' in fragment and "default-group-buckets>4<" in fragment
        assert "default-group-buckets" in amq.config_text()


def test_start_script_splices_fragment_after_address_settings(tmp_path):
    # Run the script's awk step on a broker.xml shaped like `artemis create` output.
    fragment = address_settings_xml((DestinationPolicy("queue://grp.>", group_rebalance=True),))
    (tmp_path / "frag.xml").write_text(fragment)
    broker = ("<configuration><core>\n<address-settings>\n<address-setting match=\"#\">\n"
              "<max-delivery-attempts>10</max-delivery-attempts>\n</address-setting>\n</address-settings>\n"
              "</core></configuration>\n")
    awk = mod._START_SCRIPT.split("awk -v f=/etc/brokerconf/address-settings.xml \\\n", 1)[1].split("\\\n")[0].strip()
    out = subprocess.run(["awk", "-v", f"f={tmp_path / 'frag.xml'}", awk.strip("'")], input=broker,
                         capture_output=True, text=True, check=True).stdout
    settings = ET.fromstring(out).find("core/address-settings")
    assert [s.get("match") for s in settings] == ["grp.#", "#"]
    assert settings[0].find("default-group-rebalance").text == "true"


def test_start_script_gives_stomp_and_amqp_acceptors_routing_prefixes(tmp_path):
    # Run the script's sed step on the acceptors `artemis create` 2.40 writes.
    broker = ('<acceptors>\n<acceptor name="artemis">tcp://0.0.0.0:61616?protocols=CORE,AMQP,STOMP</acceptor>\n'
              '<acceptor name="amqp">tcp://0.0.0.0:5672?protocols=AMQP;useEpoll=true</acceptor>\n'
              '<acceptor name="stomp">tcp://0.0.0.0:61613?protocols=STOMP;useEpoll=true</acceptor>\n</acceptors>\n')
    sed = mod._START_SCRIPT.split("  sed ", 1)[1].split("etc/broker.xml >", 1)[0]
    args = [part.strip().strip("'") for part in sed.replace("\\\n", " ").split(" -e ") if part.strip()]
    args[0] = args[0].removeprefix("-e").strip().strip("'")
    out = subprocess.run(["sed", *[x for a in args for x in ("-e", a)]], input=broker, capture_output=True,
                         text=True, check=True).stdout
    urls = {a.get("name"): a.text for a in ET.fromstring(out)}
    assert urls["stomp"].endswith("useEpoll=true;anycastPrefix=/queue/;multicastPrefix=/topic/")
    assert urls["amqp"].endswith("useEpoll=true;anycastPrefix=queue://;multicastPrefix=topic://")
    assert "Prefix" not in urls["artemis"]


def test_failed_readiness_reports_log_and_removes_everything(engine, tmp_path):
    engine["tc"] = {"ready": False, "log": b"ERROR AMQ224000: Failure in initialisation\n\tat org.x(Y.java:1)\n"}
    amq = ArtemisContainer(tmp_path, name="bad")
    with pytest.raises(ArtemisStartError) as info:
        amq.start()
    message = str(info.value)
    assert "HTTP Server started" in message and "AMQ224000" in message and "\tat " not in message
    assert FakeTC.made[-1]._container.removed and engine["networks"][0].removed
    assert amq.container_id is None
    assert "AMQ224000" in (tmp_path / "artemis.log").read_text()  # evidence kept


def test_stomp_never_answering_fails_and_cleans_up(engine, tmp_path):
    engine["stomp"] = (False, "connection closed before CONNECTED")
    amq = ArtemisContainer(tmp_path, name="mute")
    with pytest.raises(ArtemisStartError, match="STOMP .* did not answer CONNECTED"):
        amq.start(timeout=0.5)
    assert FakeTC.made[-1]._container.removed


def test_missing_image_raises_reason_before_touching_docker(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(mod, "image_available", lambda image: (False, "the Docker image ... is not present"))
    amq = ArtemisContainer(tmp_path)
    with pytest.raises(DockerUnavailable, match="not present"):
        amq.start()
    assert FakeTC.made == [] and engine["networks"] == []


def test_kill_then_start_reuses_container_and_ports(engine, tmp_path):
    amq = ArtemisContainer(tmp_path, name="kr")
    amq.start()
    ports = dict(amq.ports)
    container = FakeTC.made[-1]._container
    amq.kill()
    assert not amq.running and container.actions == ["kill SIGKILL"]
    amq.start(timeout=10)
    assert container.actions[-1] == "start" and len(FakeTC.made) == 1 and amq.ports == ports
    amq.stop()
    assert getattr(FakeTC.made[-1], "client_closed", False), "stop() must close testcontainers' Docker client"


def test_more_than_one_user_is_refused(tmp_path):
    with pytest.raises(UnsupportedArtemisPolicy, match="one user"):
        ArtemisContainer(tmp_path, users=(("a", "1"), ("b", "2")))


# ---------------------------------------------------------------- the target


def test_target_not_applicable_with_image_reason():
    target = ArtemisTarget(launch="container", image_check=lambda image: (False, "the Docker image X is not present; pull it"))
    assert target.availability() == (False, "no Artemis container: the Docker image X is not present; "
                                            "pull it")
    with pytest.raises(TargetUnavailable, match="pull it"):
        target.launch(Scenario("s"), None)


def test_target_launches_container_with_capabilities(engine, tmp_path):
    target = ArtemisTarget(launch="container", image_check=lambda image: (True, ""))
    assert target.availability() == (True, "")
    handle = target.launch(Scenario("caps", protocols=("stomp", "mqtt")), tmp_path)
    try:
        assert (handle.kind, handle.launch) == ("artemis", "container")
        assert set(handle.ports) == {"stomp", "mqtt"}
        assert "protocol.amqp" not in handle.capabilities and "groups.rebalance" in handle.capabilities
        assert "counters.subscription" not in handle.capabilities
        with pytest.raises(TargetUnavailable, match="counters"):
            handle.subscription_counters("topic://t")
    finally:
        handle.stop()
    assert FakeTC.made[-1]._container.removed


def test_target_refuses_classic_only_policy(engine, tmp_path):
    target = ArtemisTarget(launch="container", image_check=lambda image: (True, ""))
    scenario = Scenario("slow", policies=(DestinationPolicy("topic://slow.>", pending_message_limit=5),))
    with pytest.raises(TargetUnavailable, match="pending_message_limit"):
        target.launch(scenario, tmp_path)
    assert FakeTC.made == []


# ---------------------------------------------------------------- real container
# The image is docker/artemis (built by docker/build-images.sh from the pinned distribution) unless
# $BROKERCONF_ARTEMIS_IMAGE names another one, e.g. the official image where it can be pulled.


def require_image() -> None:
    ok, reason = image_available(ARTEMIS_IMAGE)
    if not ok:  # no engine, no permission, or no image: run docker/build-images.sh
        skip_or_fail("docker", reason)


def instance_file(broker: ArtemisContainer, path: str) -> str:
    """A file of the broker instance inside the running container."""
    code, out = broker._wrapped().exec_run(["cat", f"/var/lib/artemis-instance/{path}"])
    assert code == 0, out.decode("utf-8", "replace")
    return out.decode("utf-8")


@pytest.fixture(scope="module")
def artemis(tmp_path_factory):
    """Anonymous login and one group address setting: the start-script path of the launcher."""
    require_image()
    scenario = Scenario("real", policies=(DestinationPolicy("queue://grp.>", group_buckets=8),))
    with from_scenario(scenario, tmp_path_factory.mktemp("artemis")) as broker:
        yield broker


@pytest.mark.container
@pytest.mark.slow
def test_real_stomp_round_trip(artemis):
    queue = f"queue://docker.art.{uuid.uuid4().hex[:8]}"
    with connect(*artemis.stomp_address, "stomp", timeout=10) as consumer, \
            connect(*artemis.stomp_address, "stomp", timeout=10) as producer:
        sub = consumer.subscribe(queue)
        producer.send(queue, b"hello")
        got = sub.receive(timeout=10)
    assert got is not None and got.text == "hello"


@pytest.mark.container
@pytest.mark.slow
def test_real_mqtt_and_amqp_listeners_answer(artemis):
    with socket.create_connection(artemis.mqtt_address, timeout=10) as s:
        s.sendall(bytes([0x10, 12, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 60, 0, 0]))
        assert s.recv(4) == b"\x20\x02\x00\x00"
    with socket.create_connection(artemis.amqp_address, timeout=10) as s:
        s.sendall(b"AMQP\x03\x01\x00\x00")  # SASL layer header: the broker answers with its own
        assert s.recv(8)[:4] == b"AMQP"
    assert "HTTP Server started" in artemis.log_tail(500)


@pytest.mark.container
@pytest.mark.slow
def test_real_jvm_heap_is_the_launchers(artemis):
    # the profile's -Xmx2G comes first on the java command line, JAVA_ARGS_APPEND's last (the JVM
    # takes the last): several JVMs share a small machine
    code, out = artemis._wrapped().exec_run(["cat", "/proc/1/cmdline"])
    assert code == 0, out
    args = out.decode("utf-8", "replace").split("\0")
    assert args[0].endswith("java"), args
    assert [a for a in args if a.startswith("-Xmx")][-1] == "-Xmx384m", args
    assert set(quick_start_options()) <= set(args), args  # the quick start, as a local JVM's


@pytest.mark.container
@pytest.mark.slow
def test_real_broker_xml_has_prefixes_and_the_address_setting_first(artemis):
    ns = {"c": "urn:activemq:core"}
    root = ET.fromstring(instance_file(artemis, "etc/broker.xml"))
    settings = root.find("c:core/c:address-settings", ns)
    assert settings is not None, "etc/broker.xml has no <address-settings>"
    created = settings.findall("c:address-setting", ns)
    # first, before the catch-all "#" setting `artemis create` writes (comments are not elements here)
    assert created[0].get("match") == "grp.#"
    assert created[0].find("c:default-group-buckets", ns).text == "8"
    assert "#" in [s.get("match") for s in created[1:]], "the created address settings must still be there"
    acceptors = {a.get("name"): a.text for a in root.find("c:core/c:acceptors", ns)}
    assert "anycastPrefix=/queue/;multicastPrefix=/topic/" in acceptors["stomp"]
    assert "anycastPrefix=queue://;multicastPrefix=topic://" in acceptors["amqp"]


@pytest.mark.container
@pytest.mark.slow
def test_real_login_required_and_journal_kept_across_kill(tmp_path):
    """A scenario user turns anonymous login off; after SIGKILL the same container comes back on
    the same host ports with its instance (created once) and its journal (a persistent message)."""
    require_image()
    broker = ArtemisContainer(tmp_path, name="art-login", users=(("alice", "s3cret"),), mqtt=False, amqp=False)
    queue = f"queue://docker.art.kept.{uuid.uuid4().hex[:8]}"
    try:
        broker.start()
        ok, answer = mod.stomp_handshake(broker.ports["stomp"], 10, None)
        assert not ok and answer.startswith("ERROR"), f"anonymous CONNECT was answered with {answer!r}"
        with connect(*broker.stomp_address, "stomp", login="alice", passcode="s3cret", timeout=10) as producer:
            producer.send(queue, b"before the kill", persistent=True)
        ports, container_id = dict(broker.ports), broker.container_id
        # the chaos nemesis signals this PID: the JVM itself (every step of the entrypoint execs)
        with open(f"/proc/{broker.pid}/comm", encoding="utf-8") as f:
            assert f.read().strip() == "java"
        broker.kill()
        assert not broker.running and broker.pid is None
        broker.start(timeout=120)
        assert broker.ports == ports and broker.container_id == container_id
        with connect(*broker.stomp_address, "stomp", login="alice", passcode="s3cret", timeout=10) as consumer:
            got = consumer.subscribe(queue).receive(timeout=10)
        assert got is not None and got.text == "before the kill"
        log = broker.log_tail(100000)
        assert log.count("Creating ActiveMQ Artemis instance") == 1, "the restart must reuse the instance"
        assert log.count("HTTP Server started") == 2
    finally:
        network = broker.network_name
        broker.stop()
    from docker import errors as docker_errors  # noqa: PLC0415 - the docker SDK is optional

    client = docker_client()
    try:
        with pytest.raises(docker_errors.NotFound):
            client.containers.get(container_id)
        with pytest.raises(docker_errors.NotFound):
            client.networks.get(network)
    finally:
        client.close()


@pytest.mark.container
@pytest.mark.slow
def test_real_process_nemesis_pauses_and_resumes_the_container_jvm(artemis):
    """chaos.nemesis.process signals `pid` (SIGSTOP / SIGCONT to its process group): the broker stops
    answering while paused and serves again after the resume, in the same container."""

    container_id = artemis.container_id

    with ProcessNemesis(ProcessNode("A", artemis)) as nemesis:
        paused = nemesis.invoke("pause")
        assert paused["pid"] == artemis.pid
        assert not artemis.serving(timeout=2), "a paused broker answered STOMP CONNECT"
        nemesis.invoke("resume")
        assert artemis.serving(timeout=10), "the broker does not serve after the resume"
    assert artemis.container_id == container_id
