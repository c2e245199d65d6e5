"""How Artemis takes cluster configuration the topology model never renders (artemis-clusters.md,
"Configuring Cluster Connections" for CLU-CC-1; "Broadcast Groups" for CLU-DISC-3; "Defining
Discovery Groups on the Server" for CLU-DISC-9: a discovery group with no group address, two of
one name). Both
statements are about Artemis's own configuration elements, so they apply to Artemis only, and
only the local-process launcher can start a JVM with a hand-written fragment and show its sockets.

* CLU-CC-1: a cluster connection without ``connector-ref`` is an error: the broker must refuse to
  start and say why, not run a cluster connection that announces nothing.
* CLU-DISC-3, binding: with ``local-bind-address`` and no ``local-bind-port`` the broadcast socket
  is bound to that address on an anonymous port; with both, on exactly that port. Read from the
  JVM's own UDP sockets (psutil). Every group address here is multicast and every socket is bound
  to 127.0.0.1, so the datagrams stay on the loopback device (see artemis/cluster.py's docstring);
  the chapter's third case, no ``local-bind-address`` (the wildcard address), is not run: its
  datagrams would leave through the machine's default interface.
* CLU-DISC-3, required group address: a broadcast group without ``group-address`` and
  ``group-port`` must not run silently: the broker either refuses the configuration or reports an
  error for the group.
"""

from __future__ import annotations

import re
import time

import psutil
import pytest

from conformance.plugin import NOT_APPLICABLE, STATE
from suites.cluster_support import cluster_suite_marks
from suites.network_support import parametrize_by_target
from machinery.process import free_ports
from machinery.waiting import poll

pytestmark = cluster_suite_marks()  # JVM starts: slow; on the targets that form clusters

#: a multicast group of the administratively scoped range (the port is picked per test)
GROUP_ADDRESS = "231.7.7.7"
BROADCAST_PERIOD_MS = 500


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture
def artemis_node(request, target_name, tmp_path):
    """Start one Artemis JVM with a cluster fragment: ``artemis_node(fragment_of, free=0)`` ->
    (process, free ports); every started JVM is stopped at the end."""
    target = request.config.stash[STATE].targets.get(target_name)
    # an Artemis target whose brokers run from this machine's distribution (not a container, not external)
    if target is None or target.kind != "artemis" or not target.launches_locally:
        pytest.skip(f"{NOT_APPLICABLE}{target_name}: only the Artemis local-process launcher starts a JVM with a "
                    "hand-written cluster fragment")
    from conformance.targets.artemis.cluster import start_configured_node

    started = []

    def start(fragment_of, free: int = 0):
        process, ports = start_configured_node(tmp_path / f"n{len(started)}", fragment_of, free=free)
        started.append(process)
        return process, ports

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def _own_connector(ports) -> str:
    return f'      <connectors><connector name="self">tcp://127.0.0.1:{ports["core"]}</connector></connectors>\n'


def _udp_sockets(pid: int) -> list[tuple[str, int]]:
    """The local (address, port) of every UDP socket of process ``pid`` (IPv4-mapped shown plain)."""
    sockets = psutil.Process(pid).net_connections(kind="udp")
    return [(re.sub(r"^::ffff:", "", s.laddr.ip), s.laddr.port) for s in sockets if s.laddr]


@pytest.mark.spec("CLU-CC-1")
def test_a_cluster_connection_without_connector_ref_is_refused(artemis_node):
    from conformance.targets.artemis.process import ArtemisStartError

    def fragment(ports) -> str:
        return (_own_connector(ports) +
                '      <cluster-connections><cluster-connection name="no-connector-ref"><address></address>'
                '<static-connectors><connector-ref>self</connector-ref></static-connectors>'
                '</cluster-connection></cluster-connections>\n')

    with pytest.raises(ArtemisStartError) as refused:
        artemis_node(fragment)
    reason = str(refused.value)
    assert "connector-ref" in reason and "cluster-connection" in reason, (
        f"CLU-CC-1: Artemis did not start, as it should not, but its reason does not name the missing "
        f"connector-ref of the cluster connection: {reason[:1500]}")


@pytest.mark.spec("CLU-DISC-3")
def test_broadcast_socket_binds_to_the_local_bind_address_and_port(artemis_node):
    def fragment_of(ports, free):
        group = (f"<group-address>{GROUP_ADDRESS}</group-address><group-port>{free[0]}</group-port>"
                 f"<broadcast-period>{BROADCAST_PERIOD_MS}</broadcast-period><connector-ref>self</connector-ref>")
        return (_own_connector(ports) + "      <broadcast-groups>"
                f'<broadcast-group name="anonymous-port"><local-bind-address>127.0.0.1</local-bind-address>{group}'
                "</broadcast-group>"
                f'<broadcast-group name="given-port"><local-bind-address>127.0.0.1</local-bind-address>'
                f"<local-bind-port>{free[1]}</local-bind-port>{group}</broadcast-group>"
                "</broadcast-groups>\n")

    # the fragment names two free ports (the group's, the one given to bind): picked before the start
    group_port, given_port = free_ports(2)
    process, _ = artemis_node(lambda ports: fragment_of(ports, (group_port, given_port)))
    sockets = poll(lambda: _udp_sockets(process.pid), lambda s: len(s) >= 2, timeout=10, interval=0.3)
    bound = sorted(s for s in sockets if s[1] != group_port)
    assert ("127.0.0.1", given_port) in bound, (
        f"CLU-DISC-3: the broadcast group with local-bind-address 127.0.0.1 and local-bind-port {given_port} "
        f"should have its socket bound there; the JVM's UDP sockets: {sockets}")
    anonymous = [s for s in bound if s != ("127.0.0.1", given_port)]
    assert len(anonymous) == 1 and anonymous[0][0] == "127.0.0.1" and anonymous[0][1] > 0, (
        f"CLU-DISC-3: the broadcast group with local-bind-address 127.0.0.1 and no local-bind-port should have "
        f"one socket bound to 127.0.0.1 on an anonymous port (the default -1); the JVM's UDP sockets: {sockets}")


