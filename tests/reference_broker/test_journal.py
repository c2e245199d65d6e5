"""The message stores: the journal's on-disk durability, recovery, compaction and locking."""

from __future__ import annotations

import ast
import dataclasses
import logging
import math
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from reference_broker.engine.message import Message
from reference_broker.store import journal as journal_mod
from reference_broker.store.base import MessageStore, RecoveredState, StoreError, SyncPolicy
from reference_broker.store.journal import (
    JournalCorruptError,
    JournalDamagedError,
    JournalLockedError,
    JournalStore,
    segment_name,
)
from reference_broker.store.memory import MemoryStore

REPO = Path(__file__).resolve().parents[2]
STORE_DIR = REPO / "reference_broker" / "store"
HEADER = 20  # segment header bytes
FRAME = struct.Struct("<IIB")  # record frame: payload length, CRC32, type


# --- helpers ----------------------------------------------------------------------------------


def snap(m: Message) -> tuple:
    """Every field of a message, with property value types (True != 1, 1.0 != 1, -0.0 != 0.0)."""
    out = []
    for f in dataclasses.fields(Message):
        if not f.compare:  # caches such as wire_cache: not part of the message, not persisted
            continue
        value = getattr(m, f.name)
        if f.name == "properties":
            value = [(k, type(v).__name__, repr(v)) for k, v in value.items()]
        out.append((f.name, type(value).__name__, value))
    return tuple(out)


def state_snap(state: RecoveredState) -> dict:
    return {key: [snap(m) for m in msgs] for key, msgs in state.messages.items()}


def msg(mid: str, dest: str = "queue://ORDERS", body: bytes = b"payload", **kw) -> Message:
    return Message(message_id=mid, destination=dest, body=body, persistent=True, **kw)


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("journal-*.log"))


def frames(path: Path) -> list[tuple[int, int]]:
    """(offset, size) of every complete record frame in a segment file."""
    data = path.read_bytes()
    out, pos = [], HEADER
    while pos + FRAME.size <= len(data):
        n, _crc, _type = FRAME.unpack_from(data, pos)
        if pos + FRAME.size + n > len(data):
            break
        out.append((pos, FRAME.size + n))
        pos += FRAME.size + n
    return out


def write_messages(directory: Path, count: int, key: str = "queue://ORDERS", **kw) -> None:
    with JournalStore(directory, sync=SyncPolicy.NEVER, **kw) as store:
        store.recover()
        for i in range(count):
            store.add(key, msg(f"m{i}", body=bytes([i % 256]) * 40))
            store.flush()


def recovered_ids(directory: Path, key: str = "queue://ORDERS") -> list[str]:
    with JournalStore(directory) as store:
        return [m.message_id for m in store.recover().messages.get(key, [])]


# --- round trip -------------------------------------------------------------------------------


def full_message(mid: str) -> Message:
    return Message(
        message_id=mid,
        destination="topic://PRICES.ÏBM",
        body=b"\x00binary\x00\xff\xfe" + bytes(range(256)) + b"\x00",
        properties={
            "str": "héllo wörld ✓",
            "empty": "",
            "int": 42,
            "neg": -7,
            "zero": 0,
            "big": 2**63 - 1,
            "huge": 2**80,
            "float": 1.5,
            "whole_float": 3.0,
            "neg_zero": -0.0,
            "tiny": 5e-324,
            "inf": math.inf,
            "ninf": -math.inf,
            "true": True,
            "false": False,
            "ключ": "значение",
            "emoji 🚀": "nul\x00inside",
            "": "empty key",
        },
        persistent=True,
        priority=9,
        timestamp=1_700_000_000_123,
        expiration=1_800_000_000_456,
        correlation_id="corr-🎯",
        reply_to="queue://REPLIES",
        type="OrderCreated",
        group_id="group-A",
        group_seq=17,
        content_type="application/octet-stream",
        producer_id="conn-42",
    )


def test_codec_covers_every_message_field():
    # If this fails, Message grew a field: teach encode_message/decode_message about it.
    assert {f.name for f in dataclasses.fields(Message) if f.compare} == journal_mod._ENCODED_FIELDS


def test_message_encoding_round_trips_exactly_and_deterministically():
    for m in (full_message("ID:1"), Message(message_id="", destination="queue://Q")):
        data = journal_mod.encode_message(m)
        assert data == journal_mod.encode_message(m)
        back = journal_mod.decode_message(data, 0, len(data))
        assert snap(back) == snap(m)
    nan = journal_mod.encode_message(msg("n", properties={"nan": math.nan}))
    value = journal_mod.decode_message(nan, 0, len(nan)).properties["nan"]
    assert isinstance(value, float) and math.isnan(value)


