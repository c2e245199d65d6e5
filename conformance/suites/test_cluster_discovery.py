"""Broadcast groups' period (artemis-clusters.md, "Broadcast Groups": broadcast-period), on every
target with ``topology.cluster``.

One two-node cluster with discovery by UDP (`PERIOD_MS`, not the 2000 ms default, so a node that
ignored the setting would show), and one whose configuration does not mention the period (its
default is the broker's own: issue 26). The test joins the cluster's multicast group itself (found in
the launched cluster's configuration text: ``group-address`` / ``group_address`` and the port
likewise), counts the announcements for `WINDOW` seconds and derives each node's period from the
count (robust to one late datagram, unlike single intervals). The bounds are wide: a loaded
machine can only make announcements late (the estimate grows), so the lower bound says "not more
often than configured" and the upper one "not several times rarer".
"""

from __future__ import annotations

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
#: no period (nor refresh timeout) configured: CLU-DISC-2's "2000 unless configured"
UDP_DEFAULT = Topology(("A", "B"), cluster=ClusterConnection(discovery="udp"), prefix="udpdefault")
WINDOW = 12.0  # seconds of listening


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def multicast_endpoint(config_text: str) -> tuple[str, int]:
    """The group address and port the launcher configured (XML elements or snake_case keys)."""
    address = set(re.findall(r"group[-_]address\W+?(2\d\d\.\d+\.\d+\.\d+)", config_text))
    port = set(re.findall(r"group[-_]port\W+?(\d+)", config_text))
    assert len(address) == 1 and len(port) == 1, \
        f"setup: one multicast group expected in the cluster's configuration, found {address} port {port}"
    return address.pop(), int(port.pop())


def count_datagrams(group: str, port: int, seconds: float) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        # the nodes share the port (SO_REUSEADDR, as their own sockets do); loopback membership, as
        # the launchers bind the groups to 127.0.0.1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                        struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton("127.0.0.1")))
        count, deadline = 0, time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if select.select([sock], [], [], left)[0]:
                sock.recvfrom(65536)
                count += 1
        return count
    finally:
        sock.close()


def announcement_period_ms(cluster, topology: Topology) -> float:
    """Each node's broadcast period estimated over `WINDOW` seconds of listening (ms)."""
    group, port = multicast_endpoint(cluster.config_text())
    count = count_datagrams(group, port, WINDOW)
    nodes = len(topology.nodes)
    assert count, f"CLU-DISC-2: no announcement on {group}:{port} in {WINDOW:.0f} s ({nodes} nodes)"
    return nodes * WINDOW * 1000 / count


@pytest.mark.spec("CLU-DISC-2")
def test_each_node_announces_itself_every_broadcast_period(clusters):
    period_ms = announcement_period_ms(clusters.get(UDP), UDP)
    assert 0.75 * PERIOD_MS <= period_ms <= 2.5 * PERIOD_MS, (
        f"CLU-DISC-2: one announcement every {period_ms:.0f} ms per node over {WINDOW:.0f} s, the broadcast-period "
        f"is {PERIOD_MS} ms")


@pytest.mark.spec("CLU-DISC-2")
def test_a_broadcast_period_left_unset_is_the_default(clusters):
    """broadcast-period not in the configuration (CLUSTER_CONNECTION_DEFAULTS: 2000 ms, "Broadcast
    Groups"): the same estimate and bounds as with a configured period."""
    assert UDP_DEFAULT.cluster.broadcast_period_ms is None, "setup: the period must be left to the broker"
    default_ms = UDP_DEFAULT.cluster.effective("broadcast_period_ms")
    period_ms = announcement_period_ms(clusters.get(UDP_DEFAULT), UDP_DEFAULT)
    assert 0.75 * default_ms <= period_ms <= 2.5 * default_ms, (
        f"CLU-DISC-2: with broadcast-period left unset one announcement every {period_ms:.0f} ms per node over "
        f"{WINDOW:.0f} s; the default is {default_ms} ms")
