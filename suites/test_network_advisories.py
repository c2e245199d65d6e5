"""How a network learns of remote consumers, against ActiveMQ Classic's "Networks of Brokers" page
(../shared/spec/activemq-classic-networks-of-brokers.md, "Configuration Pitfalls", "Dynamic
networks" and "Pure static networks"; catalogue conformance/spec/networks.toml).

A bridge hears of the remote broker's consumers through that broker's consumer advisories. Two
networks, each A -> B:

* ``noadvisory``: B runs with advisorySupport off. Connector ``dyn`` is dynamic (it forwards
  nob.noadv.dyn.> on demand), connector ``static`` a static bridge for one statically included
  queue. B's consumers can create no demand (NOB-DEMAND-2); the static queue still goes to B
  (NOB-DEMAND-3).
* ``destfilter``: connector ``heard`` listens only to the advisories of the queues nob.df.heard.>
  (destinationFilter ``Queue.nob.df.heard.>``, the consumer advisory prefix implied); connector
  ``deaf`` has the document's destinationFilter ``NO_DESTINATION`` and one statically included
  queue (NOB-DESTFILTER-1, NOB-DESTFILTER-2).

Where the check is that a consumer creates no demand, a witness consumer subscribes on B after it
for a queue whose demand does cross; once the witness is counted on A, the first consumer's
advisory (published before the witness's) had its chance too. Without advisories (``noadvisory``)
there is no such witness: a quiet window is all there is.

Targets: ActiveMQ Classic and the reference broker, whose bridges read the same advisory topics
(reference_broker/cluster/advisories.py).
"""

from __future__ import annotations

import pytest

from suites.network_support import (DEMAND_TIMEOUT, OneNetworkAtATime, StompClients, demand,
                                                launch_network, network_suite_marks, network_target,
                                                network_workdir, parametrize_by_target, queue, send)
from conformance.topology import Bridge, Topology
from conformance.topology import NetworkConnectorOptions as Options
from machinery.waiting import poll

#: quiet window after which nothing more is expected to cross (local brokers forward within
#: milliseconds once demand is there; generous on a loaded two-core machine)
QUIET = 2.0
NOADV_ALWAYS = "queue://nob.noadv.always"
DF_ALWAYS = "queue://nob.df.always"

NETWORKS = {
    "noadvisory": Topology(("A", "B"), (
        Bridge("A", "B", Options(name="dyn", dynamically_included_destinations=("queue://nob.noadv.dyn.>",))),
        Bridge("A", "B", Options(name="static", static_bridge=True, statically_included_destinations=(NOADV_ALWAYS,))),
    ), broker_attributes={"B": {"advisorySupport": "false"}}, prefix="nob-noadv"),
    "destfilter": Topology(("A", "B"), (
        Bridge("A", "B", Options(name="heard", destination_filter="Queue.nob.df.heard.>")),
        Bridge("A", "B", Options(name="deaf", destination_filter="NO_DESTINATION",
                                 statically_included_destinations=(DF_ALWAYS,))),
    ), prefix="nob-df"),
}

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


@pytest.fixture(scope="module")
def networks(target_name, request, tmp_path_factory):
    running = OneNetworkAtATime()

    def get(key: str):
        network_target(request, target_name)  # not applicable: skip before anything starts
        return running.get(key, lambda: launch_network(
            request, target_name, network_workdir(tmp_path_factory, f"{target_name}-{key}"), NETWORKS[key]))

    yield get
    running.stop()


@pytest.fixture
def net(networks, request):
    """The network of the test's ``@pytest.mark.network(key)``, started at set-up (a network that
    cannot start is an error of the set-up, never the check's failure)."""
    return networks(request.node.get_closest_marker("network").args[0])


@pytest.fixture
def clients():
    with StompClients() as made:
        yield made


def texts(messages) -> list[str]:
    return [m.text for m in messages]


def arrives_on(node, destination: str, expected: int) -> int:
    """Polls until ``node`` holds ``expected`` messages of ``destination``; the last size seen."""
    return poll(lambda: node.queue_size(destination), lambda size: size == expected, timeout=DEMAND_TIMEOUT)


# --------------------------------------------------------------------------- B without advisories