def test_round_trip_live_messages_in_order(tmp_path):
    with JournalStore(tmp_path) as store:
        assert store.recover() == RecoveredState({}, {}, {})
        for i in range(10):
            store.add("queue://ORDERS", full_message(f"ID:o-{i}"))
        store.add("queue://ÜNICODE", msg("u-1", body=b"\x00"))
        store.add("queue://ÜNICODE", msg("u-2", body=b""))
        store.add("durable://client:sub", msg("d-1", dest="topic://T"))
        store.add("queue://GONE", msg("g-1"))
        store.flush()
        for i in (0, 3, 9):
            store.remove("queue://ORDERS", f"ID:o-{i}")
        store.remove("queue://GONE", "g-1")
        store.remove("queue://ORDERS", "no-such-id")  # ignored
        store.remove("queue://NO-SUCH-KEY", "ID:o-1")  # ignored
        store.update_redelivery("queue://ORDERS", "ID:o-4", 2)
        store.update_redelivery("queue://ORDERS", "ID:o-5", 1)
        store.update_redelivery("queue://ORDERS", "ID:o-5", 3)
        store.update_redelivery("queue://ORDERS", "ID:o-0", 5)  # removed: ignored
        store.add_durable_subscription("durable://client:sub", {"selector": "a > 1", "n": 1})
        store.add_durable_subscription("durable://client:gone", {"selector": None})
        store.add("durable://client:gone", msg("dg-1", dest="topic://T"))
        store.remove_durable_subscription("durable://client:gone")  # drops its message too
        store.flush()
        expected = {
            "queue://ORDERS": [snap(full_message(f"ID:o-{i}")) for i in (1, 2, 4, 5, 6, 7, 8)],
            "queue://ÜNICODE": [snap(msg("u-1", body=b"\x00")), snap(msg("u-2", body=b""))],
            "durable://client:sub": [snap(msg("d-1", dest="topic://T"))],
        }
        assert state_snap(store.recover()) == expected  # the live state before a restart

    with JournalStore(tmp_path) as store:
        state = store.recover()
        assert state_snap(state) == expected
        assert list(state.messages) == list(expected)
        assert state.durable_subscriptions == {
            "durable://client:sub": {"selector": "a > 1", "n": 1}}
        assert state.redelivery_counts == {
            ("queue://ORDERS", "ID:o-4"): 2, ("queue://ORDERS", "ID:o-5"): 3}
        props = state.messages["queue://ORDERS"][0].properties
        assert type(props["true"]) is bool and type(props["int"]) is int
        assert type(props["whole_float"]) is float and math.copysign(1, props["neg_zero"]) < 0
        assert store.stats()["messages"] == 10


def test_re_adding_a_live_id_replaces_it_in_place(tmp_path):
    with JournalStore(tmp_path) as store:
        store.recover()
        for mid in ("a", "b", "c"):
            store.add("queue://Q", msg(mid))
        store.update_redelivery("queue://Q", "a", 2)
        store.add("queue://Q", msg("a", body=b"new"))  # same position, count reset
        store.remove("queue://Q", "b")
        store.add("queue://Q", msg("b", body=b"again"))  # removed then re-added: at the end
    with JournalStore(tmp_path) as store:
        state = store.recover()
    assert [(m.message_id, m.body) for m in state.messages["queue://Q"]] == [
        ("a", b"new"), ("c", b"payload"), ("b", b"again")]
    assert state.redelivery_counts == {}


# --- group commit and the sync policies ------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingOs:
    """Stands in for the journal module's `os`, counting write() calls per fd."""

    def __init__(self) -> None:
        self.writes: list[int] = []

    def write(self, fd, data):
        self.writes.append(fd)
        return os.write(fd, data)

    def __getattr__(self, name):
        return getattr(os, name)


def test_one_write_per_flush_and_no_syscalls_when_idle(tmp_path, monkeypatch):
    counting = CountingOs()
    monkeypatch.setattr(journal_mod, "os", counting)
    with JournalStore(tmp_path, sync=SyncPolicy.NEVER, segment_size=2000) as store:
        store.recover()
        for batch in range(5):
            for i in range(100):
                store.add("queue://Q", msg(f"{batch}-{i}"))
            store.remove("queue://Q", f"{batch}-0")
            store.flush()
            assert len(counting.writes) == batch + 1
        store.flush()
        store.flush()
        assert len(counting.writes) == 5
        assert store.stats()["writes"] == 5
        assert store.stats()["segments"] == 5  # each batch overshot segment_size: rollover
    assert len(recovered_ids(tmp_path, "queue://Q")) == 5 * 99


