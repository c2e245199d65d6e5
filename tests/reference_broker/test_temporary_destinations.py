"""Temporary destinations (reference_broker/engine/temporary.py) in the engine, the STOMP session,
and end to end with stomp.py: ActiveMQ "Stomp" page, "Working with Destinations with Stomp"."""

from __future__ import annotations

import uuid

import pytest

from reference_broker.engine.broker import Broker
from reference_broker.engine.message import Message
from reference_broker.engine.names import QUEUE, TOPIC, DestinationName
from reference_broker.engine.temporary import TemporaryDestinationError
from reference_broker.protocols.stomp.codec import serialize_frame
from tests.reference_broker.test_stomp_fuzz import new_session, server_frames


def message(conn, dest: DestinationName, body: bytes = b"x") -> Message:
    return Message(message_id=conn.new_message_id(), destination=dest.canonical, body=body)


# --------------------------------------------------------------------------- engine


def test_temporary_queue_is_named_after_its_connection_and_exists_at_once():
    broker = Broker()
    conn = broker.connect()
    dest = broker.temporary.create(conn, QUEUE)
    assert dest.name.startswith(f"ID:{conn.connection_id}:")
    assert dest.canonical in broker.queues
    assert broker.temporary.is_local(dest.canonical)
    broker.temporary.check_send(dest)  # exists: no error


def test_closing_the_owner_deletes_it_with_its_messages_and_refuses_later_sends():
    broker = Broker()
    owner, other = broker.connect(), broker.connect()
    dest = broker.temporary.create(owner, QUEUE)
    other.send(dest, message(other, dest))
    queue = broker.queues[dest.canonical]
    assert queue.stats()["pending"] == 1
    owner.close()
    assert dest.canonical not in broker.queues
    assert queue.stats()["pending"] == 0  # purged, not left to linger
    assert not broker.temporary.is_temporary(dest.canonical)
    with pytest.raises(TemporaryDestinationError, match="deleted when the connection that created it closed"):
        broker.temporary.check_send(dest)


def test_unknown_temporary_destination_is_refused_with_the_reason():
    broker = Broker()
    with pytest.raises(TemporaryDestinationError, match="bridge_temp_destinations"):
        broker.temporary.check_send(DestinationName(QUEUE, "ID:elsewhere-1-1:1"))


def test_only_the_owner_or_a_network_consumer_may_consume():
    broker = Broker()
    owner, other = broker.connect(), broker.connect()
    dest = broker.temporary.create(owner, TOPIC)
    broker.temporary.check_consume(dest, owner, network=False)
    broker.temporary.check_consume(dest, other, network=True)
    with pytest.raises(TemporaryDestinationError, match="only the connection that created it"):
        broker.temporary.check_consume(dest, other, network=False)


def test_announced_remote_temporary_destination_lives_while_its_announcer_does():
    broker = Broker()
    bridge = broker.connect()
    dest = DestinationName(QUEUE, "ID:peer-abc-1:1")
    broker.temporary.announce(dest, bridge.connection_id)
    broker.temporary.check_send(dest)
    bridge.close()
    with pytest.raises(TemporaryDestinationError):
        broker.temporary.check_send(dest)


# --------------------------------------------------------------------------- STOMP session


def frame(command: str, **headers: str) -> bytes:
    return serialize_frame(command, [(k.replace("_", "-"), v) for k, v in headers.items()], b"hi", "1.2",
                           content_length=False)


def connected(broker):
    session, transport = new_session(broker)
    session.data_received(serialize_frame("CONNECT", [("accept-version", "1.2"), ("host", "h")], b"", "1.2",
                                          content_length=False))
    return session, transport


def messages(transport):
    return [f for f in server_frames(transport.data) if f.command == "MESSAGE"]


def test_reply_to_temp_queue_reaches_the_receiver_in_remote_form_and_the_reply_comes_back():
    broker = Broker()
    requester, req_out = connected(broker)
    responder, resp_out = connected(broker)
    service = f"/queue/svc.{uuid.uuid4().hex}"
    responder.data_received(frame("SUBSCRIBE", id="s", destination=service))
    requester.data_received(frame("SUBSCRIBE", id="r", destination="/temp-queue/replies"))
    requester.data_received(frame("SEND", destination=service, reply_to="/temp-queue/replies"))
    (request,) = messages(resp_out)
    reply_to = request.get("reply-to")
    assert reply_to.startswith("/remote-temp-queue/ID:")
    responder.data_received(frame("SEND", destination=reply_to, receipt="ok"))
    assert not resp_out.closed
    (reply,) = messages(req_out)
    # the owner sees its temporary queue under the name it gave it
    assert reply.get("destination") == "/temp-queue/replies"


def test_the_same_temp_name_on_two_connections_is_two_destinations():
    broker = Broker()
    a, a_out = connected(broker)
    b, b_out = connected(broker)
    a.data_received(frame("SUBSCRIBE", id="1", destination="/temp-queue/x"))
    b.data_received(frame("SUBSCRIBE", id="1", destination="/temp-queue/x"))
    a.data_received(frame("SEND", destination="/temp-queue/x"))
    assert len(messages(a_out)) == 1 and messages(b_out) == []


def test_send_to_a_deleted_temp_queue_gets_an_error_frame():
    broker = Broker()
    owner, _ = connected(broker)
    sender, out = connected(broker)
    owner.data_received(frame("SEND", destination="/queue/q", reply_to="/temp-queue/gone"))
    dest = owner.connection.temporary[0]
    owner.connection_lost()
    sender.data_received(frame("SEND", destination=f"/remote-temp-queue/{dest.name}", receipt="r"))
    (error,) = [f for f in server_frames(out.data) if f.command == "ERROR"]
    assert "does not exist" in error.get("message") and out.closed


def test_another_client_may_not_subscribe_to_a_temp_queue():
    broker = Broker()
    owner, _ = connected(broker)
    thief, out = connected(broker)
    owner.data_received(frame("SUBSCRIBE", id="1", destination="/temp-queue/mine"))
    dest = owner.connection.temporary[0]
    thief.data_received(frame("SUBSCRIBE", id="1", destination=f"/remote-temp-queue/{dest.name}"))
    (error,) = [f for f in server_frames(out.data) if f.command == "ERROR"]
    assert "only the connection that created it" in error.get("message")


# --------------------------------------------------------------------------- end to end (stomp.py)


def test_request_reply_over_a_temp_queue_with_stomp_py(broker, stomp_client):
    requester = stomp_client(broker.address)
    responder = stomp_client(broker.address)
    service = f"/queue/svc.{uuid.uuid4().hex}"
    responder.subscribe(service, "svc")
    requester.subscribe("/temp-queue/answers", "answers")
    requester.send(service, "question", reply_to="/temp-queue/answers", correlation_id="c1")
    request = responder.listener.get()
    responder.send(request.headers["reply-to"], "answer", correlation_id=request.headers["correlation-id"])
    reply = requester.listener.get()
    assert (reply.body, reply.headers["correlation-id"]) == ("answer", "c1")
    assert reply.headers["destination"] == "/temp-queue/answers"
