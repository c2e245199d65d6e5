"""The attempt recorder of CLU-CC-RETRY-2 (conformance/suites/attempt_recorder.py): what it calls a
connection's opening, that it keeps a connection open until the opening request is complete
(the Artemis bridge stall of issue 19 came from drops in the middle of a set-up), and that only
the link's own attempts make the gaps. No timing is asserted beyond "still open" / "closed"."""
from __future__ import annotations

import json
import socket
import struct

import pytest

from conformance.suites.attempt_recorder import AttemptRecorder, opening_of


def core_frame(kind: int, channel: int, body: bytes = b"") -> bytes:
    """A Core packet as PacketImpl.encode writes it: length of the rest, type, channel, body."""
    rest = struct.pack(">bq", kind, channel) + body
    return struct.pack(">i", len(rest)) + rest


PING = core_frame(10, 0, struct.pack(">q", 2000))
CLUSTER_CONNECT = core_frame(125, 3, b"\x00" * 20)
CHECK_FOR_FAILOVER = core_frame(-4, 1, b"\x00" * 12)


def hello_frame(kind: str = "hello") -> bytes:
    data = json.dumps({"kind": kind, "node": "A"}).encode()
    return struct.pack(">I", len(data)) + data


@pytest.mark.parametrize("data, opening", [
    (b"ART", None),
    (b"ARTEMIS", None),
    (b"ARTEMIS" + PING, None),
    (b"ARTEMIS" + PING + CLUSTER_CONNECT[:6], None),
    (b"ARTEMIS" + PING + CLUSTER_CONNECT + PING, "core CLUSTER_CONNECT"),
    (b"ARTEMIS" + PING + PING + CHECK_FOR_FAILOVER, "core CHECK_FOR_FAILOVER"),
    (b"ARTEMIS" + core_frame(77, 1), "core packet 77"),
    (hello_frame()[:9], None),
    (hello_frame(), "cluster hello"),
    (hello_frame("welcome"), "cluster welcome"),
    (b"GET / HTTP/1.1\r\n", "unrecognised"),
])
def test_opening_of_names_the_first_complete_request(data, opening):
    assert opening_of(data) == opening


def closed_within(conn: socket.socket, seconds: float) -> bool:
    conn.settimeout(seconds)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_connection_stays_open_until_its_opening_request_is_complete():
    with AttemptRecorder() as recorder:
        with socket.create_connection(recorder.address) as conn:
            conn.sendall(b"ARTEMIS")  # the handshake alone, as a cold Artemis bridge sends it
            assert not closed_within(conn, 0.5), "the recorder dropped the connection after the handshake alone"
            conn.sendall(PING + CLUSTER_CONNECT)
            assert closed_within(conn, 5.0), "the recorder kept the connection after a complete opening request"
    assert [a.opening for a in recorder.attempts] == ["core CLUSTER_CONNECT"]


def test_only_the_links_own_attempts_make_the_gaps():
    with AttemptRecorder() as recorder:
        for opening in (CHECK_FOR_FAILOVER, CLUSTER_CONNECT, CLUSTER_CONNECT, CHECK_FOR_FAILOVER, CLUSTER_CONNECT):
            with socket.create_connection(recorder.address) as conn:
                conn.sendall(b"ARTEMIS" + opening)
                assert closed_within(conn, 5.0)
        with socket.create_connection(recorder.address) as conn:
            conn.sendall(hello_frame())
            assert closed_within(conn, 5.0)
    assert sorted(a.opening for a in recorder.attempts) == (
        ["cluster hello"] + ["core CHECK_FOR_FAILOVER"] * 2 + ["core CLUSTER_CONNECT"] * 3)
    assert [a.opening for a in recorder.link_attempts()] == ["core CLUSTER_CONNECT"] * 3 + ["cluster hello"]
    assert len(recorder.gaps()) == 3 and all(g >= 0 for g in recorder.gaps())
    assert recorder.describe().count("CHECK_FOR_FAILOVER") == 2


def test_a_silent_client_is_dropped_after_the_opening_wait_and_noted():
    recorder = AttemptRecorder()
    recorder.OPENING_WAIT = 0.3
    with recorder:
        with socket.create_connection(recorder.address) as conn:
            assert closed_within(conn, 5.0)
    assert [a.opening for a in recorder.attempts] == ["none"]
    assert recorder.gaps() == []
