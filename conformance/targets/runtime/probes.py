"""Readiness probes the launchers poll: a STOMP CONNECT answered with CONNECTED (every broker with
a STOMP listener), and a TCP port that accepts."""

from __future__ import annotations

import socket


def stomp_handshake(port: int, timeout: float, login: tuple[str, str] | None = None) -> tuple[bool, str]:
    """Connect to STOMP on 127.0.0.1:port; True when CONNECT is answered with CONNECTED."""
    credentials = b""
    if login is not None:
        credentials = f"login:{login[0]}\npasscode:{login[1]}\n".encode("utf-8")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"CONNECT\naccept-version:1.0,1.1,1.2\nhost:localhost\nheart-beat:0,0\n" + credentials
                      + b"\n\x00")
            buf = b""
            while b"\x00" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    return False, "connection closed before CONNECTED"
                buf += chunk
            frame = buf.lstrip(b"\r\n")
            if frame.startswith(b"CONNECTED"):
                try:
                    s.sendall(b"DISCONNECT\n\n\x00")
                except OSError:
                    pass
                return True, ""
            return False, frame.split(b"\x00", 1)[0].decode("utf-8", "replace")
    except OSError as e:
        return False, str(e)


def tcp_accepts(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False
