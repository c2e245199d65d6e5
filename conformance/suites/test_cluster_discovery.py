"""Broadcast groups' period (artemis-clusters.md, "Broadcast Groups": broadcast-period), on every
target with ``topology.cluster``.

Two two-node clusters with discovery by UDP: one with `PERIOD_MS` (not the 2000 ms default, so a
node that ignored the setting would show), one with no broadcast-period (the default must show).
The test joins the cluster's multicast group itself (found in the launched cluster's configuration
text: ``group-address`` / ``group_address`` and the port likewise), records the announcements for
`WINDOW` seconds by sender (address and content: each node repeats its own announcement) and
asserts that every node announces and that each node's mean gap is the broadcast-period
(`PERIOD_TOLERANCE`: a loaded machine only makes a timer late).
"""

from __future__ import annotations

import hashlib
import re
import select
import socket
import struct
import time

import pytest

from conformance.suites.cluster_support import (  # noqa: F401 - cluster_pool, clusters: the fixtures
    cluster_suite_marks, cluster_pool, clusters, parametrize_by_target)
from conformance.topology import ClusterConnection, Topology

pytestmark = cluster_suite_marks()

PERIOD_MS = 1000
UDP = Topology(("A", "B"), cluster=ClusterConnection(discovery="udp", broadcast_period_ms=PERIOD_MS,
                                                     refresh_timeout_ms=10000), prefix="udpperiod")
#: the same cluster with broadcast-period left unset: the chapter's default, 2000 ms, applies
UDP_DEFAULT = Topology(("A", "B"), cluster=ClusterConnection(discovery="udp", refresh_timeout_ms=10000),
                       prefix="udpdefault")
DOCUMENTED_DEFAULT_PERIOD_MS = 2000
WINDOW = 12.0  # seconds of listening: 12 gaps per node at PERIOD_MS, 6 at the default
#: how far a node's mean gap may be from the broadcast-period. A periodic timer on a loaded machine
#: fires late, never early: a late datagram lengthens one gap and shortens the next (fixed-rate
#: timers) or shifts the rest (fixed-delay timers, each gap then the period plus the delay, tens of
#: ms here); over the window's eleven or so gaps that stays well inside 15 %. A node ignoring the
#: setting (the 2000 ms default) or announcing twice a period is far outside.
PERIOD_TOLERANCE = 0.15


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def multicast_endpoint(config_text: str) -> tuple[str, int]:
    """The group address and port the launcher configured (XML elements or snake_case keys)."""
    address = set(re.findall(r"group[-_]address\W+?(2\d\d\.\d+\.\d+\.\d+)", config_text))
    port = set(re.findall(r"group[-_]port\W+?(\d+)", config_text))
    assert len(address) == 1 and len(port) == 1, \
        f"setup: one multicast group expected in the cluster's configuration, found {address} port {port}"
    return address.pop(), int(port.pop())


def record_datagrams(group: str, port: int, seconds: float) -> dict[tuple[str, int, str], list[float]]:
    """Arrival times (time.monotonic) of the datagrams on ``group:port`` for ``seconds``, by sender:
    its address and the datagram's content. The address alone does not tell nodes apart (the
    reference nodes send from the group port itself); the content does, as each node repeats the
    same announcement of itself (its node ID and connector: Artemis's broadcast group encodes its
    node ID, a unique ID made once when the group starts, and its connectors; the reference node
    its name and acceptor)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        # the nodes share the port (SO_REUSEADDR, as their own sockets do); loopback membership, as
        # the launchers bind the groups to 127.0.0.1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton("127.0.0.1")))
        arrivals: dict[tuple[str, int], list[float]] = {}
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([sock], [], [], left)[0]:
                data, (host, sport) = sock.recvfrom(65536)
                sender = (host, sport, hashlib.sha1(data).hexdigest()[:8])
                arrivals.setdefault(sender, []).append(time.monotonic())
        return arrivals
    finally:
        sock.close()


def mean_gap_ms(times: list[float]) -> float:
    """A sender's period as its datagrams show it: first to last over the gaps between (one late
    datagram moves only its own two gaps, not the mean)."""
    return (times[-1] - times[0]) * 1000 / (len(times) - 1)


def assert_each_node_announces_every(cluster, topology: Topology, period_ms: int) -> None:
    group, port = multicast_endpoint(cluster.config_text())
    arrivals = record_datagrams(group, port, WINDOW)
    nodes = len(topology.nodes)
    assert arrivals, (f"CLU-DISC-2: no announcement on {group}:{port} in {WINDOW:.0f} s (broadcast-period {period_ms} "
                      f"ms, {nodes} nodes)")
    shown = {f"{host}:{sport}/{digest}": len(times) for (host, sport, digest), times in arrivals.items()}
    # every node announces (a silent node beside a fast one must not pass as "one every period")
    assert len(arrivals) == nodes, (
        f"CLU-DISC-2: {nodes} nodes should each announce on {group}:{port}; datagrams came from {len(arrivals)} "
        f"sender(s) in {WINDOW:.0f} s: {shown}")
    periods = {f"{host}:{sport}/{digest}": mean_gap_ms(times) if len(times) > 1 else float("inf")
               for (host, sport, digest), times in arrivals.items()}
    print(f"CLU-DISC-2: mean gap per sender (ms) { {s: round(ms) for s, ms in periods.items()} }, datagrams {shown}")
    # Per node, the mean gap is the broadcast-period within `PERIOD_TOLERANCE`
    low, high = (1 - PERIOD_TOLERANCE) * period_ms, (1 + PERIOD_TOLERANCE) * period_ms
    off = {sender: round(ms) for sender, ms in periods.items() if not low <= ms <= high}
    assert not off, (
        f"CLU-DISC-2: each node should announce every {period_ms} ms (broadcast-period); mean gap per sender (ms) "
        f"{ {s: round(ms) for s, ms in periods.items()} }, outside {low:.0f}..{high:.0f} ms: {off}; datagrams per "
        f"sender {shown}")


@pytest.mark.spec("CLU-DISC-2")
def test_each_node_announces_itself_every_broadcast_period(clusters):
    assert_each_node_announces_every(clusters.get(UDP), UDP, PERIOD_MS)


@pytest.mark.spec("CLU-DISC-2")
def test_without_a_broadcast_period_each_node_announces_every_2000_ms(clusters):
    """The default half of CLU-DISC-2: the cluster sets no broadcast-period, so the broker's own
    default runs; the number asserted is the chapter's (2000 ms), not the option model's."""
    assert UDP_DEFAULT.cluster.broadcast_period_ms is None, "setup: the period must be left to the broker"
    assert_each_node_announces_every(clusters.get(UDP_DEFAULT), UDP_DEFAULT, DOCUMENTED_DEFAULT_PERIOD_MS)
