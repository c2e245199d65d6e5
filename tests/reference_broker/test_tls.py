"""TLS on every listener of the reference broker (issue 20): STOMP, MQTT and AMQP over TLS beside
their plain listeners, HTTPS statistics, client certificates, and clients that fail the handshake
(plaintext, a certificate from an untrusted CA, no certificate where one is required, a stalled
handshake) dropped without disturbing the clients that are connected.

Certificates are made per module at run time (conformance/certificates.py)."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.request
from pathlib import Path

import pytest

from conformance.certificates import make_pki
from conformance.clients import ClientError, ClientTls, ConnectFailed, connect
from conformance.scenario import Scenario
from conformance.targets.reference.target import ReferenceTarget
from reference_broker.__main__ import main
from reference_broker.config import ConfigError, build_config
from reference_broker.tls import server_contexts

PROTOCOLS = ("stomp", "mqtt", "amqp")
TIMEOUT = 5.0
#: what each protocol's client sends first: the plaintext a TLS listener must refuse
PLAINTEXT_HELLO = {
    "stomp": b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00",
    "mqtt": b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04abcd",  # MQTT 3.1.1 CONNECT, client id "abcd"
    "amqp": b"AMQP\x00\x01\x00\x00",
}
#: how each protocol's answer to that would start, had the broker read it as plaintext
PLAINTEXT_ANSWER = {"stomp": b"CONNECTED", "mqtt": b"\x20", "amqp": b"AMQP"}


def _dest(protocol: str, name: str) -> str:
    return f"topic://tls.{name}" if protocol == "mqtt" else f"queue://tls.{name}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    """The reference target with Scenario(tls=True): TLS ports in ``ports``, plain in ``plain_ports``."""
    handle = ReferenceTarget().launch(Scenario("tls", tls=True), tmp_path_factory.mktemp("tls-broker"))
    yield handle
    handle.stop()


def _client(handle, protocol: str, **options):
    return connect(handle.host, handle.ports[protocol], protocol, **{**handle.client_options[protocol], **options})


def _round_trip(client, protocol: str, name: str, body: str) -> bytes | None:
    destination = _dest(protocol, name)
    subscription = client.subscribe(destination)
    client.send(destination, body)
    received = subscription.receive(TIMEOUT)
    subscription.close()
    return None if received is None else received.body


def _plaintext_is_refused(port: int, protocol: str) -> bytes:
    """Speak ``protocol`` in plaintext to a TLS port; returns what came back before the broker closed
    (at most a TLS alert). Fails when the connection stays open or gets a protocol answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(PLAINTEXT_HELLO[protocol])
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
        except socket.timeout:
            pytest.fail(f"a plaintext {protocol} client on the TLS port was neither answered nor closed "
                        f"within {TIMEOUT}s (got {got!r})")
    assert not got.startswith(PLAINTEXT_ANSWER[protocol]), f"the TLS port answered plaintext {protocol}: {got!r}"
    # anything sent back is a TLS record (content type 21 = alert), never protocol bytes
    assert got == b"" or got[0] == 21, f"unexpected bytes from the TLS port: {got[:40]!r}"
    return got


# --------------------------------------------------------------------------- over TLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_send_and_receive_over_tls(tls_broker, protocol):
    assert tls_broker.ports[protocol] != tls_broker.plain_ports[protocol]
    client = _client(tls_broker, protocol)
    try:
        assert _round_trip(client, protocol, f"rt.{protocol}", "over tls") == b"over tls"
    finally:
        client.close()


def test_plain_listeners_stay_open_beside_the_tls_ones(tls_broker):
    plain = connect(tls_broker.host, tls_broker.plain_ports["stomp"], "stomp")
    secure = _client(tls_broker, "stomp")
    try:
        subscription = secure.subscribe("queue://tls.side-by-side")
        plain.send("queue://tls.side-by-side", "from plain")
        got = subscription.receive(TIMEOUT)
        assert got is not None and got.body == b"from plain"
    finally:
        plain.close()
        secure.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_plaintext_on_the_tls_port_is_refused_and_others_carry_on(tls_broker, protocol):
    connected = _client(tls_broker, protocol)
    try:
        destination = _dest(protocol, f"others.{protocol}")
        subscription = connected.subscribe(destination)
        _plaintext_is_refused(tls_broker.ports[protocol], protocol)
        connected.send(destination, "still here")
        got = subscription.receive(TIMEOUT)
        assert got is not None and got.body == b"still here"
    finally:
        connected.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_untrusted_client_certificate_is_refused_and_others_carry_on(tls_broker, protocol):
    pki = tls_broker.tls.pki
    rogue = ClientTls(pki.ca_cert, pki.rogue_client_cert, pki.rogue_client_key, server_name="localhost")
    connected = _client(tls_broker, protocol)
    try:
        destination = _dest(protocol, f"rogue.{protocol}")
        subscription = connected.subscribe(destination)
        with pytest.raises(ConnectFailed):
            _client(tls_broker, protocol, tls=rogue)
        connected.send(destination, "still here")
        got = subscription.receive(TIMEOUT)
        assert got is not None and got.body == b"still here"
    finally:
        connected.close()


