"""Which connections the broker trusts as network bridges of peer brokers (issue 20, item 3).

A bridge's subscriptions on its peer carry ``NC|path|priority|n`` ids (cluster/paths.py): they may
consume the peer's temporary destinations (ActiveMQ's TempQueue lets network consumers in) and
announce broker paths and priorities that steer the network. Such privileges come from how the
connection authenticated, never from the id a client picks: `Connection.network` is true for the
broker's own internal connections, for a login whose user is in ``security.network_group``, and
for a bridge of another broker of this same process (below). Everyone else using an ``NC|`` id is
refused (protocols/stomp/session.py).

Brokers of one process (the test suites' and the harness's reference networks, which usually
have no users) need no configuration: each STOMP listener registers its port here, and a bridge
whose connector has no credentials and whose peer is a loopback address with a registered port
logs in as `IN_PROCESS_LOGIN` with this process's random secret. Nothing outside the process
knows the secret; it never leaves for another process (only registered ports get it). A peer in
another process needs a user of the network group and the connector's ``user_name`` /
``password``.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets

IN_PROCESS_LOGIN = "brokerconf-in-process-bridge"
_SECRET = secrets.token_urlsafe(32)
_ports: dict[int, int] = {}  # STOMP port of a broker of this process -> listeners on it


def register_stomp_port(port: int) -> None:
    _ports[port] = _ports.get(port, 0) + 1


def unregister_stomp_port(port: int) -> None:
    left = _ports.get(port, 0) - 1
    if left > 0:
        _ports[port] = left
    else:
        _ports.pop(port, None)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bridge_login(host: str, port: int, user_name: str | None, password: str | None) -> tuple[str | None, str | None]:
    """What a bridge to ``host:port`` logs in with: the connector's credentials when it has them,
    else the in-process secret for a broker of this process, else nothing (anonymous)."""
    if user_name is not None:
        return user_name, password
    if _loopback(host) and port in _ports:
        return IN_PROCESS_LOGIN, _SECRET
    return None, None


def is_in_process_bridge(login: str | None, passcode: str | None) -> bool:
    return login == IN_PROCESS_LOGIN and hmac.compare_digest((passcode or "").encode(), _SECRET.encode())
