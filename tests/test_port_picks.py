"""The machine's record of picked listening ports (machinery/port_picks.py):
a port one brokerconf process picked is not handed to another until its reservation ends."""

from __future__ import annotations

import json
import multiprocessing
import time

import pytest

from machinery import port_picks, process


@pytest.fixture(autouse=True)
def own_record(tmp_path, monkeypatch):
    monkeypatch.setattr(port_picks, "RECORD", tmp_path / "picks.json")
    monkeypatch.setattr(port_picks, "LOCK", tmp_path / "picks.lock")
    return tmp_path / "picks.json"


def test_a_port_picked_once_is_not_picked_again_while_its_broker_has_not_bound_it(monkeypatch):
    # both calls draw the same candidates, as two workers' random draws can overlap; the ports of
    # the first call are closed again (the broker binds them later), so only the record tells
    candidates = list(range(23000, 23400))
    monkeypatch.setattr(process._pick, "sample", lambda population, k: list(candidates))
    first = process.free_ports(3)
    second = process.free_ports(3)
    assert not set(first) & set(second), (first, second)


def test_a_reservation_of_another_process_is_respected_until_it_ends(own_record):
    now = time.time()
    own_record.write_text(json.dumps({"24001": now + 60, "24002": now - 1}))
    picked = port_picks.pick_unreserved([24001, 24002, 24003], 2, lambda port: True)
    assert picked == [24002, 24003]
    record = json.loads(own_record.read_text())
    assert set(record) == {"24001", "24002", "24003"}, "the picks are recorded, the live reservation kept"


def test_expired_reservations_leave_the_record():
    old = time.time() - 1
    port_picks.RECORD.write_text(json.dumps({str(p): old for p in range(25000, 25100)}))
    port_picks.pick_unreserved([26000], 1, lambda port: True)
    assert set(json.loads(port_picks.RECORD.read_text())) == {"26000"}


def test_an_unreadable_record_counts_as_empty(own_record):
    own_record.write_text('{"24001": ')
    assert port_picks.pick_unreserved([24001], 1, lambda port: True) == [24001]


def test_a_port_that_does_not_bind_is_not_picked_nor_reserved():
    assert port_picks.pick_unreserved([27001, 27002], 2, lambda port: port != 27001) == [27002]
    assert set(json.loads(port_picks.RECORD.read_text())) == {"27002"}


def _pick_in_child(record: str, lock: str, queue) -> None:
    from pathlib import Path
    port_picks.RECORD, port_picks.LOCK = Path(record), Path(lock)
    queue.put(port_picks.pick_unreserved(range(28000, 28100), 5, lambda port: True))


def test_processes_picking_at_once_get_distinct_ports(own_record, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    children = [ctx.Process(target=_pick_in_child, args=(str(own_record), str(tmp_path / "picks.lock"), queue))
                for _ in range(4)]
    for child in children:
        child.start()
    try:
        picks = [queue.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(timeout=30)
    everything = [port for ports in picks for port in ports]
    assert len(everything) == 20 and len(set(everything)) == 20, picks
