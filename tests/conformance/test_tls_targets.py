"""Scenario(tls=True) on the real brokers' local launchers (issue 20: the project's clients and
launchers speak TLS to every target): ActiveMQ Classic 5.17 with stomp+ssl / mqtt+ssl / amqp+ssl
connectors and Artemis 2.40 with sslEnabled acceptors, both from the run's PKCS12 keystore. One
send and receive per protocol over TLS, and a plaintext client refused on a TLS port.

The reference broker's TLS is tested in tests/reference_broker/test_tls.py."""

from __future__ import annotations

import socket

import pytest

from conformance.clients import connect
from conformance.requirements import skip_or_fail
from conformance.scenario import Scenario
from conformance.targets.activemq.process import activemq_amqp_available, activemq_available, activemq_mqtt_available
from conformance.targets.activemq.target import ActiveMQTarget
from conformance.targets.artemis.dist import installed as artemis_installed
from conformance.targets.artemis.target import ArtemisTarget

pytestmark = [pytest.mark.slow, pytest.mark.real_broker]

SCENARIO = Scenario("tls-targets", tls=True)
PROTOCOLS = ("stomp", "mqtt", "amqp")
TIMEOUT = 10.0


@pytest.fixture(scope="module", params=["activemq", "artemis"])
def tls_handle(request, tmp_path_factory):
    if request.param == "activemq":
        ok, reason = activemq_available()
        if not ok:
            skip_or_fail("activemq", reason)
        target = ActiveMQTarget(name="activemq:process", launch="process")
    else:
        ok, reason = artemis_installed()
        if not ok:
            skip_or_fail("artemis", reason)
        target = ArtemisTarget(name="artemis:process", launch="process")
    handle = target.launch(SCENARIO, tmp_path_factory.mktemp(f"tls-{request.param}"))
    yield handle
    handle.stop()


def _protocol_present(handle, protocol: str) -> None:
    if protocol in handle.ports:
        return
    if handle.kind == "activemq":  # the only listeners that depend on an extra install
        checks = {"mqtt": ("activemq", activemq_mqtt_available), "amqp": ("activemq-amqp", activemq_amqp_available)}
        requirement, check = checks[protocol]
        skip_or_fail(requirement, check()[1])
    pytest.fail(f"{handle.target} opened no {protocol} TLS listener (ports: {handle.ports})")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_send_and_receive_over_tls(tls_handle, protocol):
    _protocol_present(tls_handle, protocol)
    assert tls_handle.ports[protocol] != tls_handle.plain_ports.get(protocol)
    options = tls_handle.client_options[protocol]
    assert options.get("tls") is not None
    client = connect(tls_handle.host, tls_handle.ports[protocol], protocol, **options)
    try:
        destination = f"topic://tls.rt.{protocol}" if protocol == "mqtt" else f"queue://tls.rt.{protocol}"
        subscription = client.subscribe(destination)
        client.send(destination, f"{protocol} over tls")
        got = subscription.receive(TIMEOUT)
        assert got is not None and got.body == f"{protocol} over tls".encode(), (
            f"{tls_handle.target}: nothing came back over TLS; exchange:\n" + "\n".join(client.exchange))
    finally:
        client.close()


def test_plaintext_stomp_on_the_tls_port_gets_no_answer(tls_handle):
    with socket.create_connection((tls_handle.host, tls_handle.ports["stomp"]), timeout=TIMEOUT) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    assert not got.startswith(b"CONNECTED"), f"{tls_handle.target}: its TLS port answered plaintext STOMP: {got!r}"
