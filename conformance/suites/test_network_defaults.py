"""Defaults of a network connector that the options table states and no other suite reaches,
against ActiveMQ Classic's "Networks of Brokers" page
(../shared/spec/activemq-classic-networks-of-brokers.md, "NetworkConnector Properties";
catalogue conformance/spec/networks.toml). The scenario leaves each such option unset, so the
launchers leave it out of the broker's configuration and the broker's own default shows.

* NOB-NAME-2: a connector with no name is called ``bridge`` (read back from the broker: the
  connector MBean's networkConnectorName on ActiveMQ, the resolved configuration on the
  reference broker).

Targets: ActiveMQ Classic and the reference broker.
"""

from __future__ import annotations

import pytest

from conformance.suites.network_support import (OneNetworkAtATime, launch_network, network_suite_marks,
                                                network_target, network_workdir, parametrize_by_target)
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
