"""Network-bridge privileges come from the authenticated connection, never from a subscription id
the client picks (issue 20, item 3; engine/network_principal.py).

ENG-AUTH-4: an ``NC|`` subscription id (what a peer's bridge uses, cluster/paths.py) is honoured only
on a connection the broker trusts as a network bridge: a login in ``security.network_group``, the
broker's own internal connections, or a bridge of a broker of the same process. Anyone else gets a
STOMP ERROR, and in particular cannot take another connection's temporary queue.
"""

from __future__ import annotations

import uuid

from reference_broker.cluster.paths import network_subscription
from reference_broker.engine.network_principal import IN_PROCESS_LOGIN, bridge_login

from .test_engine_support import make_broker

NETWORK_USERS = {"users": [
    {"name": "bridge", "password": "bridge-pw", "groups": ["network-bridges"]},
    {"name": "alice", "password": "a", "groups": ["users"]},
], "allow_anonymous": True}


def _temp_queue_of_another_client(running, raw_factory):
    """(owner, name) of a temporary queue, learnt as any client learns one: from a reply-to."""
    owner = raw_factory(running.address)
    owner.connect()
    owner.send_frame("SUBSCRIBE", [("id", "replies"), ("destination", "/temp-queue/replies"), ("receipt", "r")])
    owner.expect("RECEIPT")
    service = f"/queue/svc.{uuid.uuid4().hex}"
    reader = raw_factory(running.address)
    reader.connect()
    reader.send_frame("SUBSCRIBE", [("id", "svc"), ("destination", service), ("receipt", "r")])
    reader.expect("RECEIPT")
    owner.send_frame("SEND", [("destination", service), ("reply-to", "/temp-queue/replies")], b"question")
    reply_to = reader.expect("MESSAGE").get("reply-to")
    assert reply_to.startswith("/remote-temp-queue/ID:")
    return owner, reply_to


def test_network_subscription_id_does_not_take_another_connections_temp_queue(broker_factory, raw_factory):
    """ENG-AUTH-4: the attack of issue 20 on a default (no users, loopback) broker."""
    running = broker_factory()
    owner, reply_to = _temp_queue_of_another_client(running, raw_factory)
    thief = raw_factory(running.address)
    thief.connect()
    thief.send_frame("SUBSCRIBE", [("id", "NC|evil|-5|1"), ("destination", reply_to), ("receipt", "t")])
    error = thief.expect_error_and_close()
    assert "reserved for network bridges" in error.get("message"), \
        f"ENG-AUTH-4: an anonymous client's NC| subscription was not refused: {error.get('message')}"
    # The owner still gets what is sent to its queue.
    sender = raw_factory(running.address)
    sender.connect()
    sender.send_frame("SEND", [("destination", reply_to), ("receipt", "s")], b"answer")
    sender.expect("RECEIPT")
    assert owner.expect("MESSAGE").body == b"answer"


def test_network_subscription_id_is_refused_to_a_user_outside_the_network_group(broker_factory, raw_factory):
    """ENG-AUTH-4: a logged-in user is not a bridge unless the configuration says so."""
    running = broker_factory(security=NETWORK_USERS)
    _, reply_to = _temp_queue_of_another_client(running, raw_factory)
    alice = raw_factory(running.address)
    alice.connect(login="alice", passcode="a")
    alice.send_frame("SUBSCRIBE", [("id", "NC|x|-5|1"), ("destination", reply_to)])
    assert "reserved for network bridges" in alice.expect_error_and_close().get("message")
    # The configured bridge user may pull from it, as a peer's bridge does (bridge_temp_destinations).
    bridge = raw_factory(running.address)
    bridge.connect(login="bridge", passcode="bridge-pw")
    bridge.send_frame("SUBSCRIBE", [("id", "NC|peer|-5|1"), ("destination", reply_to), ("receipt", "b")])
    bridge.expect("RECEIPT")


def test_only_trusted_connections_get_network_paths_and_priorities():
    """ENG-AUTH-4 in the engine: advisories and the bridge filter read a path and priority from an
    NC| id only on a network connection."""
    broker = make_broker({"security": {**NETWORK_USERS}})
    anonymous = broker.connect()
    bridge = broker.connect(login="bridge", passcode="bridge-pw")
    internal = broker.connect(internal=True)
    assert (anonymous.network, bridge.network, internal.network) == (False, True, True)
    sub = anonymous.subscribe("NC|B|-5|1", _queue("q"), deliver=lambda c, r: None)
    assert network_subscription(sub) is None
    sub = bridge.subscribe("NC|B|-5|1", _queue("q"), deliver=lambda c, r: None)
    assert network_subscription(sub) == (("B",), -5)


def test_in_process_secret_is_only_offered_to_brokers_of_this_process(broker_factory):
    """The no-configuration default for bridges between brokers of one process: a peer port no
    broker of this process listens on never gets the secret, a connector's own credentials win."""
    running = broker_factory()
    login, secret = bridge_login("127.0.0.1", running.port, None, None)
    assert login == IN_PROCESS_LOGIN and secret
    assert running.call(lambda: running.server.broker.connect(login=login, passcode=secret).network)
    assert not running.call(lambda: running.server.broker.connect(login=login, passcode="guess").network)
    running.stop()
    assert bridge_login("127.0.0.1", running.port, None, None) == (None, None)
    assert bridge_login("127.0.0.1", running.port, "u", "p") == ("u", "p")


def _queue(name: str):
    from reference_broker.engine.names import parse_destination

    return parse_destination(f"queue://{name}")