def test_sync_always_fsyncs_every_flush(tmp_path):
    with JournalStore(tmp_path, sync=SyncPolicy.ALWAYS) as store:
        store.recover()
        for i in range(3):
            store.add("queue://Q", msg(str(i)))
            store.flush()
            assert store.stats()["syncs"] == i + 1
        store.flush()  # nothing pending: no sync
        assert store.stats()["syncs"] == 3


def test_sync_interval_fsyncs_when_interval_elapsed(tmp_path):
    clock = FakeClock()
    store = JournalStore(tmp_path, sync=SyncPolicy.INTERVAL, sync_interval_ms=1000, clock=clock)
    store.recover()
    store.add("queue://Q", msg("1"))
    store.flush()
    assert store.stats()["syncs"] == 0
    assert recovered_ids_while_open(tmp_path) == ["1"]  # written: in the page cache already
    clock.now += 0.6
    store.add("queue://Q", msg("2"))
    store.flush()
    assert store.stats()["syncs"] == 0
    clock.now += 0.5
    store.add("queue://Q", msg("3"))
    store.flush()
    assert store.stats()["syncs"] == 1
    store.add("queue://Q", msg("4"))
    store.flush()
    assert store.stats()["syncs"] == 1
    clock.now += 1.0
    store.flush()  # nothing new to write, but unsynced data and the interval has passed
    assert store.stats()["syncs"] == 2
    clock.now += 5.0
    store.flush()  # nothing unsynced: nothing to do
    assert store.stats()["syncs"] == 2
    store.add("queue://Q", msg("5"))
    store.flush()  # interval long past: synced at once
    assert store.stats()["syncs"] == 3
    store.add("queue://Q", msg("6"))
    store.flush()
    store.close()  # a clean shutdown syncs what is left
    assert store.stats()["syncs"] == 4


