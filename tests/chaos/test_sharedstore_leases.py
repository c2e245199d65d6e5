"""The store server's lease and lock table (machinery/sharedstore/leases.py), on a hand-driven clock."""

import pytest

from machinery.sharedstore.leases import READ, UNLOCK, WRITE, ExpiredSession, LeaseTable, NoLease


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


def table(clock, lease=10.0):
    return LeaseTable(lease=lease, clock=clock)


def test_write_lock_excludes_other_hosts_and_read_locks_share(clock):
    t = table(clock)
    a, b = t.open_session("A").id, t.open_session("B").id
    assert t.set_lock("/lock", (a, 1), WRITE, 0, None) is None
    blocker = t.set_lock("/lock", (b, 1), WRITE, 0, None)
    assert blocker is not None and blocker.owner == (a, 1)
    assert t.set_lock("/lock", (b, 1), READ, 0, 0) is not None
    assert t.set_lock("/other", (b, 1), WRITE, 0, None) is None, "another file is not locked"
    t.set_lock("/lock", (a, 1), UNLOCK, 0, None)
    assert t.set_lock("/r", (a, 1), READ, 0, None) is None
    assert t.set_lock("/r", (b, 1), READ, 0, None) is None, "read locks are shared"
    assert t.set_lock("/r", (b, 1), WRITE, 0, None) is not None


def test_ranges_split_like_fcntl(clock):
    t = table(clock)
    a, b = t.open_session("A").id, t.open_session("B").id
    t.set_lock("/f", (a, 1), WRITE, 0, 99)
    t.set_lock("/f", (a, 1), UNLOCK, 40, 59)        # a hole in the middle
    assert sorted((l.start, l.end) for l in t.locks) == [(0, 39), (60, 99)]
    assert t.set_lock("/f", (b, 1), WRITE, 40, 59) is None
    assert t.set_lock("/f", (b, 2), WRITE, 100, None) is None, "disjoint from every lock"
    assert t.conflict("/f", (b, 1), WRITE, 30, 45).owner == (a, 1)


def test_same_owner_may_relock_and_two_owners_of_one_host_conflict(clock):
    t = table(clock)
    a = t.open_session("A").id
    assert t.set_lock("/f", (a, 1), READ, 0, None) is None
    assert t.set_lock("/f", (a, 1), WRITE, 0, None) is None, "upgrading one's own lock"
    assert t.set_lock("/f", (a, 2), WRITE, 0, None) is not None, "another process on the same host"


def test_any_request_renews_the_lease(clock):
    t = table(clock, lease=10)
    a = t.open_session("A").id
    for _ in range(5):
        clock.now += 9
        t.touch(a)
    assert not t.sessions[a].expired


def test_expired_lease_releases_locks_for_another_host(clock):
    t = table(clock, lease=10)
    a, b = t.open_session("A").id, t.open_session("B").id
    t.set_lock("/lock", (a, 1), WRITE, 0, None)
    clock.now = 9.0
    t.touch(b)
    assert t.set_lock("/lock", (b, 1), WRITE, 0, None) is not None, "A's lease is still running"
    clock.now = 10.5
    t.touch(b)
    assert t.set_lock("/lock", (b, 1), WRITE, 0, None) is None, "A's lease ran out: B may take the lock"
    assert [e[:2] for e in t.expiries] == [("A", a)]
    with pytest.raises(ExpiredSession):
        t.touch(a)
    with pytest.raises(ExpiredSession):
        t.set_lock("/lock", (a, 1), WRITE, 0, None)


def test_expired_host_starts_a_new_session_without_its_old_locks(clock):
    t = table(clock, lease=10)
    a = t.open_session("A").id
    t.set_lock("/lock", (a, 1), WRITE, 0, None)
    t.expire(a)
    fresh = t.open_session("A").id
    assert fresh != a and t.locks_of("A") == []


def test_nfsv3_never_expires_a_silent_host(clock):
    t = table(clock, lease=None)
    a, b = t.open_session("A").id, t.open_session("B").id
    t.set_lock("/lock", (a, 1), WRITE, 0, None)
    for hour in range(1, 25):
        clock.now = hour * 3600.0
        assert t.set_lock("/lock", (b, 1), WRITE, 0, None) is not None, \
            f"FT-SHARED-7 NFSv3: a silent host's lock must still be held after {hour} h"
    with pytest.raises(NoLease):
        t.expire(a)
    assert t.open_session("A").id != a and t.set_lock("/lock", (b, 1), WRITE, 0, None) is None, \
        "a reboot notice (the host introducing itself again) is what frees NLM locks"


def test_release_of_one_owner_on_one_file_keeps_the_rest(clock):
    t = table(clock)
    a = t.open_session("A").id
    t.set_lock("/x", (a, 1), WRITE, 0, None)
    t.set_lock("/y", (a, 1), WRITE, 0, None)
    t.set_lock("/z", (a, 2), WRITE, 0, None)
    t.release_owner(a, 1, "/x")
    assert sorted((l.path, l.owner[1]) for l in t.locks) == [("/y", 1), ("/z", 2)]
    t.release_owner(a)
    assert t.locks == []


def test_every_expiry_is_reported_whoever_found_it_due(clock):
    """The server logs expiries through ``on_expire``: one found by another host's lock request (a
    slave polling for the lock, usually first) is reported like one found by the expiry loop."""
    seen = []
    t = LeaseTable(lease=10.0, clock=clock, on_expire=lambda session, why: seen.append((session.client, why)))
    a, b = t.open_session("A").id, t.open_session("B").id
    assert t.set_lock("/lock", (a, 1), WRITE, 0, None) is None
    clock.now = 5.0
    t.touch(b)
    clock.now = 11.0
    t.touch(b)  # B renews again; A's lease ran out meanwhile (B's runs to 15)
    assert seen == [("A", "its lease ran out")]
    t.expire(b)
    assert seen[-1] == ("B", "by request")
    assert t.expire_due() == [] and len(seen) == 2, "an expiry is reported once"


def test_holds_tells_a_new_exclusive_lock_from_a_renewed_one(clock):
    t = table(clock)
    a = t.open_session("A").id
    assert not t.holds("/lock", (a, 1), WRITE, 0, 0)
    t.set_lock("/lock", (a, 1), WRITE, 0, 0)
    assert t.holds("/lock", (a, 1), WRITE, 0, 0)
    assert not t.holds("/lock", (a, 2), WRITE, 0, 0), "another owner of the same host"
    assert not t.holds("/lock", (a, 1), WRITE, 1, 1), "another byte"
