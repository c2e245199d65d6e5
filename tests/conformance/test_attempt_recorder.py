"""The attempt recorder of CLU-CC-RETRY-2 (suites/attempt_recorder.py): what it calls a
connection's opening, that an Artemis bridge's connection is answered and dropped only once it asks
for a session (the bridge stall of issue 19 came from drops in the middle of its set-up), and that
only the link's own attempts make the gaps. No timing is asserted beyond "still open" / "closed"."""
from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from suites.attempt_recorder import AttemptRecorder, opening_of


def core_frame(kind: int, channel: int, body: bytes = b"") -> bytes:
    """A Core packet as PacketImpl.encode writes it: length of the rest, type, channel, body."""
    rest = struct.pack(">bq", kind, channel) + body
    return struct.pack(">i", len(rest)) + rest


PING = core_frame(10, 0, struct.pack(">q", 2000))
CLUSTER_CONNECT = core_frame(125, 3, b"\x00" * 20)
CHECK_FOR_FAILOVER = core_frame(-4, 1, b"\x00" * 12)
NODE_ANNOUNCE = core_frame(111, 3, b"\x00" * 30)
SUBSCRIBE_TOPOLOGY = core_frame(113, 0, b"\x00" * 5)
CREATESESSION = core_frame(-18, 1, b"\x00" * 40)
#: what ClusterConnectReplyMessage(authorized=true) on the cluster channel encodes to
AUTHORIZED = struct.pack(">i", 10) + struct.pack(">bq", 126, 3) + b"\x01"


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


def recv_exactly(conn: socket.socket, size: int) -> bytes:
    conn.settimeout(5.0)
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def bridge_attempt(conn: socket.socket, pause: float = 0.0) -> None:
    """What an Artemis bridge sends on a new connection, up to its session request."""
    conn.sendall(b"ARTEMIS")
    if pause:  # a cold bridge: the handshake alone first
        assert not closed_within(conn, pause), "the recorder dropped the connection after the handshake alone"
    conn.sendall(PING + CLUSTER_CONNECT + PING)
    assert recv_exactly(conn, len(AUTHORIZED)) == AUTHORIZED
    conn.sendall(NODE_ANNOUNCE + SUBSCRIBE_TOPOLOGY)
    assert not closed_within(conn, pause or 0.1), "the recorder dropped the connection before the session request"
    conn.sendall(CREATESESSION)


def test_a_bridge_is_answered_and_dropped_only_once_it_asks_for_a_session():
    with AttemptRecorder() as recorder:
        with socket.create_connection(recorder.address) as conn:
            bridge_attempt(conn, pause=0.5)
            assert closed_within(conn, 5.0), "the recorder kept the connection after the session request"
    assert [a.opening for a in recorder.attempts] == ["core CLUSTER_CONNECT"]


def test_other_openings_are_dropped_once_complete_and_only_the_links_own_make_the_gaps():
    with AttemptRecorder() as recorder:
        for opening in (CHECK_FOR_FAILOVER, CLUSTER_CONNECT, CLUSTER_CONNECT, CHECK_FOR_FAILOVER, CLUSTER_CONNECT):
            with socket.create_connection(recorder.address) as conn:
                if opening is CLUSTER_CONNECT:
                    bridge_attempt(conn)
                else:
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


def test_a_wait_counts_from_the_drop_so_the_attempt_s_own_round_is_left_out():
    """The wait after a failed attempt runs from the recorder's drop to the next opening: shorter
    than the opening-to-opening gap by the attempt's round (here at least its `HOLD`), and at
    least the pause the client took before trying again."""
    pause = 0.2
    with AttemptRecorder() as recorder:
        for n in range(3):
            with socket.create_connection(recorder.address) as conn:
                conn.sendall(hello_frame())
                assert closed_within(conn, 5.0)
            if n < 2:
                time.sleep(pause)
    gaps, waits = recorder.gaps(), recorder.waits_after_drops()
    assert len(gaps) == len(waits) == 2
    for gap, wait in zip(gaps, waits):
        assert pause <= wait <= gap - AttemptRecorder.HOLD, (gaps, waits)
    assert all(a.dropped >= a.at + AttemptRecorder.HOLD for a in recorder.attempts)