def recovered_ids_while_open(directory: Path) -> list[str]:
    """Read the journal as another process would see it, without taking the lock."""
    copy = directory.parent / (directory.name + "-copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("lock"))
    try:
        return recovered_ids(copy, "queue://Q")
    finally:
        shutil.rmtree(copy)


def test_sync_never_does_not_fsync(tmp_path):
    with JournalStore(tmp_path, sync=SyncPolicy.NEVER) as store:
        store.recover()
        for i in range(3):
            store.add("queue://Q", msg(str(i)))
            store.flush()
    assert store.stats()["syncs"] == 0
    assert recovered_ids(tmp_path, "queue://Q") == ["0", "1", "2"]


# --- crash safety -----------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    from reference_broker.engine.message import Message
    from reference_broker.store.journal import JournalStore
    store = JournalStore(sys.argv[1], sync=sys.argv[2], sync_interval_ms=20,
                         segment_size=8 * 1024)
    store.recover()
    i = 0
    while True:
        store.add("queue://CRASH", Message(message_id=f"m{i}", destination="queue://CRASH",
                  body=bytes([i % 256]) * (i % 300), properties={"i": i}, persistent=True))
        if i >= 2 and (i - 2) % 5:
            store.remove("queue://CRASH", f"m{i - 2}")
        store.flush()
        sys.stdout.write(f"flushed {i}\\n")
        sys.stdout.flush()
        i += 1
""")


def crash_model_states(upto: int):
    """(step, live ids) after every record the child writes, in order: each step i writes
    ADD m<i> and, unless i - 2 is a multiple of 5, REMOVE m<i-2>, then flushes."""
    live: dict[int, None] = {}
    for i in range(upto + 1):
        live[i] = None
        if i >= 2 and (i - 2) % 5:
            yield i - 1, list(live)  # ADD written, REMOVE not: step i is not complete
            del live[i - 2]
        yield i, list(live)


@pytest.mark.parametrize("policy,reports", [(SyncPolicy.ALWAYS, 150), (SyncPolicy.INTERVAL, 1500)])
def test_sigkill_loses_no_flushed_message(tmp_path, policy, reports):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), policy.value, str(REPO)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = -1
    try:
        while last < reports:
            line = proc.stdout.readline()
            assert line.startswith("flushed "), (line, proc.stderr.read())
            last = int(line.split()[1])
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -9

    with JournalStore(tmp_path) as store:
        state = store.recover()
        got = state.messages["queue://CRASH"]
        ids = [int(m.message_id[1:]) for m in got]
        for m, i in zip(got, ids):
            assert m.body == bytes([i % 256]) * (i % 300) and m.properties == {"i": i}
        # The journal holds exactly the state after some prefix of the records the child
        # wrote, and that prefix includes every record of every flush it reported.
        assert any(ids == live for step, live in crash_model_states(max(ids) + 2)
                   if step >= last)
        assert segments(tmp_path)[0].name != segment_name(1)  # the child compacted too
        # the recovered journal accepts new writes
        store.add("queue://CRASH", msg("after"))
    with JournalStore(tmp_path) as store:
        assert store.recover().messages["queue://CRASH"][-1].message_id == "after"


# --- torn tails and corruption ----------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 5, 9, 10, 30])
def test_torn_last_record_is_truncated(tmp_path, caplog, cut):
    write_messages(tmp_path, 10)
    (seg,) = segments(tmp_path)
    offset, size = frames(seg)[-1]
    assert offset + size == seg.stat().st_size
    os.truncate(seg, offset + size - cut if cut < size else offset + 1)
    with caplog.at_level(logging.WARNING, logger="reference_broker.store"):
        assert recovered_ids(tmp_path) == [f"m{i}" for i in range(9)]
    assert any("torn" in r.getMessage() and r.name == "reference_broker.store"
               for r in caplog.records)
    assert seg.stat().st_size == offset  # the torn bytes are gone for good
    with JournalStore(tmp_path) as store:  # and appending after the cut works
        store.recover()
        store.add("queue://ORDERS", msg("new"))
    assert recovered_ids(tmp_path) == [f"m{i}" for i in range(9)] + ["new"]


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 4096, b"\xde\xad\xbe\xef" * 3, b"\x01", b"\x05" * 100])
def test_garbage_after_the_last_record_is_truncated(tmp_path, caplog, garbage):
    write_messages(tmp_path, 10)
    (seg,) = segments(tmp_path)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING, logger="reference_broker.store"):
        assert recovered_ids(tmp_path) == [f"m{i}" for i in range(10)]
    assert seg.stat().st_size == size
    assert any("torn" in r.getMessage() for r in caplog.records)


def test_copied_record_in_garbage_is_not_mistaken_for_data(tmp_path):
    # A valid frame copied elsewhere (e.g. inside a torn body) does not validate: the CRC
    # covers the record's position, so the tail is still judged torn, not corrupt.
    write_messages(tmp_path, 3)
    (seg,) = segments(tmp_path)
    data = seg.read_bytes()
    offset, size = frames(seg)[0]
    with open(seg, "ab") as f:
        f.write(b"\xff" * 3 + data[offset:offset + size])
    assert recovered_ids(tmp_path) == ["m0", "m1", "m2"]


def test_corruption_in_the_middle_raises(tmp_path):
    write_messages(tmp_path, 10)
    (seg,) = segments(tmp_path)
    offset, size = frames(seg)[3]
    data = bytearray(seg.read_bytes())
    data[offset + size - 2] ^= 0x40  # flip a bit in record 3's body
    seg.write_bytes(bytes(data))
    store = JournalStore(tmp_path)
    try:
        with pytest.raises(JournalCorruptError) as excinfo:
            store.recover()
        with pytest.raises(JournalCorruptError):  # still refuses, and nothing was replayed twice
            store.add("queue://ORDERS", msg("new"))
        assert store.stats()["messages"] == 0
    finally:
        store.close()
    assert excinfo.value.offset == offset
    assert excinfo.value.path == str(seg)
    assert seg.name in str(excinfo.value) and f"offset {offset}" in str(excinfo.value)
    assert seg.read_bytes() == bytes(data)  # nothing was "repaired"


def test_corrupt_length_in_the_middle_raises(tmp_path):
    write_messages(tmp_path, 10)
    (seg,) = segments(tmp_path)
    offset, _ = frames(seg)[2]
    data = bytearray(seg.read_bytes())
    struct.pack_into("<I", data, offset, 10_000_000)  # length now points past the end
    seg.write_bytes(bytes(data))
    store = JournalStore(tmp_path)
    with pytest.raises(JournalCorruptError, match=f"offset {offset}"):
        store.recover()
    store.close()


def test_torn_record_at_the_end_of_an_earlier_segment_raises(tmp_path):
    write_messages(tmp_path, 12, segment_size=200)
    segs = segments(tmp_path)
    assert len(segs) > 2
    offset, size = frames(segs[1])[-1]
    os.truncate(segs[1], offset + size - 1)
    store = JournalStore(tmp_path)
    with pytest.raises(JournalCorruptError, match=segs[1].name):
        store.recover()
    store.close()


def test_missing_segment_in_the_middle_raises(tmp_path):
    write_messages(tmp_path, 12, segment_size=200)
    segs = segments(tmp_path)
    segs[1].unlink()
    store = JournalStore(tmp_path)
    with pytest.raises(JournalCorruptError, match="missing"):
        store.recover()
    store.close()


def test_crash_while_creating_a_segment_leaves_only_a_temporary_file(tmp_path, monkeypatch, caplog):
    """A new segment is written under a temporary name and renamed once its header and first
    batch are in it, so a crash before the rename leaves journal-N.log.tmp (whose data no
    flush had confirmed), which recovery deletes, and never a short journal-N.log."""
    write_messages(tmp_path, 5)

    def crash(self, *args):
        raise SimulatedCrash("before the rename")

    store = JournalStore(tmp_path, sync=SyncPolicy.NEVER, segment_size=1)
    store.recover()
    monkeypatch.setattr(JournalStore, "_name_new_segment", crash)
    store.add("queue://ORDERS", msg("unconfirmed"))
    with pytest.raises(SimulatedCrash):
        store.flush()
    with pytest.raises(SimulatedCrash):  # the process "dies" here: close cannot finish either
        store.close()
    monkeypatch.undo()
    assert [p.name for p in segments(tmp_path)] == [segment_name(1)]
    assert (tmp_path / (segment_name(2) + ".tmp")).stat().st_size > HEADER
    with caplog.at_level(logging.WARNING, logger="reference_broker.store"):
        assert recovered_ids(tmp_path) == [f"m{i}" for i in range(5)]
    assert not list(tmp_path.glob("*.tmp"))
    assert any("unfinished segment" in r.getMessage() for r in caplog.records)
    with JournalStore(tmp_path, segment_size=1) as store:  # roll over into segment 2 again
        store.recover()
        store.add("queue://ORDERS", msg("x"))
    assert recovered_ids(tmp_path) == [f"m{i}" for i in range(5)] + ["x"]
    assert [p.name for p in segments(tmp_path)] == [segment_name(1), segment_name(2)]


@pytest.mark.parametrize("sync", list(SyncPolicy))
def test_new_segments_appear_with_their_header(tmp_path, monkeypatch, sync):
    """Whenever a segment file has its name, it holds at least its header: checked at every
    rename the journal makes."""
    seen: list[tuple[str, int]] = []
    real_rename = os.rename

    def rename(src, dst):
        real_rename(src, dst)
        seen.append((Path(dst).name, Path(dst).stat().st_size))

    monkeypatch.setattr(journal_mod.os, "rename", rename)
    write_messages(tmp_path, 12, segment_size=200)
    with JournalStore(tmp_path, sync=sync, segment_size=200) as store:
        store.recover()
        for i in range(12):
            store.add("queue://ORDERS", msg(f"n{i}", body=b"x" * 40))
            store.flush()
    assert len([name for name, _ in seen if name.startswith("journal-")]) > 4
    assert all(size > HEADER for _, size in seen), seen


def test_journal_whose_only_segment_is_zero_bytes_is_refused_not_emptied(tmp_path):
    """Issue 20 item 8: 500 confirmed messages, then the only segment is cut to zero bytes.
    Start-up must stop and say what it found, and leave the file alone."""
    write_messages(tmp_path, 500)
    (seg,) = segments(tmp_path)
    os.truncate(seg, 0)
    store = JournalStore(tmp_path)
    try:
        with pytest.raises(JournalDamagedError) as info:
            store.recover()
        assert isinstance(info.value, JournalCorruptError)  # one kind for callers to catch
        with pytest.raises(JournalCorruptError):
            store.add("queue://ORDERS", msg("new"))
    finally:
        store.close()
    text = str(info.value)
    assert info.value.path == str(seg) and seg.name in text
    assert "is empty (0 bytes)" in text and "store.discard_damaged" in text, text
    assert seg.exists() and seg.stat().st_size == 0  # nothing was "repaired"
    assert segments(tmp_path) == [seg]


@pytest.mark.parametrize("keep", [1, HEADER - 1])
def test_newest_segment_cut_inside_its_header_is_refused(tmp_path, keep):
    write_messages(tmp_path, 12, segment_size=200)
    newest = segments(tmp_path)[-1]
    assert newest.name != segment_name(1)
    os.truncate(newest, keep)
    store = JournalStore(tmp_path)
    with pytest.raises(JournalDamagedError, match=f"segment header incomplete \\({keep} bytes\\)") as info:
        store.recover()
    store.close()
    assert info.value.path == str(newest) and newest.stat().st_size == keep


def test_discard_damaged_deletes_the_damaged_segment_and_says_so(tmp_path, caplog):
    write_messages(tmp_path, 12, segment_size=200)
    segs = segments(tmp_path)
    # what the older segments hold on their own
    reference = tmp_path.parent / (tmp_path.name + "-older")
    shutil.copytree(tmp_path, reference, ignore=shutil.ignore_patterns("lock"))
    (reference / segs[-1].name).unlink()
    expected = recovered_ids(reference)
    assert 0 < len(expected) < 12
    os.truncate(segs[-1], 0)
    with caplog.at_level(logging.WARNING, logger="reference_broker.store"):
        with JournalStore(tmp_path, discard_damaged=True) as store:
            assert [m.message_id for m in store.recover().messages["queue://ORDERS"]] == expected
            store.add("queue://ORDERS", msg("after"))
    assert not segs[-1].exists() or segs[-1].stat().st_size > HEADER  # deleted, then maybe reused
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(segs[-1].name in m and "discard_damaged" in m for m in errors), errors
    assert recovered_ids(tmp_path) == expected + ["after"]


def test_discard_damaged_on_the_only_segment_starts_empty(tmp_path):
    write_messages(tmp_path, 20)
    (seg,) = segments(tmp_path)
    os.truncate(seg, 0)
    with JournalStore(tmp_path, discard_damaged=True) as store:
        assert store.recover().messages == {}


def test_discard_damaged_still_refuses_a_bad_header_with_records_after_it(tmp_path):
    """discard_damaged covers a segment with nothing recoverable in it; a garbled header with
    valid records after it is corruption, refused either way."""
    write_messages(tmp_path, 12, segment_size=200)
    newest = segments(tmp_path)[-1]
    data = bytearray(newest.read_bytes())
    data[0] ^= 0xFF  # the magic
    newest.write_bytes(bytes(data))
    store = JournalStore(tmp_path, discard_damaged=True)
    with pytest.raises(JournalCorruptError, match="valid records follow"):
        store.recover()
    store.close()


# --- rollover and compaction ------------------------------------------------------------------


def churn(store: JournalStore, model: dict[str, list[str]], rounds: int) -> None:
    """Add to three queues, removing most of what was added, flushing in batches."""
    n = sum(len(v) for v in model.values())
    for r in range(rounds):
        for key in ("queue://A", "queue://B", "durable://c:s"):
            for _ in range(4):
                mid = f"{key[-1]}{n}"
                n += 1
                store.add(key, msg(mid, body=bytes(60)))
                model.setdefault(key, []).append(mid)
            while len(model[key]) > 3 + r % 4:
                store.remove(key, model[key].pop(0))
        store.flush()


def test_rollover_and_compaction_keep_the_live_set(tmp_path):
    model: dict[str, list[str]] = {}
    with JournalStore(tmp_path, sync=SyncPolicy.NEVER, segment_size=1024) as store:
        store.recover()
        store.add_durable_subscription("durable://c:s", {"selector": "x = 1"})
        churn(store, model, 60)
        stats = store.stats()
        assert stats["compactions"] >= 3
        assert stats["segments"] == len(segments(tmp_path)) <= 2
        assert stats["bytes"] == sum(p.stat().st_size for p in segments(tmp_path))
        assert stats["bytes"] < 8 * 1024  # while about 100 KiB were written in all
        assert segments(tmp_path)[0].name != segment_name(1)  # old segments deleted
        assert not list(tmp_path.glob("*.tmp"))
        live = {k: [m.message_id for m in v] for k, v in store.recover().messages.items()}
        assert live == model
    with JournalStore(tmp_path) as store:
        state = store.recover()
        assert {k: [m.message_id for m in v] for k, v in state.messages.items()} == model
        assert state.durable_subscriptions == {"durable://c:s": {"selector": "x = 1"}}
        assert store.stats()["bytes"] == sum(p.stat().st_size for p in segments(tmp_path))


def test_explicit_compaction_keeps_redelivery_counts_and_subscriptions(tmp_path):
    with JournalStore(tmp_path, segment_size=300) as store:
        store.recover()
        store.add_durable_subscription("durable://c:s", {"n": [1, 2]})
        for i in range(10):
            store.add("queue://Q", msg(str(i)))
        store.update_redelivery("queue://Q", "4", 7)
        store.remove("queue://Q", "0")
        store.compact()
        assert len(segments(tmp_path)) == 1
        before = state_snap(store.recover())
    with JournalStore(tmp_path) as store:
        state = store.recover()
        assert state_snap(state) == before
        assert state.redelivery_counts == {("queue://Q", "4"): 7}
        assert state.durable_subscriptions == {"durable://c:s": {"n": [1, 2]}}


class SimulatedCrash(Exception):
    pass


@pytest.mark.parametrize("step", ["_install_compacted", "_delete_segments"])
def test_crash_during_compaction_recovers_exactly(tmp_path, monkeypatch, step):
    def crash(self, *args):
        raise SimulatedCrash(step)

    directory = tmp_path / "journal"
    model: dict[str, list[str]] = {}
    store = JournalStore(directory, sync=SyncPolicy.NEVER, segment_size=1024)
    store.recover()
    monkeypatch.setattr(JournalStore, step, crash)
    with pytest.raises(SimulatedCrash):
        for _ in range(100):
            churn(store, model, 1)
    # What the disk holds at the moment of the crash (lock file aside):
    image = tmp_path / "image"
    shutil.copytree(directory, image, ignore=shutil.ignore_patterns("lock"))
    store.close()
    monkeypatch.undo()
    segs_at_crash = segments(image)
    assert len(segs_at_crash) > 1
    if step == "_install_compacted":
        assert len(list(image.glob("*.tmp"))) == 1  # compacted output not yet renamed
    else:
        assert not list(image.glob("*.tmp"))  # renamed, old segments not yet deleted
    with JournalStore(image) as recovered:
        state = recovered.recover()
        assert {k: [m.message_id for m in v] for k, v in state.messages.items()} == model
    remaining = segments(image)
    assert not list(image.glob("*.tmp"))
    if step == "_delete_segments":
        assert remaining == [segs_at_crash[-1]]  # the compacted segment superseded the rest
    with JournalStore(image) as again:  # and recovery is stable
        state = again.recover()
        assert {k: [m.message_id for m in v] for k, v in state.messages.items()} == model


# --- locking, lifecycle, the memory store -----------------------------------------------------


def test_second_opener_gets_journal_locked_error(tmp_path):
    first = JournalStore(tmp_path / "j")
    with pytest.raises(JournalLockedError, match=str(tmp_path / "j")):
        JournalStore(tmp_path / "j")
    first.close()
    second = JournalStore(tmp_path / "j")
    second.recover()
    second.close()


def test_closed_store_refuses_writes(tmp_path):
    store = JournalStore(tmp_path)
    store.recover()
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        store.add("queue://Q", msg("1"))


def test_bad_property_value_is_rejected_at_add(tmp_path):
    with JournalStore(tmp_path) as store:
        store.recover()
        with pytest.raises(TypeError):
            store.add("queue://Q", msg("1", properties={"b": b"bytes"}))
        store.add("queue://Q", msg("2"))
    assert recovered_ids(tmp_path, "queue://Q") == ["2"]


def test_memory_store_persists_nothing(tmp_path):
    store = MemoryStore()
    assert isinstance(store, MessageStore)
    assert isinstance(JournalStore(tmp_path), MessageStore)
    store.add("queue://Q", msg("1"))
    store.add_durable_subscription("durable://c:s", {})
    store.update_redelivery("queue://Q", "1", 1)
    store.flush()
    assert store.recover() == RecoveredState({}, {}, {})
    assert store.stats()["kind"] == "memory"
    store.close()


def test_store_imports_only_message_from_the_engine():
    for path in STORE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("reference_broker.engine"):
                    assert name == "reference_broker.engine.message", (path, name)


# --- model-based ------------------------------------------------------------------------------

KEYS = ["queue://A", "queue://B", "durable://c:s"]


class JournalMachine(RuleBasedStateMachine):
    """Random add / remove / redeliver / subscribe / flush / reopen against a dict model."""

    base: Path  # set per test run

    def __init__(self) -> None:
        super().__init__()
        JournalMachine.runs = getattr(JournalMachine, "runs", 0) + 1
        self.dir = self.base / f"run{JournalMachine.runs}"
        self.store: JournalStore | None = None
        self.model: dict[str, dict[str, tuple]] = {}  # key -> id -> snap, in add order
        self.counts: dict[tuple[str, str], int] = {}
        self.subs: dict[str, dict] = {}

    # compact_ratio 0: many segments, never compacted; 1: compacted at every rollover
    @initialize(segment_size=st.sampled_from([64, 300, 1 << 20]),
                compact_ratio=st.sampled_from([0.0, 0.5, 1.0]))
    def open_store(self, segment_size, compact_ratio):
        self.options = {"segment_size": segment_size, "compact_ratio": compact_ratio}
        self.store = self._open()

    def _open(self) -> JournalStore:
        store = JournalStore(self.dir, sync=SyncPolicy.NEVER, **self.options)
        store.recover()
        return store

    @rule(key=st.sampled_from(KEYS), n=st.integers(0, 12), body=st.binary(max_size=40),
          props=st.dictionaries(st.text(max_size=4),
                                st.one_of(st.booleans(), st.integers(), st.text(max_size=5),
                                          st.floats(allow_nan=False)), max_size=3),
          flush=st.booleans())
    def add(self, key, n, body, props, flush):
        m = msg(f"id{n}", body=body, properties=props)
        self.store.add(key, m)
        if flush:  # like the broker's end-of-batch flush
            self.store.flush()
        self.model.setdefault(key, {})[m.message_id] = snap(m)  # replace keeps position
        self.counts.pop((key, m.message_id), None)

    @rule(key=st.sampled_from(KEYS), n=st.integers(0, 12), flush=st.booleans())
    def remove(self, key, n, flush):
        self.store.remove(key, f"id{n}")
        if flush:
            self.store.flush()
        queue = self.model.get(key, {})
        queue.pop(f"id{n}", None)
        if not queue:
            self.model.pop(key, None)
        self.counts.pop((key, f"id{n}"), None)

    @rule(key=st.sampled_from(KEYS), n=st.integers(0, 12), count=st.integers(0, 5))
    def redeliver(self, key, n, count):
        self.store.update_redelivery(key, f"id{n}", count)
        if f"id{n}" in self.model.get(key, {}):
            if count:
                self.counts[(key, f"id{n}")] = count
            else:
                self.counts.pop((key, f"id{n}"), None)

    @rule(n=st.integers(0, 5))
    def subscribe(self, n):
        self.store.add_durable_subscription("durable://c:s", {"n": n})
        self.subs["durable://c:s"] = {"n": n}

    @rule()
    def unsubscribe(self):
        self.store.remove_durable_subscription("durable://c:s")
        self.subs.pop("durable://c:s", None)
        self.model.pop("durable://c:s", None)
        for k in [k for k in self.counts if k[0] == "durable://c:s"]:
            del self.counts[k]

    @rule()
    def flush(self):
        self.store.flush()

    @rule()
    def reopen(self):
        self.store.close()
        self.store = self._open()
        self.check(self.store.recover())

    def check(self, state: RecoveredState) -> None:
        assert {k: [snap(m) for m in v] for k, v in state.messages.items()} == {
            k: list(v.values()) for k, v in self.model.items()}
        assert state.redelivery_counts == self.counts
        assert state.durable_subscriptions == self.subs

    @invariant()
    def live_state_matches(self):
        if self.store is None:
            return
        self.check(self.store.recover())
        stats = self.store.stats()
        assert stats["messages"] == sum(len(v) for v in self.model.values())

    def teardown(self):
        if self.store is None:
            return
        self.store.close()
        with JournalStore(self.dir) as store:
            self.check(store.recover())


def test_random_operations_match_a_model(tmp_path):
    class Machine(JournalMachine):
        base = tmp_path

    run_state_machine_as_test(Machine, settings=settings(
        max_examples=40, stateful_step_count=40, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow]))


def test_abandoned_journal_drops_later_writes_and_keeps_what_was_flushed(tmp_path):
    """abandon() is what a master that lost the shared store's lock does (reference_broker/ha):
    nothing more reaches the files, and the next opener recovers what was flushed before."""
    first = JournalStore(tmp_path / "j", lock=False)
    first.recover()
    first.add("queue://q", Message(message_id="kept", destination="queue://q", body=b"1"))
    first.flush()
    first.add("queue://q", Message(message_id="unflushed", destination="queue://q", body=b"2"))
    first.abandon()
    first.add("queue://q", Message(message_id="after", destination="queue://q", body=b"3"))
    first.remove("queue://q", "kept")
    first.flush()
    first.close()  # no-op after abandon
    second = JournalStore(tmp_path / "j")
    assert [m.message_id for m in second.recover().messages["queue://q"]] == ["kept"]
    second.close()


def test_lock_false_takes_no_lock(tmp_path):
    guarded = JournalStore(tmp_path / "j", lock=False)
    other = JournalStore(tmp_path / "j")  # the caller's locker guards the directory, not the journal
    other.close()
    guarded.close()
