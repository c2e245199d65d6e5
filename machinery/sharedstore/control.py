"""Control requests to the store server itself (not through a host's proxy): ``expire`` a host's
lease, read the ``state`` (sessions, locks, expiries). Used by the harness and the lock-loss nemesis."""

from __future__ import annotations

import socket

from . import wire


def control(address: str, request: dict, timeout: float = 5.0) -> dict:
    """One control request (``expire``, ``state``) straight to the server, not through a proxy."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(wire.encode({"xid": 0, **request}))
        reply, _ = wire.recv_frame(sock)
    if reply.get("errno"):
        raise RuntimeError(f"store {request.get('op')}: {reply.get('error')}")
    return reply
