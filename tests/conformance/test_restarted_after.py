"""`restarted_after` (suites/cluster_support.py): a node a test stopped is started again when the
block ends, failed or not, but not while the run is being interrupted (SIGTERM and SIGHUP reach
the tests as KeyboardInterrupt, conformance/signals.py), where starting a broker again only held up
the stop: a SIGTERM during CLU-CC-RETRY-2's recording kept its pytest running 2 minutes, starting
node B and waiting for its links."""

from __future__ import annotations

import pytest

from suites.cluster_support import restarted_after


class Cluster:
    def __init__(self) -> None:
        self.started: list[tuple[str, float]] = []

    def start_broker(self, name: str, timeout: float) -> None:
        self.started.append((name, timeout))


def test_the_node_is_started_again_when_the_block_ends():
    cluster = Cluster()
    with restarted_after(cluster, "B", timeout=7):
        assert cluster.started == []
    assert cluster.started == [("B", 7)]


def test_the_node_is_started_again_after_a_failure_which_is_still_reported():
    cluster = Cluster()
    with pytest.raises(AssertionError, match="the check"):
        with restarted_after(cluster, "B"):
            raise AssertionError("the check")
    assert [name for name, _ in cluster.started] == ["B"]


def test_an_interrupted_run_does_not_start_the_node_again():
    cluster = Cluster()
    with pytest.raises(KeyboardInterrupt):
        with restarted_after(cluster, "B"):
            raise KeyboardInterrupt
    assert cluster.started == []
