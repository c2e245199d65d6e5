"""always_sync_send on the reference broker's bridge (NOB-SYNC-1; ActiveMQ "Networks of Brokers",
NetworkConnector Properties, alwaysSyncSend): which forwards ask the peer for a receipt."""

from reference_broker.cluster.bridge import forwarded_with_receipt, send_headers
from reference_broker.cluster.network_config import NetworkConnectorConfig
from reference_broker.engine.message import Message


def _message(persistent: bool) -> Message:
    return Message(message_id="m1", destination="queue://Q", body=b"x", persistent=persistent)


def test_persistent_messages_always_ask_for_a_receipt():
    for sync in (False, True):
        config = NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)", always_sync_send=sync)
        assert forwarded_with_receipt(_message(True), config)


def test_non_persistent_messages_ask_for_a_receipt_only_with_always_sync_send():
    default = NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)")
    sync = NetworkConnectorConfig(uri="static:(tcp://127.0.0.1:1)", always_sync_send=True)
    assert not default.always_sync_send  # the table's default
    assert not forwarded_with_receipt(_message(False), default)
    assert forwarded_with_receipt(_message(False), sync)


def test_one_way_send_has_no_receipt_header():
    one_way = dict(send_headers(_message(False), "A", None))
    with_receipt = dict(send_headers(_message(False), "A", "fwd-1"))
    assert "receipt" not in one_way
    assert with_receipt["receipt"] == "fwd-1"
    assert one_way["persistent"] == "false"