@pytest.mark.spec("CLU-DISC-3")
def test_a_broadcast_group_without_its_group_address_does_not_run_silently(artemis_node):
    from conformance.targets.artemis.process import ArtemisStartError

    def fragment(ports) -> str:
        return (_own_connector(ports) + '      <broadcast-groups><broadcast-group name="no-group">'
                "<local-bind-address>127.0.0.1</local-bind-address>"
                f"<broadcast-period>{BROADCAST_PERIOD_MS}</broadcast-period><connector-ref>self</connector-ref>"
                "</broadcast-group></broadcast-groups>\n")

    try:
        process, _ = artemis_node(fragment)
    except ArtemisStartError:
        return  # refused outright: the strictest reading of "required"
    # it started: the group must be reported as failing within a few broadcast periods
    errors = poll(lambda: [line for line in process.log_tail(400).splitlines() if " ERROR " in line],
                  timeout=10 * BROADCAST_PERIOD_MS / 1000, interval=0.3)
    assert errors, (
        "CLU-DISC-3: a broadcast group without group-address and group-port started and ran with no error "
        f"reported; log tail:\n{process.log_tail(30)}")


def _discovery_cluster_connection(group_name: str) -> str:
    return ('      <cluster-connections><cluster-connection name="by-discovery"><address></address>'
            f'<connector-ref>self</connector-ref><discovery-group-ref discovery-group-name="{group_name}"/>'
            '</cluster-connection></cluster-connections>\n')


def _refused_or_reported(artemis_node, fragment, words: tuple[str, ...]) -> str | None:
    """None when Artemis refused ``fragment`` at start with a reason naming every one of ``words``,
    or logged a WARN/ERROR line naming them within a few seconds of starting; else the refusal or
    the log tail, for the assertion."""
    from conformance.targets.artemis.process import ArtemisStartError

    try:
        process, _ = artemis_node(fragment)
    except ArtemisStartError as refused:  # refused outright, for the reason asked about
        reason = str(refused)
        return None if all(w in reason for w in words) else f"refused for another reason: {reason[:1500]}"
    def reported() -> list[str]:
        return [line for line in process.log_tail(400).splitlines()
                if (" ERROR " in line or " WARN " in line) and all(w in line for w in words)]
    return None if poll(reported, timeout=10 * BROADCAST_PERIOD_MS / 1000, interval=0.3) else process.log_tail(30)


@pytest.mark.spec("CLU-DISC-9")
def test_a_discovery_group_without_its_group_address_does_not_run_silently(artemis_node):
    """Defining Discovery Groups on the Server: group-address and group-port are required. A
    cluster connection uses a discovery group that has neither (a group no cluster connection uses
    may never be started): Artemis must refuse it or report the group."""
    def fragment(ports) -> str:
        return (_own_connector(ports) + '      <discovery-groups><discovery-group name="no-group">'
                "<local-bind-address>127.0.0.1</local-bind-address><refresh-timeout>5000</refresh-timeout>"
                "</discovery-group></discovery-groups>\n" + _discovery_cluster_connection("no-group"))

    # 2.40 refuses it: "AMQ219004: Failed to initialise session factory ... port out of range:-1"
    tail = _refused_or_reported(artemis_node, fragment, ("port",))
    assert tail is None, ("CLU-DISC-9: a discovery group without group-address and group-port, used by a cluster "
                          f"connection, started with no error or warning reported; log tail:\n{tail}")


@pytest.mark.spec("CLU-DISC-9")
def test_two_discovery_groups_of_one_name_are_not_taken_silently(artemis_node):
    """Defining Discovery Groups on the Server: each discovery group needs a name unique on the
    server. Two groups named alike, on different ports: Artemis must refuse them or say so."""
    group_ports = free_ports(2)

    def fragment(ports) -> str:
        groups = "".join(f'<discovery-group name="twice"><local-bind-address>127.0.0.1</local-bind-address>'
                         f"<group-address>{GROUP_ADDRESS}</group-address><group-port>{port}</group-port>"
                         "</discovery-group>" for port in group_ports)
        return (_own_connector(ports) + f"      <discovery-groups>{groups}</discovery-groups>\n"
                + _discovery_cluster_connection("twice"))

    # 2.40 refuses it: the schema makes the name an ID ("multiple occurrences of ID value 'twice'")
    tail = _refused_or_reported(artemis_node, fragment, ("twice",))
    assert tail is None, ("CLU-DISC-9: two discovery groups both named 'twice' were taken with no error or warning "
                          f"naming them; log tail:\n{tail}")
