"""The sans-IO SASL layer in front of AMQP (reference_broker/protocols/amqp/sasl.py), tested with
bytes and with a proton client transport, no sockets."""

from __future__ import annotations

import struct

import pytest
from proton import Connection, SASL, Transport

from reference_broker.protocols.amqp.sasl import AMQP_HEADER, SASL_HEADER, SaslServer, SaslState

USERS = {"alice": "secret"}


def authenticate(login, passcode):
    if login is None:
        return  # anonymous allowed in these tests
    if USERS.get(login) != passcode:
        raise PermissionError(f"user {login!r}: wrong user name or password")


def converse(server: SaslServer, client: Transport, rounds: int = 6) -> None:
    """Shuttle bytes between a proton client transport and the server until quiet."""
    for _ in range(rounds):
        pending = client.pending()
        if pending > 0:
            data = bytes(client.peek(pending))
            client.pop(pending)
            if server.state not in (SaslState.DONE, SaslState.FAILED):
                server.feed(data)
        out = server.take_output()
        if out:
            client.push(out)


def proton_client(user: str | None = None, password: str | None = None) -> tuple[Transport, SASL]:
    transport = Transport(Transport.CLIENT)
    sasl = transport.sasl()
    sasl.allow_insecure_mechs = True
    connection = Connection()
    if user is not None:
        connection.user = user
        connection.password = password
    transport.bind(connection)
    connection.open()
    return transport, sasl


def test_plain_with_good_credentials():
    server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
    client, sasl = proton_client("alice", "secret")
    converse(server, client)
    assert sasl.outcome == SASL.OK
    assert server.state is SaslState.DONE
    assert (server.login, server.passcode, server.mechanism, server.used_sasl) == ("alice", "secret", "PLAIN", True)
    assert server.remainder.startswith(AMQP_HEADER)  # the AMQP layer starts with its header


def test_plain_with_bad_credentials_fails_and_says_why():
    server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
    client, sasl = proton_client("alice", "wrong")
    converse(server, client)
    assert sasl.outcome == SASL.AUTH
    assert server.state is SaslState.FAILED
    assert "wrong user name or password" in server.error


def test_anonymous():
    server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
    client, sasl = proton_client()
    converse(server, client)
    assert sasl.outcome == SASL.OK
    assert (server.login, server.mechanism) == (None, "ANONYMOUS")


def test_anonymous_not_offered_is_refused():
    server = SaslServer(["PLAIN"], authenticate)
    client, sasl = proton_client()  # no credentials: proton cannot pick PLAIN
    converse(server, client)
    assert server.state is not SaslState.DONE


def sasl_frame(body: bytes) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


def init_frame(mechanism: str, response: bytes) -> bytes:
    from proton import Data, Described, symbol, ulong

    data = Data()
    data.put_object(Described(ulong(0x41), [symbol(mechanism), response]))
    return sasl_frame(bytes(data.encode()))


def test_unoffered_mechanism_fails():
    server = SaslServer(["PLAIN"], authenticate)
    server.feed(SASL_HEADER + init_frame("ANONYMOUS", b""))
    assert server.state is SaslState.FAILED and "not offered" in server.error


def test_byte_at_a_time():
    server = SaslServer(["PLAIN"], authenticate)
    stream = SASL_HEADER + init_frame("PLAIN", b"\x00alice\x00secret") + AMQP_HEADER + b"rest"
    for i in range(len(stream)):
        if server.state is SaslState.DONE:
            break
        server.feed(stream[i:i + 1])
    assert server.state is SaslState.DONE and server.login == "alice"
    assert server.remainder == AMQP_HEADER  # handed to proton, which answers it


def test_bare_amqp_header_skips_sasl():
    server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
    server.feed(AMQP_HEADER + b"\x00\x00\x00\x08\x02\x00\x00\x00")
    assert server.state is SaslState.DONE and not server.used_sasl
    assert server.remainder == AMQP_HEADER + b"\x00\x00\x00\x08\x02\x00\x00\x00"
    assert server.take_output() == b""  # proton answers the header itself


@pytest.mark.parametrize("stream, reason", [
    (b"GET / HTTP/1.1\r\n", "unsupported protocol header"),
    (b"AMQP\x02\x01\x00\x00", "unsupported protocol header"),  # TLS
    (SASL_HEADER + b"\x00\x00\x00\x04\x02\x01\x00\x00", "malformed SASL frame header"),
    (SASL_HEADER + b"\x00\x10\x00\x00\x02\x01\x00\x00", "larger than"),
    (SASL_HEADER + sasl_frame(b"\xff\xff"), "undecodable"),
    (SASL_HEADER + sasl_frame(b"\xa1\x02hi"), "described list"),
    (SASL_HEADER + b"\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x53\x10\x45", "expected a SASL frame"),
    (SASL_HEADER + init_frame("PLAIN", b"\x00alice\x00secret") + b"HTTP/1.1", "expected the AMQP protocol header"),
])
def test_garbage_fails(stream, reason):
    server = SaslServer(["PLAIN", "ANONYMOUS"], authenticate)
    server.feed(stream)
    assert server.state is SaslState.FAILED
    assert reason in server.error
    if not stream.startswith(SASL_HEADER):
        assert server.take_output() == SASL_HEADER  # AMQP 2.2: answer with the supported header


def test_malformed_plain_response_fails():
    server = SaslServer(["PLAIN"], authenticate)
    server.feed(SASL_HEADER + init_frame("PLAIN", b"no-nul-bytes"))
    assert server.state is SaslState.FAILED and "malformed PLAIN" in server.error
