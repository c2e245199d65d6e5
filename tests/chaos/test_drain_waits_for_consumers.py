"""Before a chaos run's drain, the broker must no longer count the workload's closed consumers:
a drain subscribing while the broker still holds a closed consumer's prefetched messages is a
second consumer, and got newer messages first (seen on Artemis under load: fifo judged 27
reordered). `RunningTopology.wait_consumers_gone` waits on each serving node's own count;
`chaos.experiment._wait_consumers_gone` says when it could not."""

from __future__ import annotations

from chaos.experiment import _wait_consumers_gone
from chaos.topology import RunningTopology


class CountingNode:
    """A serving node whose consumer count of every destination drops by one per read, to 0."""

    running = True

    def __init__(self, consumers: int) -> None:
        self.consumers = consumers
        self.reads = 0

    def serving(self) -> bool:
        return True

    def consumer_count(self, destination: str) -> int:
        self.reads += 1
        self.consumers = max(0, self.consumers - 1)
        return self.consumers

    def wait_for_consumers(self, destination: str, count: int, timeout: float = 10.0) -> int:
        while (seen := self.consumer_count(destination)) != count and self.reads < 100:
            pass
        return seen


class StuckNode(CountingNode):
    def consumer_count(self, destination: str) -> int:
        self.reads += 1
        return self.consumers


def _topology(**nodes) -> RunningTopology:
    """A RunningTopology over fake nodes (``cluster[name]`` is all it reads of its cluster here)."""
    running = RunningTopology.__new__(RunningTopology)
    running.cluster = dict(nodes)
    running.nodes = dict(nodes)
    return running


def test_the_wait_reads_each_serving_node_until_it_counts_no_consumer():
    a = CountingNode(consumers=3)
    counts = _topology(A=a).wait_consumers_gone("queue://q", timeout=5)
    assert counts == {"A": 0} and a.reads >= 3


def test_a_broker_still_counting_consumers_is_said_before_the_drain():
    said: list[str] = []
    _wait_consumers_gone(_topology(A=StuckNode(consumers=1)), "queue://q", said.append)
    assert said == ["  queue://q still counts consumers before the drain: {'A': 1}"]


def test_a_broker_whose_count_cannot_be_read_is_said_and_drained_anyway():
    class Unreadable(CountingNode):
        def wait_for_consumers(self, destination, count, timeout=10.0):
            raise RuntimeError("no JMX")

    said: list[str] = []
    _wait_consumers_gone(_topology(A=Unreadable(consumers=1)), "queue://q", said.append)
    assert said == ["  could not read queue://q's consumer count before the drain: RuntimeError: no JMX"]
