"""Tests for the raw-socket STOMP load generator (conformance.bench.stomp_load)."""

from __future__ import annotations

import socket
import threading

import pytest

from conformance.requirements import skip_or_fail
from conformance.bench.stomp_load import StompBenchResult, encode_send_frame, run_stomp_load
from conformance.targets.activemq.process import ActiveMQProcess, activemq_available


class FakeStompRelay:
    """A tiny threaded STOMP "broker": CONNECT -> CONNECTED, SUBSCRIBE -> RECEIPT, SEND -> MESSAGE.

    Each SEND is turned into a MESSAGE for the (single) subscriber of its
    destination.  Runs of SEND frames to one destination are rewritten in bulk
    (``bytes.replace``), which is valid because the bench bodies never contain
    ``SEND\\n`` or NUL, so the relay itself is cheap enough to expose the
    generator's own ceiling.  ``drop_after`` stops forwarding after that many
    messages (for the stall test).
    """

    def __init__(self, drop_after: int | None = None) -> None:
        self.drop_after = drop_after
        self.forwarded = 0
        self.connect_headers: list[dict[str, str]] = []
        self._subs: dict[bytes, tuple[socket.socket, bytes, threading.Lock]] = {}
        self._subs_lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closing = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.host, self.port = self._listener.getsockname()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self) -> "FakeStompRelay":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._closing = True
        try:
            self._listener.close()
        except OSError:
            pass
        for c in list(self._conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    # ------------------------------------------------------------------ server side
    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        wlock = threading.Lock()
        pending = b""
        try:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    return
                pending += data
                cut = pending.rfind(b"\x00")
                if cut < 0:
                    continue
                complete, pending = pending[: cut + 1], pending[cut + 1:]
                if not self._handle(conn, wlock, complete):
                    return
        except OSError:
            return
        finally:
            with self._subs_lock:
                for dest, (c, _, _) in list(self._subs.items()):
                    if c is conn:
                        del self._subs[dest]
            conn.close()

    @staticmethod
    def _headers(frame: bytes) -> tuple[bytes, dict[bytes, bytes]]:
        head = frame.split(b"\n\n", 1)[0]
        lines = head.split(b"\n")
        hdrs: dict[bytes, bytes] = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            hdrs.setdefault(k, v)
        return lines[0].strip(), hdrs

    def _forward(self, dest: bytes, frames: bytes, n: int) -> None:
        sub = self._subs.get(dest)
        if sub is None:
            return
        if self.drop_after is not None:
            room = self.drop_after - self.forwarded
            if room <= 0:
                return
            if n > room:  # forward only the first `room` frames
                end = -1
                for _ in range(room):
                    end = frames.index(b"\x00", end + 1)
                frames, n = frames[: end + 1], room
        sock, sub_id, lock = sub
        out = frames.replace(b"SEND\n", b"MESSAGE\nsubscription:" + sub_id + b"\nmessage-id:fake\n")
        with lock:
            sock.sendall(out)
        self.forwarded += n

    def _handle(self, conn: socket.socket, wlock: threading.Lock, complete: bytes) -> bool:
        n = complete.count(b"\x00")
        # Fast path: a run of SEND frames to one destination.
        if complete.count(b"SEND\n") == n:
            first_cmd, hdrs = self._headers(complete.lstrip(b"\r\n"))
            dest = hdrs.get(b"destination", b"")
            if first_cmd == b"SEND" and complete.count(b"\ndestination:" + dest + b"\n") == n:
                self._forward(dest, complete, n)
                return True
        for raw in complete.split(b"\x00")[:-1]:
            frame = raw.lstrip(b"\r\n")
            if not frame:
                continue
            cmd, hdrs = self._headers(frame)
            reply = b""
            if cmd in (b"CONNECT", b"STOMP"):
                self.connect_headers.append({k.decode(): v.decode() for k, v in hdrs.items()})
                reply = b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:fake-relay\n\n\x00"
            elif cmd == b"SUBSCRIBE":
                with self._subs_lock:
                    self._subs[hdrs[b"destination"]] = (conn, hdrs.get(b"id", b"0"), wlock)
            elif cmd == b"SEND":
                self._forward(hdrs.get(b"destination", b""), raw + b"\x00", 1)
            elif cmd in (b"DISCONNECT", b"UNSUBSCRIBE"):
                pass
            else:
                reply = b"ERROR\nmessage:unsupported command\n\n\x00"
            if b"receipt" in hdrs:
                reply += b"RECEIPT\nreceipt-id:" + hdrs[b"receipt"] + b"\n\n\x00"
            if reply:
                with wlock:
                    conn.sendall(reply)
            if cmd == b"DISCONNECT":
                return False
        return True


# ---------------------------------------------------------------------- fake-relay tests


def test_encode_send_frame():
    f = encode_send_frame("/queue/x", 4)
    assert f == b"SEND\ndestination:/queue/x\ncontent-length:4\npersistent:false\n\nxxxx\x00"
    with pytest.raises(ValueError):
        encode_send_frame("/queue/x\nevil:1", 4)


def test_small_run_against_fake_relay():
    with FakeStompRelay() as relay:
        res = run_stomp_load(relay.host, relay.port, target="fake", messages=2_000, warmup=500, timeout=30)
    assert isinstance(res, StompBenchResult)
    assert res.error is None, res.error
    assert res.target == "fake"
    assert res.messages == 2_000
    assert res.consumer_received == 2_000
    assert res.producer_sent == 2_000
    assert res.seconds > 0
    assert res.msgs_per_sec > 0
    assert relay.forwarded == 2_500


def test_topic_no_warmup_and_credentials():
    with FakeStompRelay() as relay:
        res = run_stomp_load(relay.host, relay.port, target="fake-topic", messages=1_500, warmup=0,
                             destination="/topic/bench", body_size=100, login="guest", passcode="s3cret",
                             timeout=30)
        assert res.error is None, res.error
        assert res.consumer_received == 1_500
        assert relay.forwarded == 1_500
        assert len(relay.connect_headers) == 2
        for h in relay.connect_headers:
            assert h["login"] == "guest" and h["passcode"] == "s3cret"


def test_stall_is_reported_with_count():
    with FakeStompRelay(drop_after=1_200) as relay:
        res = run_stomp_load(relay.host, relay.port, target="lossy", messages=2_000, warmup=200, timeout=1.5)
    assert res.error is not None
    assert "stalled" in res.error
    assert res.consumer_received == 1_000
    assert "1000 of 2000" in res.error
    assert res.msgs_per_sec == 0.0


def test_connection_refused_is_an_error_not_an_exception():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = run_stomp_load("127.0.0.1", port, target="nobody", messages=10, warmup=0, timeout=5)
    assert res.error is not None
    assert "Connection refused" in res.error or "ConnectionRefused" in res.error


# ---------------------------------------------------------------------- real broker


@pytest.mark.real_broker
@pytest.mark.slow
def test_against_activemq(tmp_path):
    ok, reason = activemq_available()
    if not ok:
        skip_or_fail("activemq", reason)
    with ActiveMQProcess(tmp_path / "amq") as amq:
        res = run_stomp_load("127.0.0.1", amq.stomp_port, target="activemq", messages=20_000,
                             warmup=2_000, timeout=60)
        assert amq.rss_peak_bytes() > 0
    assert res.error is None, res.error
    assert res.consumer_received == 20_000
    assert res.producer_sent == 20_000
    assert res.msgs_per_sec > 0
