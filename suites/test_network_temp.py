"""Temporary reply destinations across a network (NOB-TEMP-1): ActiveMQ "Networks of Brokers",
NetworkConnector properties, bridgeTempDestinations (../shared/spec/activemq-classic-networks-of-brokers.md;
catalogue conformance/spec/networks.toml). STOMP names temporary destinations as the ActiveMQ
"Stomp" page ("Working with Destinations with Stomp") describes: ``/temp-queue/NAME`` for the
creating client, the ``reply-to`` form (``/remote-temp-queue/...``) for the others.

Two networks, each A <-> B over one duplex connector, differing only in bridge_temp_destinations
(left unset, the broker's default, or off):
a requester on A asks a responder on B and waits for the answer on its temporary queue.
Targets: ActiveMQ Classic 5.17 and the reference broker (fixtures as test_networks.py).
"""

from __future__ import annotations

import queue as queue_module
import uuid

import pytest
import stomp

from suites.network_support import (DEMAND_TIMEOUT, OneNetworkAtATime, launch_network, network_target,
                                                network_suite_marks, network_workdir, parametrize_by_target)
from conformance.topology import Bridge, Topology
from conformance.topology import NetworkConnectorOptions as Options

#: how long a reply that should not come is waited for (local brokers forward in milliseconds)
QUIET = 3.0

pytestmark = network_suite_marks()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_by_target(metafunc)


def _model(bridge_temp: bool):
    # on: the option left unset, so the broker's own default is what "announced by default" meets
    options = {} if bridge_temp else {"bridge_temp_destinations": False}
    return ("A", "B"), (Bridge("A", "B", Options(duplex=True, **options)),)


def _launch(request, target_name: str, bridge_temp: bool, workdir):
    names, bridges = _model(bridge_temp)
    return launch_network(request, target_name, workdir,
                          Topology(names, bridges, prefix=f"nob-temp-{'on' if bridge_temp else 'off'}"))


@pytest.fixture(scope="module")
def networks(target_name, request, tmp_path_factory):
    running = OneNetworkAtATime()

    def get(bridge_temp: bool):
        network_target(request, target_name)  # not applicable: skip before anything starts
        return running.get(bridge_temp, lambda: _launch(request, target_name, bridge_temp, network_workdir(
            tmp_path_factory, f"{target_name}-temp-{bridge_temp}")))

    yield get
    running.stop()


@pytest.fixture
def net(networks, request):
    """The network of the test's ``@pytest.mark.network(bridge_temp)``, started at set-up, so a
    network that cannot start is a set-up error, not the check's failure."""
    marker = request.node.get_closest_marker("network")
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid}: uses `net` without @pytest.mark.network(bridge_temp)")
    return networks(marker.args[0])


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.frames: queue_module.Queue = queue_module.Queue()

    def on_message(self, frame) -> None:
        self.frames.put(("MESSAGE", frame))

    def on_error(self, frame) -> None:
        self.frames.put(("ERROR", frame))

    def on_receipt(self, frame) -> None:
        self.frames.put(("RECEIPT", frame))

    def next(self, timeout: float):
        try:
            return self.frames.get(timeout=timeout)
        except queue_module.Empty:
            return None, None


@pytest.fixture
def stomp_on():
    made: list = []

    def on(node):
        conn = stomp.Connection12([node.address("stomp")], heartbeats=(0, 0))
        listener = Listener()
        conn.set_listener("l", listener)
        conn.connect(wait=True)
        made.append(conn)
        return conn, listener

    yield on
    for conn in made:
        try:
            conn.disconnect()
        except Exception:  # noqa: BLE001 - a connection the broker closed must not hide the outcome
            pass


def _expect(listener: Listener, command: str, timeout: float = DEMAND_TIMEOUT):
    got, frame = listener.next(timeout)
    assert got == command, f"NOB-TEMP-1: expected {command}, got {got} {getattr(frame, 'headers', None)}"
    return frame


def _request(net, stomp_on):
    """Requester on A, responder on B: returns (requester listener, responder conn and listener,
    the request as the responder received it)."""
    a, b = net["A"], net["B"]
    service = f"nob.temp.svc.{uuid.uuid4().hex[:8]}"
    requester, req_events = stomp_on(a)
    responder, resp_events = stomp_on(b)
    requester.subscribe("/temp-queue/replies", "replies", headers={"receipt": "sub-r"})
    _expect(req_events, "RECEIPT")
    responder.subscribe(f"/queue/{service}", "svc", headers={"receipt": "sub-s"})
    _expect(resp_events, "RECEIPT")
    seen = a.wait_for_consumers(f"queue://{service}", 1, DEMAND_TIMEOUT)
    assert seen == 1, f"setup: B's responder should be demand on A within {DEMAND_TIMEOUT:.0f} s, counts {seen}"
    requester.send(f"/queue/{service}", "question", headers={"reply-to": "/temp-queue/replies",
                                                             "correlation-id": "c1", "receipt": "req"})
    _expect(req_events, "RECEIPT")
    request = _expect(resp_events, "MESSAGE")
    return req_events, responder, resp_events, request


@pytest.mark.spec("NOB-TEMP-1")
@pytest.mark.network(True)
def test_reply_from_a_remote_broker_reaches_a_temp_queue_by_default(net, stomp_on):
    req_events, responder, resp_events, request = _request(net, stomp_on)
    reply_to = request.headers.get("reply-to", "")
    assert reply_to.startswith("/remote-temp-queue/"), (
        f"NOB-TEMP-1: the responder should see the requester's temporary queue in a form it can send to, got {reply_to!r}")
    responder.send(reply_to, "answer", headers={"correlation-id": "c1", "receipt": "rep"})
    assert _expect(resp_events, "RECEIPT") is not None
    reply = _expect(req_events, "MESSAGE")
    assert (reply.body, reply.headers.get("correlation-id")) == ("answer", "c1"), (
        "NOB-TEMP-1: with bridgeTempDestinations on (the default) the reply from broker B should reach "
        "the requester's temporary queue on A")


@pytest.mark.spec("NOB-TEMP-1")
@pytest.mark.network(False)
def test_reply_from_a_remote_broker_fails_without_bridge_temp_destinations(net, stomp_on):
    req_events, responder, resp_events, request = _request(net, stomp_on)
    responder.send(request.headers["reply-to"], "answer", headers={"receipt": "rep"})
    answer, frame = resp_events.next(DEMAND_TIMEOUT)
    got, _ = req_events.next(QUIET)
    assert got is None, "NOB-TEMP-1: with bridgeTempDestinations off no reply may cross the network"
    assert answer == "ERROR", (
        "NOB-TEMP-1: with bridgeTempDestinations off the remote reply should fail (the temporary destination "
        f"does not exist on B), got {answer} {getattr(frame, 'headers', None)}")
