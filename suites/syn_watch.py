"""Connection attempts to one loopback port, seen on the wire: every TCP SYN sent to it, with the
time the kernel delivered it (`SynWatch`). Used to measure a client's reconnect waits from outside
the client, so a real Java client and ours are measured the same way (issue 28).

Not a suite (no ``test_`` prefix). The port is a gate of the fault proxy that is closed: a
closed loopback port answers a SYN with a reset at once, so the attempt leaves no trace at any
listener, but its SYN still crosses ``lo``. A packet socket (``AF_PACKET``, needs root or
CAP_NET_RAW) on ``lo`` with a classic BPF filter that keeps only IPv4 TCP segments to that port
with SYN set and ACK clear sees each attempt once (the copy ``lo`` hands back as outgoing is
dropped: `PACKET_OUTGOING`).

Why a receive ring (``PACKET_RX_RING``, ``TPACKET_V2``) and not ``recvmsg`` with
``SO_TIMESTAMPNS``: the kernel stamps a packet on delivery only while its system-wide timestamp
switch is on, and turning that switch on is deferred to a kernel worker; a packet that arrives
before it unstamped is stamped when it is *read*. On a loaded machine (CI on six workers) the
watch thread read four SYNs 150 ms apart in one go and measured them 0.0 ms apart. A ring frame
gets its time when the kernel copies the packet into it, in the delivery path, however late this
process reads it. Times are the kernel's wall clock turned into the ``time.monotonic`` scale,
which the Java driver's event times use too.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import select
import socket
import struct
import threading
import time

__all__ = ["SynWatch", "SynWatchUnavailable", "available"]

ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 1
PACKET_OUTGOING = 4

#: struct tpacket2_hdr: tp_status, tp_len, tp_snaplen (u32), tp_mac, tp_net (u16), tp_sec,
#: tp_nsec (u32), then VLAN fields and padding to 32 bytes; the frame's struct sockaddr_ll
#: follows at 32, its sll_pkttype at byte 10 of it
_FRAME_HEADER = struct.Struct("=IIIHHII")
_PKTTYPE_AT = 32 + 10
#: 64 frames of 256 bytes in 4 blocks of one page: SYNs to one port come a few per second
_FRAME_SIZE, _BLOCK_SIZE, _BLOCKS = 256, 4096, 4
_FRAMES = _BLOCK_SIZE // _FRAME_SIZE * _BLOCKS


class SynWatchUnavailable(RuntimeError):
    """No packet socket here (not root, or no AF_PACKET)."""


def available() -> tuple[bool, str]:
    if not hasattr(socket, "AF_PACKET"):
        return False, "no AF_PACKET sockets on this system (Linux only)"
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except OSError as exc:
        return False, f"cannot open a packet socket to watch connection attempts ({exc}; needs root or CAP_NET_RAW)"
    sock.close()
    return True, ""


def _bpf(port: int) -> list[tuple[int, int, int, int]]:
    """Classic BPF (code, jt, jf, k; jumps count from the next instruction): ethernet + IPv4, TCP,
    not a fragment, destination ``port``, flags & (SYN|ACK) == SYN; keep 128 bytes (12: drop,
    13: accept). ``lo`` frames carry a zeroed ethernet header, so the offsets are the usual ones."""
    return [
        (0x28, 0, 0, 12),          # 0  ldh [12]            ethertype
        (0x15, 0, 10, 0x0800),     # 1  jeq IPv4 else drop
        (0x30, 0, 0, 23),          # 2  ldb [23]            IP protocol
        (0x15, 0, 8, 6),           # 3  jeq TCP else drop
        (0x28, 0, 0, 20),          # 4  ldh [20]            flags + fragment offset
        (0x45, 6, 0, 0x1FFF),      # 5  jset fragment -> drop
        (0xB1, 0, 0, 14),          # 6  ldxb 4*([14]&0xf)   IP header length
        (0x48, 0, 0, 16),          # 7  ldh [x+16]          TCP destination port
        (0x15, 0, 3, port),        # 8  jeq port else drop
        (0x50, 0, 0, 27),          # 9  ldb [x+27]          TCP flags
        (0x54, 0, 0, 0x12),        # 10 and SYN|ACK
        (0x15, 1, 0, 0x02),        # 11 jeq SYN -> accept, else drop
        (0x06, 0, 0, 0),           # 12 drop
        (0x06, 0, 0, 128),         # 13 accept
    ]


def _attach(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    raw = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buffer = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(program), ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    return buffer  # the caller keeps it alive as long as the socket


def _rx_ring(sock: socket.socket) -> mmap.mmap:
    """A TPACKET_V2 receive ring on ``sock``, mapped into this process."""
    sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
    sock.setsockopt(SOL_PACKET, PACKET_RX_RING, struct.pack("IIII", _BLOCK_SIZE, _BLOCKS, _FRAME_SIZE, _FRAMES))
    return mmap.mmap(sock.fileno(), _BLOCK_SIZE * _BLOCKS, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


class SynWatch:
    """Records the SYNs sent to ``port`` on ``lo`` from its creation to `stop` (``times``: monotonic,
    when the kernel delivered each one). The kernel fills the ring from the start; `start` begins
    reading it, so SYNs sent in between are kept with their own times."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.times: list[float] = []
        self._stop = threading.Event()
        try:
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except OSError as exc:
            raise SynWatchUnavailable(f"cannot open a packet socket ({exc}; needs root or CAP_NET_RAW)") from None
        try:
            self._program = _attach(self._sock, _bpf(port))
            self._ring = _rx_ring(self._sock)
            self._sock.bind(("lo", 0))
        except OSError:
            self._sock.close()
            raise
        self._next = 0
        self._thread = threading.Thread(target=self._run, name=f"syn-watch-{port}", daemon=True)

    def start(self) -> "SynWatch":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._take_ready_frames():
                try:
                    select.select([self._sock], [], [], 0.1)
                except (OSError, ValueError):
                    return

    def _take_ready_frames(self) -> int:
        """Reads every frame the kernel has handed over, in ring order; returns how many."""
        taken = 0
        while True:
            at = self._next * _FRAME_SIZE
            status, _len, _snap, _mac, _net, sec, nsec = _FRAME_HEADER.unpack_from(self._ring, at)
            if not status & TP_STATUS_USER:
                return taken
            if self._ring[at + _PKTTYPE_AT] != PACKET_OUTGOING:
                # wall clock at delivery -> the monotonic scale (the offset read now: they run in step)
                now_wall, now_mono = time.time(), time.monotonic()
                self.times.append(now_mono - (now_wall - (sec + nsec / 1e9)))
            struct.pack_into("=I", self._ring, at, 0)  # the frame goes back to the kernel
            self._next = (self._next + 1) % _FRAMES
            taken += 1

    def after(self, moment: float) -> list[float]:
        return [t for t in list(self.times) if t > moment]

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        else:
            self._take_ready_frames()  # never started: what the ring holds still counts
        self._ring.close()
        self._sock.close()

    def __enter__(self) -> "SynWatch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - a manual check: python -m suites.syn_watch PORT
    import sys

    with SynWatch(int(sys.argv[1])) as watch:
        time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 3)
    print(os.linesep.join(f"{t:.6f}" for t in watch.times))
