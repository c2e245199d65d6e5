"""Raw-socket MQTT load generator: one publisher -> one subscriber, end-to-end msgs/s.

Mirrors :mod:`conformance.bench.stomp_load` and is built so that it is not the
bottleneck:

* publisher and subscriber each run in their own OS process (``python -m
  conformance.bench.mqtt_load --worker ...``): no GIL shared with each other,
  with the caller or with a Python broker under test;
* packets are encoded by hand (a few helpers below; no dependency on the
  project's MQTT codec) and encoded once: QoS 0 PUBLISHes are written in
  batches of ~256 KiB (``packet * k``) with one ``sendall`` each, pipelined;
  QoS 1 PUBLISHes come from a pre-encoded ring with one packet identifier per
  slot, sent as contiguous ``memoryview`` slices while a window of in-flight
  (un-PUBACKed) messages is kept full (``inflight``, default 1,000, lowered to
  the broker's Receive Maximum on MQTT 5);
* the subscriber ``recv_into``\\s a 4 MiB buffer and parses fixed headers only.
  Every PUBLISH of a run has the same length, so once one has been parsed a
  whole buffer is checked with strided slices in C (first byte, remaining
  length and topic length at every packet boundary -- which *is* the
  sequential parse) and counted by division; anything else falls back to a
  packet-by-packet walk.  At QoS 1 it answers every PUBLISH with a PUBACK, all
  the acks for one read in one ``send`` (built with strided slice assignment).

Procedure (as stomp_load): the subscriber CONNECTs (clean session, keep-alive
0), SUBSCRIBEs with the run's QoS and waits for the SUBACK; then the publisher
sends ``warmup`` messages, and only after the subscriber has received all of
them does the publisher take its start time ``t0`` and send the ``messages``
timed ones.  ``seconds`` runs from ``t0`` to the moment the subscriber has
received every timed message (``time.perf_counter()``, CLOCK_MONOTONIC, is
comparable across processes).  If the subscriber receives nothing for
``timeout`` seconds the run ends with an error saying how many arrived.
``producer_cpu_seconds`` / ``consumer_cpu_seconds`` are the worker processes'
CPU time from the end of the warm-up to the end of the run (sampled by the
parent with psutil), and with ``broker_pid`` the broker's CPU time over the
same window is reported too, so it is visible whether the generator or the
broker is the limit.

Command line (one JSON result per run)::

    python -m conformance.bench.mqtt_load 127.0.0.1:1883 --qos 1 --messages 200000
    python -m conformance.bench.mqtt_load --mosquitto --qos 0 --runs 3
    python -m conformance.bench.mqtt_load --activemq --qos 1 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from machinery.tether import launch
from machinery.waiting import Deadline

__all__ = [
    "MqttBenchResult",
    "run_mqtt_load",
    "encode_connect",
    "encode_subscribe",
    "encode_publish",
    "encode_puback",
    "encode_remaining_length",
    "DISCONNECT",
]

_RECV_BUF = 4 << 20          # subscriber receive buffer
_BATCH_BYTES = 256 << 10     # publisher batch size per sendall
_RING_BYTES = 32 << 20       # QoS 1: size the pre-encoded ring aims for
_PROJECT_ROOT = Path(__file__).resolve().parents[2]

DISCONNECT = b"\xe0\x00"


@dataclass
class MqttBenchResult:
    """One measurement.  ``messages``/``consumer_received``/``producer_sent`` count timed
    messages only (warm-up excluded); ``producer_acked`` counts the PUBACKs the publisher
    got for them (QoS 1).  ``seconds`` runs from the publisher's first timed send to the
    subscriber's last timed receive; on error ``msgs_per_sec`` is 0.0 and ``error`` says
    what happened.  CPU seconds cover the timed phase."""

    target: str
    qos: int
    messages: int
    seconds: float
    msgs_per_sec: float
    consumer_received: int
    producer_sent: int
    error: str | None
    protocol: int = 4
    producer_acked: int = 0
    producer_cpu_seconds: float = 0.0
    consumer_cpu_seconds: float = 0.0
    broker_cpu_seconds: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------- packets


def encode_remaining_length(n: int) -> bytes:
    """MQTT variable byte integer."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"remaining length out of range: {n}")
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _utf8(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 65535:
        raise ValueError("MQTT string longer than 65535 bytes")
    return struct.pack(">H", len(b)) + b


def _packet(first_byte: int, body: bytes) -> bytes:
    return bytes([first_byte]) + encode_remaining_length(len(body)) + body


def encode_connect(client_id: str, *, protocol: int = 4, clean: bool = True, keepalive: int = 0,
                   username: str | None = None, password: str | None = None) -> bytes:
    """CONNECT for MQTT 3.1.1 (``protocol=4``) or 5.0 (``protocol=5``, no properties)."""
    if protocol not in (4, 5):
        raise ValueError("protocol must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0)")
    flags = 0x02 if clean else 0
    payload = _utf8(client_id)
    if username is not None:
        flags |= 0x80
        payload += _utf8(username)
    if password is not None:
        flags |= 0x40
        pw = password.encode()
        payload += struct.pack(">H", len(pw)) + pw
    var = _utf8("MQTT") + bytes([protocol, flags]) + struct.pack(">H", keepalive)
    if protocol == 5:
        var += b"\x00"  # no properties
    return _packet(0x10, var + payload)


def encode_subscribe(packet_id: int, topic: str, qos: int, *, protocol: int = 4) -> bytes:
    var = struct.pack(">H", packet_id) + (b"\x00" if protocol == 5 else b"")
    return _packet(0x82, var + _utf8(topic) + bytes([qos]))


def encode_publish(topic: str, payload: bytes, *, qos: int = 0, packet_id: int = 0, protocol: int = 4,
                   retain: bool = False) -> bytes:
    if qos not in (0, 1, 2):
        raise ValueError("qos must be 0, 1 or 2")
    var = _utf8(topic)
    if qos:
        if not 1 <= packet_id <= 65535:
            raise ValueError("QoS > 0 needs a packet identifier 1..65535")
        var += struct.pack(">H", packet_id)
    if protocol == 5:
        var += b"\x00"  # no properties
    return _packet(0x30 | (qos << 1) | (1 if retain else 0), var + payload)


def encode_puback(packet_id: int) -> bytes:
    """PUBACK with success (3.1.1 form; also valid MQTT 5: reason 0, no properties)."""
    return b"\x40\x02" + struct.pack(">H", packet_id)


def _decode_varint(buf, pos: int, end: int) -> tuple[int, int] | None:
    """(value, bytes used) of a variable byte integer at buf[pos:end], None if incomplete."""
    value = 0
    for i in range(4):
        if pos + i >= end:
            return None
        b = buf[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, i + 1
    raise _MqttError("malformed remaining length")


# MQTT 5 property identifiers -> value kind, just enough to walk CONNACK/SUBACK/DISCONNECT properties
_PROP_KIND = {
    0x01: 1, 0x17: 1, 0x19: 1, 0x24: 1, 0x25: 1, 0x28: 1, 0x29: 1, 0x2A: 1,
    0x13: 2, 0x21: 2, 0x22: 2, 0x23: 2,
    0x02: 4, 0x11: 4, 0x18: 4, 0x27: 4,
    0x0B: "v",
    0x03: "s", 0x08: "s", 0x12: "s", 0x15: "s", 0x1A: "s", 0x1C: "s", 0x1F: "s",
    0x09: "b", 0x16: "b",
    0x26: "p",
}


def _parse_properties(data: bytes) -> dict[int, object]:
    props: dict[int, object] = {}
    i = 0
    while i < len(data):
        pid = data[i]
        i += 1
        kind = _PROP_KIND.get(pid)
        if kind is None:
            raise _MqttError(f"unknown MQTT 5 property 0x{pid:02x}")
        if kind in (1, 2, 4):
            props[pid] = int.from_bytes(data[i:i + kind], "big")
            i += kind
        elif kind == "v":
            r = _decode_varint(data, i, len(data))
            if r is None:
                raise _MqttError("truncated property")
            props[pid], used = r
            i += used
        elif kind in ("s", "b"):
            n = int.from_bytes(data[i:i + 2], "big")
            props[pid] = data[i + 2:i + 2 + n].decode("utf-8", "replace") if kind == "s" else data[i + 2:i + 2 + n]
            i += 2 + n
        else:  # user property: string pair
            n = int.from_bytes(data[i:i + 2], "big")
            i += 2 + n
            n = int.from_bytes(data[i:i + 2], "big")
            i += 2 + n
    return props


_CONNACK_RC_311 = {1: "unacceptable protocol version", 2: "identifier rejected", 3: "server unavailable",
                   4: "bad user name or password", 5: "not authorized"}


class _MqttError(Exception):
    pass


def _read_packet(sock: socket.socket, buf: bytearray) -> tuple[int, bytes]:
    """One complete packet for the handshake phase: (first byte, body); leaves the rest in buf."""
    while True:
        if len(buf) >= 2:
            r = _decode_varint(buf, 1, len(buf))
            if r is not None:
                length, used = r
                total = 1 + used + length
                if len(buf) >= total:
                    first, body = buf[0], bytes(buf[1 + used:total])
                    del buf[:total]
                    return first, body
        chunk = sock.recv(65536)
        if not chunk:
            raise _MqttError("connection closed by the broker")
        buf += chunk


def _disconnect_reason(body: bytes) -> str:
    if not body:
        return "DISCONNECT"
    text = f"DISCONNECT reason 0x{body[0]:02x}"
    if len(body) > 1:
        r = _decode_varint(body, 1, len(body))
        if r:
            n, used = r
            try:
                reason = _parse_properties(body[1 + used:1 + used + n]).get(0x1F)
            except _MqttError:
                reason = None
            if reason:
                text += f" ({reason})"
    return text


def _mqtt_connect(host: str, port: int, client_id: str, protocol: int, timeout: float,
                  username: str | None, password: str | None) -> tuple[socket.socket, bytearray, dict]:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(encode_connect(client_id, protocol=protocol, username=username, password=password))
    buf = bytearray()
    first, body = _read_packet(sock, buf)
    if first >> 4 == 14:
        raise _MqttError("broker answered CONNECT with " + _disconnect_reason(body))
    if first >> 4 != 2 or len(body) < 2:
        raise _MqttError(f"expected CONNACK, got packet type {first >> 4}")
    rc = body[1]
    props: dict = {}
    if protocol == 5 and len(body) > 2:
        r = _decode_varint(body, 2, len(body))
        if r:
            n, used = r
            props = _parse_properties(body[2 + used:2 + used + n])
    if rc != 0:
        sock.close()
        why = _CONNACK_RC_311.get(rc, "") if protocol == 4 else str(props.get(0x1F, ""))
        raise _MqttError(f"CONNECT refused: return code 0x{rc:02x}" + (f" ({why})" if why else ""))
    return sock, buf, props


# ---------------------------------------------------------------------------- workers


def _emit(**msg) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


class _SubParser:
    """Incremental fixed-header parser for the subscriber's stream (see the module doc)."""

    def __init__(self, qos: int) -> None:
        self.qos = qos
        self.plen = 0                # length of the run's PUBLISH packets, once seen
        self.phdr = b""              # their fixed header + topic length bytes
        self.pid_off = 0             # offset of the packet identifier (QoS 1)

    def parse(self, buf: bytearray, start: int, end: int) -> tuple[int, int, bytearray | None]:
        """Consume complete packets in buf[start:end]: (new start, PUBLISHes seen, PUBACKs to send)."""
        count = 0
        acks = bytearray() if self.qos else None
        while start < end:
            L = self.plen
            if L:
                k = (end - start) // L
                if k:
                    stop = start + k * L
                    hdr = self.phdr
                    ok = True
                    for j in range(len(hdr)):
                        if buf[start + j:stop:L].count(hdr[j]) != k:
                            ok = False
                            break
                    if ok:
                        if acks is not None:
                            a = bytearray(4 * k)
                            a[0::4] = b"\x40" * k
                            a[1::4] = b"\x02" * k
                            off = start + self.pid_off
                            a[2::4] = buf[off:stop:L]
                            a[3::4] = buf[off + 1:stop:L]
                            acks += a
                        count += k
                        start = stop
                        continue
            # slow path: one packet
            if end - start < 2:
                break
            r = _decode_varint(buf, start + 1, end)
            if r is None:
                break
            length, used = r
            total = 1 + used + length
            if end - start < total:
                break
            first = buf[start]
            ptype = first >> 4
            if ptype == 3:
                h = 1 + used
                tlen = (buf[start + h] << 8) | buf[start + h + 1]
                qos = (first >> 1) & 3
                if qos and acks is not None:
                    acks += b"\x40\x02" + buf[start + h + 2 + tlen:start + h + 4 + tlen]
                if first & 0x08 == 0:  # not a DUP: becomes the template for the fast path
                    self.plen = total
                    self.phdr = bytes(buf[start:start + h + 2])
                    self.pid_off = h + 2 + tlen
                count += 1
            elif ptype == 14:
                raise _MqttError("broker sent " + _disconnect_reason(bytes(buf[start + 1 + used:start + total])))
            # anything else (PINGRESP, ...) is skipped
            start += total
        return start, count, acks


def _consumer(cfg: dict) -> None:
    timeout = float(cfg["timeout"])
    warmup = int(cfg["warmup"])
    target = warmup + int(cfg["messages"])
    qos = int(cfg["qos"])
    protocol = int(cfg["protocol"])
    sock, pending, _ = _mqtt_connect(cfg["host"], cfg["port"], f"bcbench-sub-{os.getpid()}-{os.urandom(3).hex()}",
                                     protocol, min(timeout, 30.0), cfg.get("username"), cfg.get("password"))
    sock.sendall(encode_subscribe(1, cfg["topic"], qos, protocol=protocol))
    parser = _SubParser(qos)
    while True:
        first, body = _read_packet(sock, pending)
        if first >> 4 == 9:
            rcs = body[2:]
            if protocol == 5:
                r = _decode_varint(body, 2, len(body))
                n, used = r if r else (0, 1)
                rcs = body[2 + used + n:]
            if not rcs or rcs[0] >= 0x80:
                raise _MqttError(f"SUBSCRIBE refused: SUBACK return code 0x{rcs[0] if rcs else 0:02x}")
            if rcs[0] < qos:
                raise _MqttError(f"SUBACK granted QoS {rcs[0]}, asked for {qos}")
            break
        if first >> 4 == 14:
            raise _MqttError("broker sent " + _disconnect_reason(body))
        if first >> 4 == 3:
            raise _MqttError("a PUBLISH arrived before the SUBACK (is another publisher using the topic?)")

    sock.settimeout(timeout)
    rbuf = bytearray(_RECV_BUF)
    mv = memoryview(rbuf)
    rbuf[:len(pending)] = pending
    start, end = 0, len(pending)
    start, count, acks = parser.parse(rbuf, start, end)
    if acks:
        sock.sendall(acks)
    _emit(ev="ready")

    recv_into = sock.recv_into
    sendall = sock.sendall
    parse = parser.parse
    cap = len(rbuf)
    warm_reported = False
    if warmup == 0 or count >= warmup:
        _emit(ev="warm", count=count)
        warm_reported = True
    clock = time.monotonic
    next_progress = clock() + 2.0
    while count < target:
        if end == cap:  # move the partial packet to the front
            rest = end - start
            rbuf[:rest] = rbuf[start:end]
            start, end = 0, rest
        try:
            n = recv_into(mv[end:])
        except socket.timeout:
            _emit(ev="stall", count=count)
            return
        if n == 0:
            _emit(ev="error", count=count, msg="broker closed the subscriber connection")
            return
        end += n
        try:
            start, got, acks = parse(rbuf, start, end)
        except _MqttError as e:
            _emit(ev="error", count=count, msg=str(e))
            return
        if start == end:
            start = end = 0
        count += got
        if acks:
            sendall(acks)
        if clock() >= next_progress:
            _emit(ev="progress", count=count)
            next_progress += 2.0
        if not warm_reported and count >= warmup:
            _emit(ev="warm", count=count)
            warm_reported = True
    t_end = time.perf_counter()
    _emit(ev="done", count=count, t_end=t_end)
    try:
        sock.sendall(DISCONNECT)
        sock.close()
    except OSError:
        pass


class _Publisher:
    def __init__(self, cfg: dict) -> None:
        self.qos = int(cfg["qos"])
        self.protocol = int(cfg["protocol"])
        self.timeout = float(cfg["timeout"])
        payload = b"x" * int(cfg["payload_size"])
        self.sock, pending, props = _mqtt_connect(
            cfg["host"], cfg["port"], f"bcbench-pub-{os.getpid()}-{os.urandom(3).hex()}", self.protocol,
            min(self.timeout, 30.0), cfg.get("username"), cfg.get("password"))
        self.window = max(1, int(cfg["inflight"]))
        if 0x21 in props:  # MQTT 5 Receive Maximum of the server
            self.window = max(1, min(self.window, int(props[0x21])))
        self.sent = 0
        self.acked = 0
        if self.qos == 0:
            self.packet = encode_publish(cfg["topic"], payload, qos=0, protocol=self.protocol)
            self.per_batch = max(1, _BATCH_BYTES // len(self.packet))
            self.batch = self.packet * self.per_batch
        else:
            one = encode_publish(cfg["topic"], payload, qos=self.qos, packet_id=1, protocol=self.protocol)
            self.plen = L = len(one)
            self.ring_n = R = min(65535, max(2 * self.window, min(65535, _RING_BYTES // L)))
            # fixed header, topic (length-prefixed), then the packet identifier
            pid_off = 1 + _decode_varint(one, 1, L)[1] + 2 + len(cfg["topic"].encode())
            assert one[pid_off:pid_off + 2] == b"\x00\x01", "packet identifier offset"
            ring = bytearray(one * R)
            ring[pid_off::L] = bytes(((i + 1) >> 8) for i in range(R))
            ring[pid_off + 1::L] = bytes(((i + 1) & 0xFF) for i in range(R))
            self.ring = memoryview(bytes(ring))
            self.pos = 0
            self.per_batch = max(1, _BATCH_BYTES // L)
            self.abuf = bytearray(1 << 16)
            self.astart = self.aend = 0
        self._pending = pending

    def _check_socket(self) -> None:
        r, _, _ = select.select([self.sock], [], [], 0)
        if r:
            data = self.sock.recv(65536)
            if not data:
                raise _MqttError("broker closed the publisher connection")
            if data[0] >> 4 == 14:
                raise _MqttError("broker sent " + _disconnect_reason(data[2:]))

    def send(self, n: int) -> None:
        (self._send_qos0 if self.qos == 0 else self._send_qos1)(n)

    def _send_qos0(self, n: int) -> None:
        sendall = self.sock.sendall
        full, rem = divmod(n, self.per_batch)
        for _ in range(full):
            sendall(self.batch)
            self.sent += self.per_batch
            self._check_socket()
        if rem:
            sendall(self.packet * rem)
            self.sent += rem
            self._check_socket()

    def _read_acks(self, block: bool) -> None:
        buf, mv = self.abuf, memoryview(self.abuf)
        if self.aend > len(buf) - 64:
            rest = self.aend - self.astart
            buf[:rest] = buf[self.astart:self.aend]
            self.astart, self.aend = 0, rest
        try:
            if block:
                n = self.sock.recv_into(mv[self.aend:])
            else:
                n = self.sock.recv_into(mv[self.aend:], 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except socket.timeout:
            raise _MqttError(f"no PUBACK for {self.timeout:g}s ({self.acked} of {self.sent} sent acknowledged)")
        if n == 0:
            raise _MqttError("broker closed the publisher connection")
        self.aend += n
        start, end = self.astart, self.aend
        k = (end - start) // 4
        if k and buf[start:start + 4 * k:4].count(0x40) == k and buf[start + 1:start + 4 * k:4].count(2) == k:
            self.acked += k
            start += 4 * k
        while end - start >= 2:
            r = _decode_varint(buf, start + 1, end)
            if r is None:
                break
            length, used = r
            total = 1 + used + length
            if end - start < total:
                break
            ptype = buf[start] >> 4
            if ptype == 4:
                if length >= 3 and buf[start + 1 + used + 2] >= 0x80:
                    raise _MqttError(f"PUBACK with failure reason 0x{buf[start + 1 + used + 2]:02x}")
                self.acked += 1
            elif ptype == 14:
                raise _MqttError("broker sent " + _disconnect_reason(bytes(buf[start + 1 + used:start + total])))
            start += total
        self.astart, self.aend = (0, 0) if start == end else (start, end)

    def _send_qos1(self, n: int) -> None:
        goal_sent = self.sent + n
        goal_acked = goal_sent  # everything sent so far must be acknowledged before returning
        sendall = self.sock.sendall
        L, R = self.plen, self.ring_n
        while self.acked < goal_acked:
            room = self.window - (self.sent - self.acked)
            if room > 0 and self.sent < goal_sent:
                k = min(room, goal_sent - self.sent, self.per_batch, R - self.pos)
                sendall(self.ring[self.pos * L:(self.pos + k) * L])
                self.pos = (self.pos + k) % R
                self.sent += k
                room -= k
            self._read_acks(block=room <= 0 or self.sent >= goal_sent)

    def close(self, graceful: bool) -> None:
        try:
            if graceful:
                self.sock.sendall(DISCONNECT)
            self.sock.close()
        except OSError:
            pass


def _producer(cfg: dict) -> None:
    pub = _Publisher(cfg)
    pub.sock.settimeout(pub.timeout if pub.qos else None)  # QoS 0: flow control may block sendall for long
    _emit(ev="ready", window=pub.window)
    graceful = False
    try:
        for line in sys.stdin:
            cmd = line.split()
            if not cmd:
                continue
            if cmd[0] == "warmup":
                pub.send(int(cmd[1]))
                _emit(ev="warm_sent", sent=pub.sent)
            elif cmd[0] == "go":
                n = int(cmd[1])
                before_sent, before_acked = pub.sent, pub.acked
                t0 = time.perf_counter()
                pub.send(n)
                _emit(ev="sent", t0=t0, t_sent=time.perf_counter(), sent=pub.sent - before_sent,
                      acked=pub.acked - before_acked)
                graceful = True
                # stay connected until told (or stdin closes): closing now could reset the
                # connection before the broker has read the tail
            elif cmd[0] == "quit":
                break
    finally:
        pub.close(graceful)


def _worker_main(role: str, cfg_json: str) -> int:
    cfg = json.loads(cfg_json)
    try:
        (_consumer if role == "consumer" else _producer)(cfg)
    except (_MqttError, OSError) as e:
        detail = str(e) if isinstance(e, _MqttError) else f"{type(e).__name__}: {e}"
        _emit(ev="error", msg=f"{'subscriber' if role == 'consumer' else 'publisher'}: {detail}")
        return 1
    return 0


# ---------------------------------------------------------------------------- parent (shared with amqp_load)


class _Worker:
    def __init__(self, module: str, role: str, cfg: dict) -> None:
        self.role = role
        self.errfile = tempfile.TemporaryFile()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(_PROJECT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = launch(
            [sys.executable, "-m", module, "--worker", role, json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile, env=env,
            cwd=str(_PROJECT_ROOT),
        )
        self.fd = self.proc.stdout.fileno()
        self._pending = b""
        self.eof = False

    def read_events(self) -> list[dict]:
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
            return []
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def command(self, text: str) -> None:
        try:
            self.proc.stdin.write((text + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def stderr_tail(self, n: int = 1500) -> str:
        try:
            self.errfile.seek(0)
            return self.errfile.read().decode("utf-8", "replace")[-n:].strip()
        except (OSError, ValueError):
            return ""

    def close(self, wait: float = 5.0) -> None:
        p = self.proc
        try:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in (p.stdout, self.errfile):
            try:
                f.close()
            except OSError:
                pass


def _cpu_seconds(pid: int | None) -> float | None:
    """user + system CPU seconds of a process so far (None if unknown)."""
    if not pid:
        return None
    try:
        import psutil

        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except Exception:
        return None


def _orchestrate(module: str, cfg: dict, *, messages: int, warmup: int, timeout: float,
                 broker_pid: int | None = None, unit: str = "messages") -> dict:
    """Run a consumer and a producer worker of ``module`` through connect -> warm-up -> timed.

    Returns a dict with t0, t_end, sent, acked, received (raw, warm-up included),
    producer_cpu, consumer_cpu, broker_cpu (CPU seconds each process used between the
    end of the warm-up and the end of the run, sampled here with psutil) and error."""
    consumer = _Worker(module, "consumer", cfg)
    producer = _Worker(module, "producer", cfg)
    workers = {consumer.fd: consumer, producer.fd: producer}
    state: dict = {"sent": 0, "acked": 0, "received": 0, "t0": None, "t_end": None,
                   "producer_cpu": 0.0, "consumer_cpu": 0.0, "broker_cpu": None, "error": None}
    phase = "connect"
    ready = set()
    guard = timeout + 30.0
    last_event = time.monotonic()
    cpu_go: dict[str, float | None] = {}

    def cpu_sample() -> dict[str, float | None]:
        return {"producer": _cpu_seconds(producer.proc.pid), "consumer": _cpu_seconds(consumer.proc.pid),
                "broker": _cpu_seconds(broker_pid)}

    def fail(msg: str) -> None:
        nonlocal phase
        if state["error"] is None:
            state["error"] = msg
        phase = "done"

    def timed_received() -> int:
        return max(0, state["received"] - warmup)

    try:
        while phase != "done":
            fds = [fd for fd, w in workers.items() if not w.eof]
            if not fds:
                fail("both workers exited unexpectedly")
                break
            r, _, _ = select.select(fds, [], [], 1.0)
            now = time.monotonic()
            if not r:
                if now - last_event > guard:
                    fail(f"no progress report for {guard:.0f}s (received {timed_received()} of {messages} "
                         f"timed {unit})")
                continue
            for fd in r:
                w = workers[fd]
                events = w.read_events()
                if w.eof and not events and phase != "done":
                    if not (w is producer and state["t0"] is not None):
                        w.proc.wait()
                        fail(f"{w.role} worker exited (code {w.proc.returncode}) during {phase}: {w.stderr_tail()}")
                for ev in events:
                    last_event = now
                    kind = ev["ev"]
                    if kind == "error":
                        if "count" in ev:
                            state["received"] = ev["count"]
                        fail(ev["msg"] + (f" (consumer had received {timed_received()} of {messages} timed "
                                          f"{unit})" if w is consumer else ""))
                    elif kind == "ready":
                        ready.add(w.role)
                        if ready == {"consumer", "producer"} and phase == "connect":
                            phase = "warmup"
                            producer.command(f"warmup {warmup}")
                    elif kind == "warm" and phase in ("connect", "warmup"):
                        state["received"] = ev["count"]
                        phase = "timed"
                        cpu_go = cpu_sample()
                        producer.command(f"go {messages}")
                    elif kind == "progress":
                        state["received"] = ev["count"]
                    elif kind == "sent":
                        state.update(t0=ev["t0"], sent=ev["sent"], acked=ev.get("acked", 0))
                    elif kind == "stall":
                        state["received"] = ev["count"]
                        fail(f"consumer stalled: nothing received for {timeout:g}s; {timed_received()} of "
                             f"{messages} timed {unit} arrived ({min(ev['count'], warmup)} of {warmup} warm-up)")
                    elif kind == "done":
                        state["received"] = ev["count"]
                        state["t_end"] = ev["t_end"]
                        cpu_done = cpu_sample()
                        for k, before in cpu_go.items():
                            if before is not None and cpu_done[k] is not None:
                                state[f"{k}_cpu"] = round(cpu_done[k] - before, 3)
                        phase = "done"
        if state["error"] is None and state["t0"] is None:
            deadline = Deadline(min(30.0, timeout))
            # a reader, not a `wait_until`: each round handles the producer's events as they come
            while state["t0"] is None and not producer.eof and not deadline.expired():
                r, _, _ = select.select([producer.fd], [], [], 1.0)
                if r:
                    for ev in producer.read_events():
                        if ev["ev"] == "sent":
                            state.update(t0=ev["t0"], sent=ev["sent"], acked=ev.get("acked", 0))
                        elif ev["ev"] == "error":
                            fail(ev["msg"])
            if state["t0"] is None and state["error"] is None:
                fail("producer never reported its start time (still waiting for acknowledgements?) "
                     + producer.stderr_tail())
    finally:
        if state["error"] is not None:
            producer.command("quit")
        producer.close(wait=15 if state["error"] is None else 2)
        consumer.close(wait=5 if state["error"] is None else 2)
    return state


def run_mqtt_load(
    host: str,
    port: int,
    *,
    target: str,
    messages: int = 200_000,
    qos: int = 0,
    payload_size: int = 256,
    topic: str = "bench/t",
    warmup: int = 10_000,
    protocol: int = 4,
    timeout: float = 120,
    inflight: int = 1000,
    username: str | None = None,
    password: str | None = None,
    broker_pid: int | None = None,
) -> MqttBenchResult:
    """Measure end-to-end msgs/s from one publisher to one subscriber through an MQTT broker.

    ``protocol`` is 4 (MQTT 3.1.1) or 5 (MQTT 5.0); ``qos`` 0 or 1; ``inflight`` the
    publisher's QoS 1 window.  ``broker_pid``: also report that process's CPU seconds over
    the timed phase.  Never raises for broker-side problems: they come back in ``error``.
    """
    if messages <= 0 or warmup < 0 or payload_size < 0:
        raise ValueError("messages must be > 0, warmup and payload_size >= 0")
    if qos not in (0, 1):
        raise ValueError("qos must be 0 or 1")
    if protocol not in (4, 5):
        raise ValueError("protocol must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0)")
    if any(c in topic for c in "+#") or not topic:
        raise ValueError("topic must be a non-empty topic name without wildcards")
    cfg = dict(host=host, port=int(port), qos=qos, protocol=protocol, topic=topic, payload_size=int(payload_size),
               warmup=int(warmup), messages=int(messages), timeout=float(timeout), inflight=int(inflight),
               username=username, password=password)
    st = _orchestrate("conformance.bench.mqtt_load", cfg, messages=messages, warmup=warmup, timeout=timeout,
                      broker_pid=broker_pid)
    received = max(0, min(st["received"] - warmup, messages))
    common = dict(target=target, qos=qos, messages=messages, consumer_received=received, producer_sent=st["sent"],
                  protocol=protocol, producer_acked=st["acked"], producer_cpu_seconds=st["producer_cpu"],
                  consumer_cpu_seconds=st["consumer_cpu"], broker_cpu_seconds=st["broker_cpu"])
    if st["error"] is None:
        seconds = max(st["t_end"] - st["t0"], 1e-9)
        return MqttBenchResult(seconds=seconds, msgs_per_sec=messages / seconds, error=None, **common)
    return MqttBenchResult(seconds=0.0, msgs_per_sec=0.0, error=st["error"], **common)


# ---------------------------------------------------------------------------- CLI


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1], argv[2])
    ap = argparse.ArgumentParser(prog="python -m conformance.bench.mqtt_load",
                                 description="MQTT 1->1 throughput (raw sockets, pipelined / windowed)")
    ap.add_argument("endpoint", nargs="?", help="host:port of the MQTT listener (omit with --mosquitto/--activemq)")
    ap.add_argument("--mosquitto", action="store_true", help="start a temporary mosquitto and measure it")
    ap.add_argument("--mosquitto-inflight", type=int, default=None,
                    help="with --mosquitto: max_inflight_messages (mosquitto's default 20 applies to "
                         "MQTT 3.1.1 subscribers; MQTT 5 ones get their receive maximum)")
    ap.add_argument("--activemq", action="store_true", help="start a temporary ActiveMQ Classic (MQTT transport)")
    ap.add_argument("--runs", type=int, default=1, help="repeat the measurement (same broker)")
    ap.add_argument("--target", default=None, help="label for the result")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--qos", type=int, default=0, choices=(0, 1))
    ap.add_argument("--protocol", type=int, default=4, choices=(4, 5))
    ap.add_argument("--payload-size", type=int, default=256)
    ap.add_argument("--topic", default="bench/t")
    ap.add_argument("--warmup", type=int, default=10_000)
    ap.add_argument("--inflight", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--username")
    ap.add_argument("--password")
    ap.add_argument("--broker-pid", type=int, help="report this process's CPU seconds over the timed phase")
    a = ap.parse_args(argv)
    if sum(map(bool, (a.endpoint, a.mosquitto, a.activemq))) != 1:
        ap.error("give exactly one of host:port, --mosquitto, --activemq")

    def measure(host: str, port: int, target: str, broker=None, broker_pid=None) -> int:
        rc = 0
        for i in range(a.runs):
            res = run_mqtt_load(host, port, target=target, messages=a.messages, qos=a.qos,
                                payload_size=a.payload_size, topic=a.topic, warmup=a.warmup,
                                protocol=a.protocol, timeout=a.timeout, inflight=a.inflight,
                                username=a.username, password=a.password, broker_pid=broker_pid)
            out = res.to_dict()
            out["run"] = i + 1
            if broker is not None:
                out["broker_rss_peak_bytes"] = broker.rss_peak_bytes()
            print(json.dumps(out), flush=True)
            rc |= res.error is not None
        return rc

    if a.mosquitto:
        from conformance.targets.mosquitto.process import MosquittoProcess

        with tempfile.TemporaryDirectory(prefix="brokerconf-mosq-") as d:
            # no queue limit: with mosquitto's default (1000 queued per client) a QoS 1 publisher
            # that runs ahead of the subscriber makes mosquitto drop messages
            with MosquittoProcess(Path(d), max_queued_messages=0,
                                  max_inflight_messages=a.mosquitto_inflight) as m:
                return measure("127.0.0.1", m.mqtt_port, a.target or "mosquitto", m, m.pid)
    if a.activemq:
        from conformance.targets.activemq.process import ActiveMQProcess

        with tempfile.TemporaryDirectory(prefix="brokerconf-amq-") as d:
            with ActiveMQProcess(Path(d), mqtt=True, openwire=False) as amq:
                return measure("127.0.0.1", amq.mqtt_port, a.target or "activemq-mqtt", amq, amq.pid)
    host, _, port = a.endpoint.rpartition(":")
    return measure(host or "127.0.0.1", int(port), a.target or a.endpoint, None, a.broker_pid)


if __name__ == "__main__":
    sys.exit(_main())
