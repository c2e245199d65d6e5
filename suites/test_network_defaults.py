"""Network connector settings no other suite reaches: defaults the options table states and a
transport other than tcp,
against ActiveMQ Classic's "Networks of Brokers" page
(../shared/spec/activemq-classic-networks-of-brokers.md, "NetworkConnector Properties";
catalogue conformance/spec/networks.toml). The scenario leaves each such option unset, so the
launchers leave it out of the broker's configuration and the broker's own default shows.

* NOB-NAME-2: a connector with no name is called ``bridge`` (read back from the broker: the
  connector MBean's networkConnectorName on ActiveMQ, the resolved configuration on the
  reference broker).

* NOB-TRANSPORT-1: a connector may dial its peer over a transport other than tcp; nio, which
  the Debian package runs without extra jars (ActiveMQ only: the reference broker's bridges speak
  STOMP over tcp).

Targets: ActiveMQ Classic and the reference broker.
"""

from __future__ import annotations

import pytest

from suites.network_support import (DEMAND_TIMEOUT, OneNetworkAtATime, StompClients, demand,
                                                launch_network, network_suite_marks, network_target,
                                                network_workdir, parametrize_by_target, queue, send)
from conformance.topology import Bridge, Topology
from conformance.topology import NetworkConnectorOptions as Options

UNNAMED = Topology(("A", "B"), (Bridge("A", "B", Options()),), prefix="nob-unnamed")

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture(scope="module")
def unnamed(target_name, request, tmp_path_factory):
    network_target(request, target_name)  # not applicable: skip before anything starts
    running = OneNetworkAtATime()
    yield running.get("unnamed", lambda: launch_network(
        request, target_name, network_workdir(tmp_path_factory, f"{target_name}-unnamed"), UNNAMED))
    running.stop()


@pytest.mark.spec("NOB-NAME-2")
def test_a_connector_without_a_name_is_called_bridge(unnamed):
    names = unnamed["A"].network_connector_names()
    assert names == ["bridge"], (f"NOB-NAME-2: broker A's one network connector was given no name, so it should be "
                                 f"called 'bridge'; the broker calls it {names}\n{unnamed.config_text()[-1500:]}")


# --------------------------------------------------------------------------- another transport

NIO = Topology(("A", "B"), (Bridge("A", "B", Options(name="overnio"), transport="nio"),), prefix="nob-nio")


@pytest.fixture(scope="module")
def over_nio(target_name, request, tmp_path_factory):
    network_target(request, target_name)
    running = OneNetworkAtATime()
    yield running.get("nio", lambda: launch_network(
        request, target_name, network_workdir(tmp_path_factory, f"{target_name}-nio"), NIO))
    running.stop()


@pytest.mark.spec("NOB-TRANSPORT-1")
def test_a_bridge_over_the_nio_transport_forwards(over_nio):
    """A's connector dials B with ``static:(nio://...)``: the bridge forms (the launch waits for
    it) and carries B's demand and A's messages."""
    a, b = over_nio["A"], over_nio["B"]
    q = queue("nob.nio")
    with StompClients() as clients:
        on_b = clients.on(b).subscribe(q)
        demand(a, q, 1)
        sent = send(clients.on(a), q, 5)
        got = [m.text for m in on_b.receive_n(len(sent), DEMAND_TIMEOUT)]
    assert sorted(got) == sorted(sent), (f"NOB-TRANSPORT-1: a bridge over nio:// should forward A's messages to B's "
                                         f"consumer; got {got}\n{over_nio.log_tail(20)}")