def test_a_stalled_handshake_does_not_hold_other_clients(tls_broker):
    """A socket that connects to the TLS port and never says hello: the handshake waits on it
    (tls_handshake_timeout_ms), the loop does not."""
    with socket.create_connection(("127.0.0.1", tls_broker.ports["stomp"]), timeout=TIMEOUT):
        client = _client(tls_broker, "stomp")
        try:
            assert _round_trip(client, "stomp", "stalled", "not blocked") == b"not blocked"
        finally:
            client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_refuses_a_broker_its_ca_did_not_sign(tls_broker, protocol):
    # the client's own certificate is no CA: nothing chains to it, so the broker's must be refused
    wrong_trust = ClientTls(tls_broker.tls.pki.client_cert, server_name="localhost")
    with pytest.raises(ConnectFailed):
        _client(tls_broker, protocol, tls=wrong_trust)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_checks_the_broker_name(tls_broker, protocol):
    pki = tls_broker.tls.pki
    with pytest.raises(ConnectFailed):
        _client(tls_broker, protocol, tls=ClientTls(pki.ca_cert, server_name="not-the-broker.example"))


# --------------------------------------------------------------------------- client certificates


@pytest.fixture
def mutual_tls_broker(broker_factory, pki):
    listener = {"address": "127.0.0.1:0", "tls_cert_file": str(pki.server_cert), "tls_key_file": str(pki.server_key),
                "tls_ca_file": str(pki.ca_cert), "tls_require_client_cert": True}
    return broker_factory(stomp_ssl=listener, mqtt_ssl=listener, amqp_ssl=listener)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_required_client_certificate(mutual_tls_broker, pki, protocol):
    port = mutual_tls_broker.server.tls_addresses[f"{protocol}_ssl"][1]
    good = ClientTls(pki.ca_cert, pki.client_cert, pki.client_key, server_name="localhost")
    client = connect("127.0.0.1", port, protocol, tls=good)
    try:
        with pytest.raises(ConnectFailed):
            connect("127.0.0.1", port, protocol, tls=ClientTls(pki.ca_cert, server_name="localhost"))
        assert _round_trip(client, protocol, f"mutual.{protocol}", "with cert") == b"with cert"
    finally:
        client.close()


# --------------------------------------------------------------------------- HTTPS


def test_https_statistics_and_no_plain_http_on_that_port(broker_factory, pki):
    running = broker_factory(https={"address": "127.0.0.1:0", "tls_cert_file": str(pki.server_cert),
                                    "tls_key_file": str(pki.server_key)})
    port = running.server.tls_addresses["https"][1]
    context = ClientTls(pki.ca_cert).context()
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", context=context, timeout=TIMEOUT) as response:
        assert json.load(response)["status"] == "ok"
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
    assert not got.startswith(b"HTTP/"), f"the https port answered plain HTTP: {got[:60]!r}"


# --------------------------------------------------------------------------- configuration errors


def _listener(pki, **override) -> dict:
    return {"address": "127.0.0.1:0", "tls_cert_file": str(pki.server_cert), "tls_key_file": str(pki.server_key),
            **override}


def test_missing_certificate_file_is_named(pki, tmp_path):
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=rf"'stomp_ssl\.tls_cert_file'.*no such file: {missing}"):
        build_config({"stomp_ssl": _listener(pki, tls_cert_file=str(missing))})


def test_key_path_that_is_not_a_file_is_named(pki, tmp_path):
    with pytest.raises(ConfigError, match=rf"'mqtt_ssl\.tls_key_file'.*not a file: {tmp_path}"):
        build_config({"mqtt_ssl": _listener(pki, tls_key_file=str(tmp_path))})


def test_key_of_another_certificate_is_named(pki):
    config = build_config({"amqp_ssl": _listener(pki, tls_key_file=str(pki.client_key))})
    with pytest.raises(ConfigError, match=r"'amqp_ssl\.tls_key_file'.*not the PEM private key"):
        server_contexts(config)


