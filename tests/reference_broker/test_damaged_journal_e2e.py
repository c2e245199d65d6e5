"""The broker with a damaged journal (issue 20 item 8): a journal whose only segment was cut to
zero bytes held 500 receipted messages. The broker must refuse to start and say what it found,
rather than start empty; with `store.discard_damaged = true` the operator accepts the loss."""

from __future__ import annotations

import os

import pytest

from conformance.targets.reference.process import ReferenceStartError
from tests.reference_broker.conftest import RawStomp, assert_broker_works

pytestmark = pytest.mark.timeout(120)

COUNT = 500


def send_receipted(address, dest: str, count: int) -> None:
    with RawStomp(address) as client:
        assert client.connect("1.2").command == "CONNECTED"
        for i in range(count):
            client.send_frame("SEND", [("destination", dest), ("persistent", "true"),
                                       ("receipt", f"r{i}")], f"m{i}".encode())
        for i in range(count):
            frame = client.expect("RECEIPT")
            assert frame.get("receipt-id") == f"r{i}"


def test_broker_refuses_to_start_on_a_zero_byte_journal_segment(tmp_path, broker_process_factory):
    data = tmp_path / "data"
    proc = broker_process_factory(data_dir=data).start()
    send_receipted(proc.stomp_address, "/queue/ORDERS", COUNT)
    assert proc.stop() == 0
    segments = sorted((data / "journal").glob("journal-*.log"))
    assert len(segments) == 1, segments
    (segment,) = segments
    assert segment.stat().st_size > COUNT * 10
    os.truncate(segment, 0)

    with pytest.raises(ReferenceStartError) as info:
        broker_process_factory(data_dir=data).start()
    text = str(info.value)
    assert "exited with 1" in text, text
    assert str(segment) in text and "is empty (0 bytes)" in text, text
    assert "store.discard_damaged" in text, text
    assert segment.exists() and segment.stat().st_size == 0, "the damaged file was left as found"

    # The operator accepts the loss explicitly: the broker starts, empty, and says what it did.
    config = tmp_path / "discard.toml"
    config.write_text("[store]\nkind = \"journal\"\ndiscard_damaged = true\n")
    accepted = broker_process_factory(data_dir=data, config_file=config).start()
    assert segment.name in accepted.log_tail() and "discard_damaged" in accepted.log_tail()
    with RawStomp(accepted.stomp_address) as client:
        client.connect("1.2")
        client.send_frame("SUBSCRIBE", [("id", "s"), ("destination", "/queue/ORDERS"),
                                        ("receipt", "sub")])
        client.expect("RECEIPT")
        client.no_frame(0.5)  # the 500 messages are gone, as the operator agreed
    assert_broker_works(accepted.stomp_address)
