"""Messaging over TLS listeners (catalogue: tls.toml). The scenario asks for TLS: each target's
launcher makes the run's certificates and opens a TLS listener per protocol beside the plain one,
and the ``client`` fixture speaks TLS to it (conformance/targets/tls_setup.py). A target without
the ``tls`` capability is reported not applicable with the reason."""

from __future__ import annotations

import socket

import pytest

from conformance.clients import Unsupported, connect
from conformance.scenario import Scenario

SCENARIO = Scenario(name="tls", tls=True)


@pytest.mark.spec("TLS-RT-1")
@pytest.mark.requires("tls")
@pytest.mark.protocols("stomp", "mqtt", "amqp")
def test_send_and_receive_over_tls(client, dest, protocol):
    destination = dest("topic" if protocol == "mqtt" else "queue", "tls")  # MQTT has no queues
    session = client()
    subscription = session.subscribe(destination)
    session.send(destination, b"over-tls")
    got = subscription.receive(5)
    assert got is not None, f"TLS-RT-1: nothing came back over the {protocol} TLS listener from {destination}"
    assert got.body == b"over-tls", f"TLS-RT-1: body changed over TLS: {got.body!r}"


@pytest.mark.spec("TLS-SIDE-1")
@pytest.mark.requires("tls")
def test_plain_and_tls_listeners_serve_the_same_queue(broker, client, dest):
    queue = dest("queue", "tls")
    plain_port = broker.plain_ports.get("stomp")
    if plain_port is None:  # e.g. a broker from a targets file, whose plain listener we are not told
        raise Unsupported(f"{broker.target} names no plain STOMP listener beside its TLS one")
    login, passcode = broker.credentials
    plain = connect(broker.host, plain_port, "stomp", login=login, passcode=passcode)
    try:
        plain.send(queue, b"from-plain")
    finally:
        plain.close()
    got = client("stomp").subscribe(queue).receive(5)
    assert got is not None, f"TLS-SIDE-1: a consumer on the TLS listener got nothing sent to {queue} over the plain one"
    assert got.body == b"from-plain", f"TLS-SIDE-1: body changed: {got.body!r}"


@pytest.mark.spec("TLS-PLAIN-1")
@pytest.mark.requires("tls")
def test_plaintext_connect_on_the_tls_listener_gets_no_session(broker):
    with socket.create_connection((broker.host, broker.ports["stomp"]), timeout=5) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    assert b"CONNECTED" not in got, f"TLS-PLAIN-1: the TLS listener answered a plaintext STOMP CONNECT: {got[:80]!r}"