def test_certificate_file_that_is_no_certificate_is_named(pki):
    config = build_config({"https": _listener(pki, tls_cert_file=str(pki.server_key))})
    with pytest.raises(ConfigError, match=r"'https\.tls_cert_file'.*no PEM certificate"):
        server_contexts(config)


def test_required_client_certificates_need_a_ca(pki):
    with pytest.raises(ConfigError, match=r"stomp_ssl.*tls_require_client_cert needs tls_ca_file"):
        build_config({"stomp_ssl": _listener(pki, tls_require_client_cert=True)})


def test_command_line_tls_errors_exit_2_naming_the_option(pki, capsys, tmp_path):
    assert main(["--stomp-ssl", "127.0.0.1:0"]) == 2
    assert "--stomp-ssl needs --tls-cert-file and --tls-key-file" in capsys.readouterr().err
    assert main(["--mqtt-ssl", "127.0.0.1:0", "--tls-cert-file", str(pki.server_cert),
                 "--tls-key-file", str(pki.client_key)]) == 2
    assert "'mqtt_ssl.tls_key_file'" in capsys.readouterr().err


# --------------------------------------------------------------------------- as a process


def test_process_target_serves_tls_and_keeps_the_port_on_restart(tmp_path):
    handle = ReferenceTarget(launch="process").launch(Scenario("tls-process", protocols=("stomp",), tls=True),
                                                      tmp_path)
    try:
        port = handle.ports["stomp"]
        assert port != handle.plain_ports["stomp"]
        client = _client(handle, "stomp")
        # the process runs on uvloop where installed, whose TLS transport is not asyncio's
        _plaintext_is_refused(port, "stomp")
        assert _round_trip(client, "stomp", "process", "tls process") == b"tls process"
        client.close()
        handle.stop()
        handle.start()
        assert handle.ports["stomp"] == port
        client = _client(handle, "stomp")
        assert _round_trip(client, "stomp", "process2", "again") == b"again"
        client.close()
    finally:
        handle.stop()


def test_stomp_tls_client_close_leaves_no_receiver_thread(tls_broker):
    """stomp.py's TLS receiver thread waits in select() without a time-out; the adapter's close
    must stop it (conformance/clients/stomp_client.py _stop_transport), not leave it blocked."""
    client = _client(tls_broker, "stomp")
    thread = client._conn.transport.io_thread
    assert thread is not None and thread.is_alive()
    client.close()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "the STOMP client's TLS receiver thread outlived close()"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_sees_the_broker_close_a_tls_connection(broker_factory, pki, protocol):
    """A TLS client must observe the broker going away (conformance clients raise ClientError once
    the connection is lost, instead of reading it as "nothing arrived")."""
    listener = _listener(pki)
    running = broker_factory(**{f"{protocol}_ssl": listener})
    port = running.server.tls_addresses[f"{protocol}_ssl"][1]
    client = connect("127.0.0.1", port, protocol, tls=ClientTls(pki.ca_cert, server_name="localhost"))
    try:
        subscription = client.subscribe(_dest(protocol, f"lost.{protocol}"))
        running.stop()
        with pytest.raises(ClientError, match="connection lost"):
            subscription.receive(TIMEOUT)
    finally:
        client.close()


def test_handshake_timeout_drops_a_silent_client(broker_factory, pki):
    running = broker_factory(stomp_ssl=_listener(pki, tls_handshake_timeout_ms=300))
    port = running.server.tls_addresses["stomp_ssl"][1]
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            closed = False
    assert closed, f"a client that never started the handshake was still connected after {TIMEOUT}s " \
                   "(tls_handshake_timeout_ms = 300)"


@pytest.mark.parametrize("listener", ["stomp_ssl", "mqtt_ssl", "amqp_ssl", "https"])
def test_tls_listener_off_loopback_without_users_is_refused_too(pki, listener):
    """ENG-SEC-1 covers the TLS twins as well: encryption says nothing about who may connect."""
    from reference_broker.config import ConfigError, build_config

    tls = {"address": "0.0.0.0:0", "tls_cert_file": str(pki.server_cert), "tls_key_file": str(pki.server_key)}
    with pytest.raises(ConfigError, match=f"listener '{listener}' = '0.0.0.0:0' is not a loopback address"):
        build_config({listener: tls})
    build_config({listener: tls, "security": {"users": [{"name": "u", "password": "p"}]}})
    build_config({listener: {**tls, "address": "127.0.0.1:0"}})