@pytest.mark.spec("NOB-DEMAND-2")
@pytest.mark.network("noadvisory")
def test_without_advisories_remote_consumers_create_no_demand(net, clients):
    a, b = net["A"], net["B"]
    q = queue("nob.noadv.dyn.q")
    on_b = clients.on(b).subscribe(q)
    demand(b, q, 1)  # B counts its own consumer: setup
    sent = send(clients.on(a), q, 5)
    # No advisory can announce B's consumer, so there is no sign to wait for: a quiet window.
    got = texts(on_b.drain(QUIET))
    assert got == [], (f"NOB-DEMAND-2: B has advisory support off, so A's dynamic connector cannot learn of B's "
                       f"consumer; yet it got {got}")
    assert a.consumer_count(q) == 0 and a.queue_size(q) == len(sent), (
        f"NOB-DEMAND-2: A should hold the {len(sent)} messages with no network consumer; counts "
        f"{a.consumer_count(q)} consumer(s), holds {a.queue_size(q)}")


@pytest.mark.spec("NOB-DEMAND-3")
@pytest.mark.network("noadvisory")
def test_without_advisories_a_static_network_still_forwards(net, clients):
    a, b = net["A"], net["B"]
    sent = send(clients.on(a), NOADV_ALWAYS, 5, tag="static-")
    size = arrives_on(b, NOADV_ALWAYS, len(sent))
    assert size == len(sent), (f"NOB-DEMAND-3: a static bridge should forward its statically included queue to B "
                               f"although B publishes no advisories; B holds {size}, A {a.queue_size(NOADV_ALWAYS)}")
    got = texts(clients.on(b).subscribe(NOADV_ALWAYS).receive_n(len(sent), DEMAND_TIMEOUT))
    assert sorted(got) == sorted(sent), f"NOB-DEMAND-3: B's consumer should get the forwarded messages, got {got}"


# --------------------------------------------------------------------------- destinationFilter


@pytest.mark.spec("NOB-DESTFILTER-1")
@pytest.mark.network("destfilter")
def test_destination_filter_limits_the_consumers_a_bridge_hears(net, clients):
    a, b = net["A"], net["B"]
    unheard, heard = queue("nob.df.other"), queue("nob.df.heard.q")
    on_b_unheard = clients.on(b).subscribe(unheard)
    on_b_heard = clients.on(b).subscribe(heard)  # the witness: announced after the unheard one
    demand(a, heard, 1)
    assert a.consumer_count(unheard) == 0, (
        "NOB-DESTFILTER-1: B's consumer of a queue outside destinationFilter Queue.nob.df.heard.> became a network "
        "consumer on A")
    producer = clients.on(a)
    sent = send(producer, heard, 5)
    send(producer, unheard, 5)
    got = texts(on_b_heard.receive_n(len(sent), DEMAND_TIMEOUT))
    assert sorted(got) == sorted(sent), (
        f"NOB-DESTFILTER-1: a queue the filter names should follow B's consumer; B's consumer got {got}")
    stray = texts(on_b_unheard.drain(QUIET))
    assert stray == [] and a.queue_size(unheard) == 5, (
        f"NOB-DESTFILTER-1: a queue outside the filter should stay on A; B's consumer got {stray}, A holds "
        f"{a.queue_size(unheard)}")


@pytest.mark.spec("NOB-DESTFILTER-2")
@pytest.mark.network("destfilter")
def test_destination_filter_on_no_destination_leaves_static_forwarding_only(net, clients):
    a, b = net["A"], net["B"]
    sent = send(clients.on(a), DF_ALWAYS, 5, tag="always-")
    size = arrives_on(b, DF_ALWAYS, len(sent))
    assert size == len(sent), (f"NOB-DESTFILTER-2: the deaf connector's statically included queue should reach B "
                               f"with no consumer anywhere; B holds {size}, A {a.queue_size(DF_ALWAYS)}")
    assert sorted(texts(clients.on(b).subscribe(DF_ALWAYS).receive_n(len(sent), DEMAND_TIMEOUT))) == sorted(sent)
    # A consumer on B of a queue the deaf connector would forward had it listened (it has no
    # dynamically included list), announced before a witness the other connector hears.
    ignored, witness = queue("nob.df.ignored"), queue("nob.df.heard.witness")
    on_b = clients.on(b).subscribe(ignored)
    clients.on(b).subscribe(witness)
    demand(a, witness, 1)
    assert a.consumer_count(ignored) == 0, (
        "NOB-DESTFILTER-2: with destinationFilter NO_DESTINATION the connector still took B's consumer as demand")
    send(clients.on(a), ignored, 5)
    got = texts(on_b.drain(QUIET))
    assert got == [] and a.queue_size(ignored) == 5, (
        f"NOB-DESTFILTER-2: a connector listening to NO_DESTINATION forwarded a remote consumer's queue: B's "
        f"consumer got {got}, A holds {a.queue_size(ignored)}")
