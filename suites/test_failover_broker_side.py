"""The broker side of client failover and discovery, against the A-MQ "Fault Tolerant Messaging"
guide, 2.1.2 "Broker-side configuration" and 2.2.2.4 "Multicast Discovery Agent"
(../shared/spec/redhat-amq-6.2-fault-tolerant-messaging.md; catalogue fault_tolerance.toml): a
listening endpoint is never given a failover URI (FT-DYNAMIC-5); only a listener with a
discoveryUri is announced, in its group (FT-DISCOVERY-5); a multicast discovery client uses the
brokers of its group and only those (FT-DISCOVERY-6). Multicast stays on loopback with TTL 0
(reference_broker/cluster/discovery.py), in a group of the test's own.

Generated only for targets whose listeners this module knows how to configure by hand: the
reference broker (its --stomp flag and its configuration file's ``stomp`` and ``discovery_uri``
keys) and ActiveMQ as a local JVM (its activemq.xml, rendered by conformance/targets/activemq/process.py);
a test is generated only for the kinds it knows (`KINDS`), so a statement it cannot set up on
another kind stays "not checked" there rather than being reported not applicable.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest

from conformance.clients.failover import CLIENT_SUBJECT, connect_failover
from conformance.clients.multicast_agent import listen
from conformance.plugin import STATE
from conformance.targets.runtime.probes import tcp_accepts
from machinery.waiting import poll
from suites.java_support import ACTIVEMQ_CLIENTS, client_params, start_driver
from machinery.tether import launch

FAILOVER_LISTENER = "failover:(stomp://127.0.0.1:61613,stomp://127.0.0.1:61614)"


#: the target kinds each test knows how to set up (by test name); a test is generated for those only
KINDS = {"test_activemq_announces_only_the_connector_with_a_discovery_uri": ("activemq",),
         "test_activemq_refuses_a_transport_connector_with_a_failover_uri": ("activemq",),
         "test_a_multicast_discovery_client_uses_only_the_activemq_brokers_of_its_group": ("activemq",),
         "test_a_discovery_client_fails_over_to_an_activemq_broker_announced_after_it_started": ("activemq",),
         "test_the_real_multicast_discovery_clients_use_only_the_activemq_brokers_of_their_group": ("activemq",),
         "test_the_real_discovery_clients_fail_over_to_a_broker_announced_after_they_started": ("activemq",)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target_name" in metafunc.fixturenames:
        state = metafunc.config.stash[STATE]
        kinds = KINDS.get(metafunc.definition.originalname, ("reference",))
        names = [n for n in dict.fromkeys(state.target_names) if state.targets[n].kind in kinds]
        metafunc.parametrize("target_name", names, ids=names)


def _start(args: list[str], cwd) -> subprocess.CompletedProcess:
    # a broker that accepted the listener would serve for ever: the timeout bounds that case, and
    # its process is killed by subprocess.run when it fires
    return subprocess.run([sys.executable, "-m", "reference_broker", "--name", "ftdyn5", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.spec("FT-DYNAMIC-5")
@pytest.mark.parametrize("where", ["flag", "config-file"])
def test_a_listener_given_a_failover_uri_is_refused(target_name, where, tmp_path):
    if where == "flag":
        args = ["--stomp", FAILOVER_LISTENER]
    else:
        config = tmp_path / "broker.toml"
        config.write_text(f'stomp = "{FAILOVER_LISTENER}"\n')
        args = ["--config", str(config)]
    try:
        done = _start(args, tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"FT-DYNAMIC-5: the broker started with a failover: URI as its STOMP listener ({where})")
    assert done.returncode == 2, (f"FT-DYNAMIC-5: a failover: URI as the STOMP listener ({where}) should be refused as "
                                  f"a usage error (exit 2); exit {done.returncode}\n{done.stderr[-2000:]}")
    assert "stomp" in done.stderr and "HOST:PORT" in done.stderr, \
        f"FT-DYNAMIC-5: the refusal should name the stomp listener and what it takes: {done.stderr[-2000:]}"


# --------------------------------------------------------------------------- multicast discovery


class AnnouncingBroker:
    """A reference broker process with one STOMP listener and, when ``group`` is given, that
    listener announced in the multicast group (``discovery_uri``, loopback only, TTL 0)."""

    def __init__(self, workdir, name: str, group: str | None) -> None:
        self.port = free_port()
        config = workdir / f"{name}.toml"
        lines = [f'name = "{name}"', f'stomp = "127.0.0.1:{self.port}"']
        if group is not None:
            lines.append(f'discovery_uri = "multicast://default?group={group}"')
        config.write_text("\n".join(lines) + "\n")
        self.log = open(workdir / f"{name}.log", "w")
        self.process = launch([sys.executable, "-m", "reference_broker", "--config", str(config)],
                              cwd=workdir, stdout=self.log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
        if not poll(lambda: tcp_accepts(self.port, 1.0) or self.process.poll() is not None, bool, timeout=60):
            self.stop()
            raise RuntimeError(f"reference broker {name} did not open 127.0.0.1:{self.port}")
        if self.process.poll() is not None:
            self.stop()
            raise RuntimeError(f"reference broker {name} exited: {(workdir / f'{name}.log').read_text()[-2000:]}")

    @property
    def service(self) -> str:
        return f"stomp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.log.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def brokers(tmp_path):
    started = []

    def start(name: str, group: str | None) -> AnnouncingBroker:
        broker = AnnouncingBroker(tmp_path, name, group)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def _group() -> str:
    return f"brokerconf-{uuid.uuid4().hex[:10]}"  # this test's own group, never "default"


@pytest.mark.spec("FT-DISCOVERY-5")
def test_only_a_listener_with_a_discovery_uri_is_announced_in_its_group(target_name, brokers):
    group = _group()
    announced = brokers("announced", group)
    silent = brokers("silent", None)
    heard = poll(lambda: listen(f"multicast://default?group={group}", 1.5), lambda h: announced.service in h,
                 timeout=30, interval=0.1)
    assert heard and announced.service in heard, \
        f"FT-DISCOVERY-5: the broker whose listener has discoveryUri in group {group} was not heard there: {heard}"
    assert not any(f":{silent.port}" in service for service in heard), \
        f"FT-DISCOVERY-5: the broker without a discoveryUri was announced: {heard}"
    assert heard == [announced.service], f"FT-DISCOVERY-5: the group holds more than the one announced listener: {heard}"


@pytest.mark.spec("FT-DISCOVERY-6")
@pytest.mark.client_subject(CLIENT_SUBJECT)  # how our client builds its list: a client statement
def test_a_multicast_discovery_client_uses_only_the_brokers_of_its_group(target_name, brokers):
    group, other = _group(), _group()
    member = brokers("member", group)
    stranger = brokers("stranger", other)
    queue = f"queue://ftdisc6.{uuid.uuid4().hex[:8]}"
    client = connect_failover(f"discovery:(multicast://default?group={group})?initialReconnectDelay=100", "stomp",
                              timeout=5.0)
    try:
        listed = [u.port for u in client.order.uris]
        assert client.uri.port == member.port, \
            f"FT-DISCOVERY-6: the client should connect to the broker announcing in {group}; it is on {client.uri}"
        assert stranger.port not in listed, \
            f"FT-DISCOVERY-6: the broker of another group ({other}) got into the client's list: {listed}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(10.0)
        assert got is not None and got.body == b"m", f"FT-DISCOVERY-6: the discovered connection does not work: {got}"
    finally:
        client.close()



def discovery_client(group: str, first_port: int):
    """A discovery client of ``group`` started while only the broker on ``first_port`` announces."""
    client = connect_failover(f"discovery:(multicast://default?group={group})?initialReconnectDelay=100&"
                              "maxReconnectDelay=1000", "stomp", timeout=60.0)
    if client.uri.port != first_port:
        client.close()
        pytest.fail(f"setup: the client should start on the only announced broker (port {first_port}): {client.uri}")
    return client


def check_moves_to_the_later_broker(client, later_port: int, stop_first) -> None:
    """FT-DISCOVERY-9: with the broker it started on gone, the client must reach the one that began
    announcing after it connected (so was not in the list it heard at start)."""
    queue = f"queue://ftdisc9.{uuid.uuid4().hex[:8]}"
    try:
        stop_first()
        sub = client.subscribe(queue)
        client.send(queue, b"after")
        got = sub.receive(30.0)
        assert client.uri.port == later_port, \
            (f"FT-DISCOVERY-9: once the first broker was gone the client should have found the broker announced "
             f"after it started (port {later_port}); it is on {client.uri}")
        assert got is not None and got.body == b"after", f"FT-DISCOVERY-9: the new connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-DISCOVERY-9")
@pytest.mark.client_subject(CLIENT_SUBJECT)  # how our client refreshes its list
def test_a_discovery_client_fails_over_to_a_broker_announced_after_it_started(target_name, brokers):
    group = _group()
    first = brokers("first", group)
    client = discovery_client(group, first.port)
    try:
        later = brokers("later", group)
        heard = poll(lambda: listen(f"multicast://default?group={group}", 1.5), lambda h: later.service in h,
                     timeout=30, interval=0.1)
        assert heard and later.service in heard, f"setup: the later broker was never heard in {group}: {heard}"
    except BaseException:
        client.close()
        raise
    check_moves_to_the_later_broker(client, later.port, first.stop)

# --------------------------------------------------------------------------- the same on ActiveMQ


@pytest.fixture
def activemq_brokers(target_name, request, tmp_path):
    """``start(name, group, openwire=True)``: a started ActiveMQ broker (a local JVM) whose first
    connector (OpenWire, or STOMP without OpenWire) announces in ``group``, on loopback."""
    from conformance.requirements import skip_or_fail
    from conformance.targets.activemq.process import ActiveMQProcess
    from reference_broker.cluster.discovery import activemq_loopback_uri

    target = request.config.stash[STATE].targets[target_name]
    ok, reason = target.availability()
    if not ok:
        skip_or_fail("activemq", reason)
    started = []

    def start(name: str, group: str, openwire: bool = True) -> ActiveMQProcess:
        process = ActiveMQProcess(tmp_path / name, name=f"ftdisc-{name}", jvm_heap_mb=256, memory_limit_mb=96,
                                  openwire=openwire, discovery_uri=activemq_loopback_uri(group))
        started.append(process)
        process.start(timeout=180)
        return process

    yield start
    for process in started:
        process.stop()


def _ports(services: list[str]) -> list[int]:
    return [int(s.split("?", 1)[0].rsplit(":", 1)[1]) for s in services]


@pytest.mark.spec("FT-DISCOVERY-5")
def test_activemq_announces_only_the_connector_with_a_discovery_uri(target_name, activemq_brokers):
    group = _group()
    broker = activemq_brokers("announced", group)  # discoveryUri on its OpenWire connector only
    heard = poll(lambda: listen(f"multicast://default?group={group}", 1.5), lambda h: bool(h), timeout=60,
                 interval=0.1)
    assert heard, f"FT-DISCOVERY-5: nothing was announced in group {group}\n{broker.log_tail(30)}"
    assert _ports(heard) == [broker.openwire_port], \
        (f"FT-DISCOVERY-5: only the OpenWire connector (port {broker.openwire_port}) has a discoveryUri, so only it "
         f"should be announced; heard {heard} (its STOMP connector is port {broker.stomp_port})")


@pytest.mark.spec("FT-DISCOVERY-6")
@pytest.mark.client_subject(CLIENT_SUBJECT)  # how our client builds its list: a client statement
def test_a_multicast_discovery_client_uses_only_the_activemq_brokers_of_its_group(target_name, activemq_brokers):
    group, other = _group(), _group()
    # without OpenWire the STOMP connector carries the discoveryUri, so the brokers announce what
    # our (STOMP) client speaks
    member = activemq_brokers("member", group, openwire=False)
    stranger = activemq_brokers("stranger", other, openwire=False)
    queue = f"queue://ftdisc6.{uuid.uuid4().hex[:8]}"
    client = connect_failover(f"discovery:(multicast://default?group={group})?initialReconnectDelay=100", "stomp",
                              timeout=10.0)
    try:
        listed = [u.port for u in client.order.uris]
        assert client.uri.port == member.stomp_port, \
            f"FT-DISCOVERY-6: the client should connect to the broker announcing in {group}; it is on {client.uri}"
        assert stranger.stomp_port not in listed, \
            f"FT-DISCOVERY-6: the broker of another group ({other}) got into the client's list: {listed}"
        sub = client.subscribe(queue)
        client.send(queue, b"m")
        got = sub.receive(10.0)
        assert got is not None and got.body == b"m", f"FT-DISCOVERY-6: the discovered connection does not work: {got}"
    finally:
        client.close()


@pytest.mark.spec("FT-DYNAMIC-5")
def test_activemq_refuses_a_transport_connector_with_a_failover_uri(target_name, request, tmp_path):
    from conformance.requirements import skip_or_fail
    from conformance.targets.activemq.process import ActiveMQProcess, ActiveMQStartError

    target = request.config.stash[STATE].targets[target_name]
    ok, reason = target.availability()
    if not ok:
        skip_or_fail("activemq", reason)

    class WithFailoverConnector(ActiveMQProcess):
        def _connectors_xml(self) -> str:
            # first, so the broker meets it before opening anything else
            return (f'<transportConnector name="fo" uri="failover:(tcp://127.0.0.1:{free_port()})"/>\n      '
                    + super()._connectors_xml())

    broker = WithFailoverConnector(tmp_path / "fo", name="ftdyn5", jvm_heap_mb=256, memory_limit_mb=96)
    try:
        with pytest.raises(ActiveMQStartError) as refused:
            broker.start(timeout=180)
        log = broker.log_tail(200)
    finally:
        broker.stop()
    # ActiveMQ 5.17: TransportFactory.bind refuses it, "java.io.IOException: Invalid server URI: failover:(...)"
    assert "invalid server uri: failover:" in (str(refused.value) + log).lower(), \
        (f"FT-DYNAMIC-5: ActiveMQ did not start with a failover: transport connector, but its log does not say that "
         f"connector was the reason:\n{str(refused.value)[-1500:]}\n{log[-1500:]}")


@pytest.mark.spec("FT-DISCOVERY-9")
@pytest.mark.client_subject(CLIENT_SUBJECT)  # how our client refreshes its list
def test_a_discovery_client_fails_over_to_an_activemq_broker_announced_after_it_started(target_name, activemq_brokers):
    group = _group()
    first = activemq_brokers("first", group, openwire=False)  # the STOMP connector announces
    client = discovery_client(group, first.stomp_port)
    try:
        later = activemq_brokers("later", group, openwire=False)
        heard = poll(lambda: listen(f"multicast://default?group={group}", 1.5),
                     lambda h: later.stomp_port in _ports(h), timeout=60, interval=0.1)
        assert heard and later.stomp_port in _ports(heard), \
            f"setup: the later broker was never heard in {group}: {heard}"
    except BaseException:
        client.close()
        raise
    check_moves_to_the_later_broker(client, later.stomp_port, first.stop)

@pytest.mark.spec("FT-DISCOVERY-6")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_the_real_multicast_discovery_clients_use_only_the_activemq_brokers_of_their_group(target_name, activemq_brokers,
                                                                                       tmp_path, client):
    # the same on ActiveMQ's own clients (issue 28), each through brokerconf's Java driver and
    # credited to that client's column
    from reference_broker.cluster.discovery import activemq_loopback_uri

    group, other = _group(), _group()
    member = activemq_brokers("member", group)  # the OpenWire connector announces, what these clients speak
    stranger = activemq_brokers("stranger", other)
    queue = f"ftdisc6.{uuid.uuid4().hex[:8]}"
    with start_driver(client, tmp_path / client) as driver:
        conn = driver.connect(f"discovery:({activemq_loopback_uri(group)})?initialReconnectDelay=100", timeout=90)
        try:
            assert conn.port == member.openwire_port, \
                (f"FT-DISCOVERY-6: {client} should connect to the broker announcing in {group} (OpenWire port "
                 f"{member.openwire_port}); it is on {conn.address} (the other group's broker: "
                 f"{stranger.openwire_port})")
            conn.send(queue, "m")
            assert conn.receive(queue, 10.0) == "m", f"FT-DISCOVERY-6: {client}'s discovered connection does not work"
        finally:
            conn.close()


@pytest.mark.spec("FT-DISCOVERY-9")
@pytest.mark.parametrize("client", client_params(ACTIVEMQ_CLIENTS))
def test_the_real_discovery_clients_fail_over_to_a_broker_announced_after_they_started(target_name, activemq_brokers,
                                                                                       tmp_path, client):
    # FT-DISCOVERY-9 on ActiveMQ's own clients: started while only "first" announces, they must
    # reach "later" (announced after they connected) once "first" is gone (on the ActiveMQ target
    # only, KINDS: the brokers are ActiveMQ's)
    from reference_broker.cluster.discovery import activemq_loopback_uri

    group = _group()
    first = activemq_brokers("first", group)  # the OpenWire connector announces, what these clients speak
    queue = f"ftdisc9.{uuid.uuid4().hex[:8]}"
    with start_driver(client, tmp_path / client) as driver:
        conn = driver.connect(f"discovery:({activemq_loopback_uri(group)})?initialReconnectDelay=100&"
                              "maxReconnectDelay=1000", timeout=90)
        try:
            assert conn.port == first.openwire_port, \
                f"setup: {client} should start on the only announced broker ({first.openwire_port}): {conn.address}"
            later = activemq_brokers("later", group)
            heard = poll(lambda: listen(f"multicast://default?group={group}", 1.5),
                         lambda h: later.openwire_port in _ports(h), timeout=60, interval=0.1)
            assert heard and later.openwire_port in _ports(heard), \
                f"setup: the later broker was never heard in {group}: {heard}"
            first.stop()
            conn.send(queue, "after", timeout=60)
            assert conn.port == later.openwire_port, \
                (f"FT-DISCOVERY-9: once the first broker was gone {client} should have found the broker announced "
                 f"after it started (OpenWire port {later.openwire_port}); it is on {conn.address}")
            assert conn.receive(queue, 10.0) == "after", \
                f"FT-DISCOVERY-9: {client}'s connection to the later broker does not work{driver.log_tail()}"
        finally:
            conn.close()
