"""The clustered grouping handlers (reference_broker/clustering/grouping.py) on in-memory links
between handler objects, checked against the Artemis manual's "Clustered Grouping" and "Clustered
Grouping Best Practices" sections (../shared/spec/artemis-message-grouping.md, AMG below) and the
catalogue entries GRP-CLUSTER-1..3, -5 (conformance/spec/groups.toml). Group timeouts run on a
fake clock; the handler timeouts are short real ones (50 ms), never asserted as speeds."""

from __future__ import annotations

import asyncio

import pytest

from reference_broker.clustering.grouping import (
    DEFAULT_MAX_GROUPS,
    GroupingCapacityExceeded,
    GroupingError,
    GroupingTimeout,
    LocalGroupingHandler,
    RemoteGroupingHandler,
    local_handler,
    proposal_message,
    remote_handler,
)

ADDR = "orders"
SHORT_MS = 50  # a REMOTE handler timeout for tests where the LOCAL never answers


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Link:
    """An in-memory cluster link to the LOCAL handler: counts requests; ``gate`` (an Event) holds
    every request until set, so several proposals can be in flight at once."""

    def __init__(self, local: LocalGroupingHandler, gate: asyncio.Event | None = None) -> None:
        self.local = local
        self.gate = gate
        self.requests: list[dict] = []

    async def __call__(self, message: dict) -> dict:
        self.requests.append(message)
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)  # a hop: lets other tasks run between send and answer
        return self.local.handle(message)


def cluster(clock=None, *, local_gt=-1, remote_gt=-1, timeout_ms=5000, max_groups=DEFAULT_MAX_GROUPS, gate=None):
    """LOCAL on A, REMOTE on B and C, each REMOTE with its own link."""
    clock = clock or FakeClock()
    a = local_handler(
        "A", timeout_ms=timeout_ms, group_timeout_ms=local_gt, reaper_period_ms=60_000, max_groups=max_groups, clock=clock
    )
    links = {name: Link(a, gate) for name in ("B", "C")}
    remotes = {
        name: remote_handler(
            name,
            links[name],
            timeout_ms=timeout_ms,
            group_timeout_ms=remote_gt,
            reaper_period_ms=60_000,
            max_groups=max_groups,
            clock=clock,
        )
        for name in ("B", "C")
    }
    return a, remotes["B"], remotes["C"], links


async def close_all(*handlers) -> None:
    for handler in handlers:
        await handler.close()


# --------------------------------------------------------------------------- GRP-CLUSTER-1, -3


def test_first_proposal_wins_across_nodes():
    """GRP-CLUSTER-3 (AMG §Clustered Grouping): the node receiving the first message proposes,
    the LOCAL handler accepts it, and every node routes the group there afterwards."""

    async def go():
        a, b, c, links = cluster()
        assert await b.route(ADDR, "g1", "B") == "B", "GRP-CLUSTER-3: the first proposal is accepted"
        assert await c.route(ADDR, "g1", "C") == "B", "GRP-CLUSTER-3: a later proposal gets the chosen route"
        assert await a.route(ADDR, "g1", "A") == "B", "GRP-CLUSTER-3: the LOCAL node routes it there too"
        assert await b.route(ADDR, "g1", "C") == "B", "GRP-CLUSTER-3: the first node keeps its route"
        # Another group, first seen on the LOCAL node, is pinned there for the REMOTE nodes.
        assert await a.route(ADDR, "g2", "A") == "A"
        assert await b.route(ADDR, "g2", "B") == "A", "GRP-CLUSTER-1: REMOTE nodes ask the LOCAL one"
        # The same group id on another address is another group.
        assert await c.route("payments", "g1", "C") == "C", "GRP-CLUSTER-3: groups are per address"
        assert a.route_of(ADDR, "g1") == "B" and a.route_of("payments", "g1") == "C"
        await close_all(a, b, c)

    asyncio.run(go())


def test_later_proposal_is_answered_with_the_existing_route_as_alternative():
    """GRP-CLUSTER-3 (AMG §Clustered Grouping): a rejected proposal gets the alternative route."""
    a = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
    first = a.handle(proposal_message(ADDR, "g", "B"))
    second = a.handle(proposal_message(ADDR, "g", "C"))
    assert first["route"] == "B" and first["accepted"] is True, f"GRP-CLUSTER-3: first answer {first}"
    assert second["route"] == "B" and second["accepted"] is False, f"GRP-CLUSTER-3: second answer {second}"
    assert second["group_timeout_ms"] == -1


def test_remote_caches_the_decision():
    """GRP-CLUSTER-3: once decided, a REMOTE node routes the group without asking again (with no
    group timeout on either side)."""

    async def go():
        a, b, c, links = cluster()
        for _ in range(5):
            assert await b.route(ADDR, "g", "B") == "B"
        assert len(links["B"].requests) == 1, "GRP-CLUSTER-3: one proposal, then the cached route"
        assert b.cached_route(ADDR, "g") == "B"
        await close_all(a, b, c)

    asyncio.run(go())


def test_concurrent_first_messages_on_two_remote_nodes_agree():
    """GRP-CLUSTER-3: two first messages of one group on different nodes, proposing different
    routes at the same moment, end up on the same node: the LOCAL decides once."""

    async def go():
        gate = asyncio.Event()
        a, b, c, links = cluster(gate=gate)
        sends = [asyncio.create_task(b.route(ADDR, "g", "B")), asyncio.create_task(c.route(ADDR, "g", "C"))]
        while len(links["B"].requests) + len(links["C"].requests) < 2:
            await asyncio.sleep(0)  # both proposals in flight before the LOCAL sees either
        gate.set()
        routes = await asyncio.gather(*sends)
        assert routes[0] == routes[1] == a.route_of(ADDR, "g"), f"GRP-CLUSTER-3: routes {routes}"
        assert routes[0] in ("B", "C")
        # And after that every node agrees.
        assert await a.route(ADDR, "g", "A") == routes[0]
        await close_all(a, b, c)

    asyncio.run(go())


def test_concurrent_sends_of_one_group_on_one_node_share_one_request():
    async def go():
        gate = asyncio.Event()
        a, b, c, links = cluster(gate=gate)
        sends = [asyncio.create_task(b.route(ADDR, "g", "B")) for _ in range(10)]
        while not links["B"].requests:
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0)
        gate.set()
        assert set(await asyncio.gather(*sends)) == {"B"}
        assert len(links["B"].requests) == 1, f"one request in flight per group, got {links['B'].requests}"
        await close_all(a, b, c)

    asyncio.run(go())


# --------------------------------------------------------------------------- GRP-CLUSTER-2, -5


def test_remote_times_out_when_the_local_never_answers():
    """GRP-CLUSTER-2 / -5 (AMG §Clustered Grouping): no decision within the timeout fails the send
    with an error; nothing is cached, so no message is routed by a guess."""
    never = asyncio.Event()
    cancelled = []

    async def silent(message):
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(message)
            raise
        return {}

    async def go():
        b = remote_handler("B", silent, timeout_ms=SHORT_MS, group_timeout_ms=-1, reaper_period_ms=1000)
        sends = [asyncio.create_task(b.route(ADDR, "g", "B")) for _ in range(3)]
        results = await asyncio.gather(*sends, return_exceptions=True)
        assert all(isinstance(r, GroupingTimeout) for r in results), f"GRP-CLUSTER-2: every waiting send fails: {results}"
        assert "timeout_ms=50" in str(results[0]), f"the error names the option: {results[0]}"
        assert b.cached_route(ADDR, "g") is None, "GRP-CLUSTER-5: no route was made up"
        assert len(cancelled) == 1, "the unanswered request is abandoned (cancelled), not left running"
        await b.close()

    asyncio.run(go())


def test_remote_times_out_when_the_link_raises():
    """GRP-CLUSTER-5: the LOCAL node is down (every request raises): the send fails with
    GroupingTimeout once timeout_ms is spent, with the link's error as the cause."""
    attempts = []

    async def broken(message):
        attempts.append(message)
        raise ConnectionRefusedError("LOCAL node down")

    async def go():
        b = remote_handler("B", broken, timeout_ms=SHORT_MS, group_timeout_ms=-1, reaper_period_ms=1000)
        with pytest.raises(GroupingTimeout) as caught:
            await b.route(ADDR, "g", "B")
        assert isinstance(caught.value.__cause__, ConnectionRefusedError), f"GRP-CLUSTER-5: cause {caught.value.__cause__!r}"
        assert attempts, "the link was tried"
        assert b.cached_route(ADDR, "g") is None, "GRP-CLUSTER-5: no route was made up"
        await b.close()

    asyncio.run(go())


def test_remote_retries_a_broken_link_within_its_timeout():
    """A link that comes back before timeout_ms (the LOCAL node reconnecting) still gets the
    decision: the timeout bounds the wait, it is not a one-shot."""

    async def go():
        a = local_handler("A", timeout_ms=5000, group_timeout_ms=-1, reaper_period_ms=1000)
        failures = [ConnectionResetError("reconnecting")] * 2

        async def flaky(message):
            if failures:
                raise failures.pop()
            return a.handle(message)

        b = remote_handler("B", flaky, timeout_ms=5000, group_timeout_ms=-1, reaper_period_ms=1000)
        assert await b.route(ADDR, "g", "B") == "B"
        assert not failures
        await close_all(a, b)

    asyncio.run(go())


# --------------------------------------------------------------------------- group timeout + reaper


def test_local_reaps_groups_unused_for_group_timeout():
    """AMG §Clustered Grouping Best Practices (group-timeouts): the LOCAL handler forgets a group
    unused for group_timeout; the next message of that group is a first message again."""

    async def go():
        clock = FakeClock()
        a = local_handler("A", timeout_ms=1000, group_timeout_ms=1000, reaper_period_ms=1000, clock=clock)
        assert await a.route(ADDR, "old", "B") == "B"
        clock.advance(0.6)
        assert await a.route(ADDR, "young", "C") == "C"
        clock.advance(0.6)  # old unused for 1.2 s, young for 0.6 s
        assert a.reap() == 1
        assert a.route_of(ADDR, "old") is None and a.route_of(ADDR, "young") == "C"
        assert await a.route(ADDR, "old", "C") == "C", "a reaped group takes a new proposal"
        await a.close()

    asyncio.run(go())


def test_local_use_and_touch_keep_a_group():
    async def go():
        clock = FakeClock()
        a = local_handler("A", timeout_ms=1000, group_timeout_ms=1000, reaper_period_ms=1000, clock=clock)
        await a.route(ADDR, "routed", "B")
        await a.route(ADDR, "touched", "B")
        for _ in range(3):
            clock.advance(0.8)
            await a.route(ADDR, "routed", "C")
            a.touch(ADDR, "touched")
            assert a.reap() == 0
        assert a.route_of(ADDR, "routed") == "B" and a.route_of(ADDR, "touched") == "B"
        await a.close()

    asyncio.run(go())


def test_no_group_timeout_never_reaps():
    clock = FakeClock()
    a = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000, clock=clock)
    a.decide(ADDR, "g", "B")
    clock.advance(10**6)
    assert a.reap() == 0 and a.route_of(ADDR, "g") == "B"


def test_remote_use_refreshes_the_locals_last_used_time():
    """AMG §Clustered Grouping Best Practices: the remote node's smaller group timeout (half the
    LOCAL's) sets how often it refreshes the group's last-used time on the LOCAL with a round
    trip; a group used only on a REMOTE node therefore survives the LOCAL's reaper."""

    async def go():
        clock = FakeClock()
        a, b, c, links = cluster(clock, local_gt=1000, remote_gt=500)
        assert await b.route(ADDR, "g", "B") == "B"
        for _ in range(6):  # 2.4 s of use on B only, well past the LOCAL's 1 s group timeout
            clock.advance(0.4)
            assert await b.route(ADDR, "g", "B") == "B"
            assert a.reap() == 0, "a group used on a REMOTE node is not reaped"
        # 1 proposal + one refresh per 0.5 s of trust, not one per message.
        assert 2 <= len(links["B"].requests) < 7, f"refresh round trips: {len(links['B'].requests)}"
        clock.advance(1.1)  # now unused everywhere
        assert a.reap() == 1 and a.route_of(ADDR, "g") is None
        await close_all(a, b, c)

    asyncio.run(go())


def test_remote_trusts_a_route_at_most_half_the_locals_group_timeout():
    """A REMOTE handler configured without a group timeout still re-confirms before the LOCAL
    could have reaped the group (the best practice enforced from the LOCAL's answer)."""

    async def go():
        clock = FakeClock()
        a, b, c, links = cluster(clock, local_gt=1000, remote_gt=-1)
        await b.route(ADDR, "g", "B")
        clock.advance(0.4)
        await b.route(ADDR, "g", "B")
        assert len(links["B"].requests) == 1
        clock.advance(0.2)  # 0.6 s > half of 1 s
        await b.route(ADDR, "g", "B")
        assert len(links["B"].requests) == 2
        await close_all(a, b, c)

    asyncio.run(go())


def test_remote_never_uses_a_route_the_local_reaped():
    """After the LOCAL reaped an idle group and another node pinned it elsewhere, a REMOTE node
    with a stale cached route asks again and follows the new decision (GRP-CLUSTER-3)."""

    async def go():
        clock = FakeClock()
        a, b, c, links = cluster(clock, local_gt=1000, remote_gt=500)
        assert await b.route(ADDR, "g", "B") == "B"
        clock.advance(1.5)
        assert a.reap() == 1
        assert await c.route(ADDR, "g", "C") == "C"
        assert await b.route(ADDR, "g", "B") == "C", "GRP-CLUSTER-3: B follows the LOCAL's current route"
        await close_all(a, b, c)

    asyncio.run(go())


def test_remote_re_proposes_its_stale_route():
    """A REMOTE node whose trust ran out proposes its cached route again (not the new message's
    proposal), so a group reaped on the LOCAL keeps its node when nobody else claimed it."""

    async def go():
        clock = FakeClock()
        a, b, c, links = cluster(clock, local_gt=1000, remote_gt=500)
        assert await b.route(ADDR, "g", "B") == "B"
        clock.advance(1.5)
        assert a.reap() == 1
        assert await b.route(ADDR, "g", "X") == "B"
        assert links["B"].requests[-1]["proposal"] == "B"
        await close_all(a, b, c)

    asyncio.run(go())


def test_remote_touch_refreshes_in_the_background_and_reap_drops_untrusted_routes():
    async def go():
        clock = FakeClock()
        a, b, c, links = cluster(clock, local_gt=1000, remote_gt=500)
        await b.route(ADDR, "kept", "B")
        await b.route(ADDR, "idle", "B")
        b.touch(ADDR, "kept")  # still trusted: no round trip
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(links["B"].requests) == 2
        clock.advance(0.6)
        b.touch(ADDR, "kept")  # stale: a background round trip refreshes the LOCAL
        for _ in range(10):
            await asyncio.sleep(0)
        assert [r["group_id"] for r in links["B"].requests] == ["kept", "idle", "kept"]
        assert b.reap() == 1, "the idle, untrusted route is dropped from the REMOTE cache"
        assert b.cached_route(ADDR, "kept") == "B" and b.cached_route(ADDR, "idle") is None
        clock.advance(0.6)  # kept: 0.6 s since its refresh; idle: 1.2 s since use
        assert a.reap() == 1 and a.route_of(ADDR, "kept") == "B"
        await close_all(a, b, c)

    asyncio.run(go())


def test_the_reaper_runs_every_reaper_period():
    async def go():
        clock = FakeClock()
        a = local_handler("A", timeout_ms=1000, group_timeout_ms=1000, reaper_period_ms=5, clock=clock)
        await a.route(ADDR, "g", "B")
        clock.advance(2)
        for _ in range(1000):  # bounded wait for the reaper task, not a speed check
            if a.route_of(ADDR, "g") is None:
                break
            await asyncio.sleep(0.005)
        assert a.route_of(ADDR, "g") is None, "the periodic reaper removed the expired group"
        await a.close()
        assert a._reaper._task is None

    asyncio.run(go())


# --------------------------------------------------------------------------- forget_node


def test_forget_node_drops_routes_to_it_and_the_next_message_proposes_again():
    """AMG §Clustered Grouping Best Practices (durable queues): when the chosen queue goes away,
    the group's route is dropped so the next message makes a new, successful proposal."""

    async def go():
        a, b, c, links = cluster()
        assert await b.route(ADDR, "on-b", "B") == "B"
        assert await c.route(ADDR, "on-c", "C") == "C"
        assert await c.route(ADDR, "on-b", "C") == "B"
        for handler in (a, b, c):  # every node learns that B's queue went away
            handler.forget_node("B")
        assert a.route_of(ADDR, "on-b") is None and c.cached_route(ADDR, "on-b") is None
        assert a.route_of(ADDR, "on-c") == "C" and c.cached_route(ADDR, "on-c") == "C"
        assert await c.route(ADDR, "on-b", "C") == "C", "the next message's proposal wins"
        assert await b.route(ADDR, "on-b", "B") == "C", "and every node follows it"
        await close_all(a, b, c)

    asyncio.run(go())


def test_an_answer_naming_a_node_forgotten_meanwhile_is_not_cached():
    async def go():
        gate = asyncio.Event()
        a, b, c, links = cluster(gate=gate)
        send = asyncio.create_task(b.route(ADDR, "g", "B"))
        while not links["B"].requests:
            await asyncio.sleep(0)
        b.forget_node("B")
        gate.set()
        assert await send == "B"
        assert b.cached_route(ADDR, "g") is None
        await close_all(a, b, c)

    asyncio.run(go())


# --------------------------------------------------------------------------- bounded memory


def test_local_refuses_new_groups_beyond_max_groups():
    async def go():
        a, b, c, links = cluster(max_groups=3)
        for group in ("g1", "g2", "g3"):
            await a.route(ADDR, group, "A")
        with pytest.raises(GroupingCapacityExceeded, match="max_groups=3"):
            await a.route(ADDR, "g4", "A")
        with pytest.raises(GroupingCapacityExceeded, match="max_groups=3"):
            await b.route(ADDR, "g4", "B")
        assert b.cached_route(ADDR, "g4") is None
        assert await b.route(ADDR, "g2", "B") == "A", "known groups keep routing when full"
        assert len(a) == 3
        a.forget_node("A")
        assert await b.route(ADDR, "g4", "B") == "B", "room again once routes are dropped"
        await close_all(a, b, c)

    asyncio.run(go())


def test_remote_cache_evicts_the_least_recently_used_group():
    async def go():
        a, b, c, links = cluster(max_groups=1000)
        small = remote_handler("B", links["B"], timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000, max_groups=2)
        await small.route(ADDR, "g1", "B")
        await small.route(ADDR, "g2", "B")
        await small.route(ADDR, "g1", "B")  # g1 used last
        await small.route(ADDR, "g3", "B")
        assert len(small) == 2
        assert small.cached_route(ADDR, "g2") is None and small.cached_route(ADDR, "g1") == "B"
        before = len(links["B"].requests)
        assert await small.route(ADDR, "g2", "X") == "B", "an evicted group gets its route back from the LOCAL"
        assert len(links["B"].requests) == before + 1
        await close_all(a, b, c, small)

    asyncio.run(go())


def test_many_client_groups_stay_within_the_caps():
    async def go():
        a, b, c, links = cluster(max_groups=50)
        refused = 0
        for i in range(200):
            try:
                await b.route(ADDR, f"client-group-{i}", "B")
            except GroupingCapacityExceeded:
                refused += 1
        assert len(a) == 50 and len(b) <= 50 and refused == 150
        await close_all(a, b, c)

    asyncio.run(go())


# --------------------------------------------------------------------------- options, protocol


@pytest.mark.parametrize(
    "option, value",
    [
        ("timeout_ms", 0),
        ("timeout_ms", -1),
        ("timeout_ms", True),
        ("group_timeout_ms", 0),
        ("group_timeout_ms", -2),
        ("group_timeout_ms", 1.5),
        ("reaper_period_ms", 0),
        ("reaper_period_ms", -100),
        ("max_groups", 0),
    ],
)
@pytest.mark.parametrize("kind", ["local", "remote"])
def test_bad_options_are_refused_naming_the_option(kind, option, value):
    options = dict(timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000, max_groups=10)
    options[option] = value

    async def request(message):
        return {}

    with pytest.raises(ValueError, match=option):
        if kind == "local":
            local_handler("A", **options)
        else:
            remote_handler("B", request, **options)


def test_bad_node_and_request_are_refused():
    with pytest.raises(ValueError, match="node"):
        local_handler("", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
    with pytest.raises(ValueError, match="request"):
        remote_handler("B", None, timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)


@pytest.mark.parametrize(
    "message",
    [
        None,
        {"kind": "other"},
        {"kind": "grouping", "op": "delete"},
        {"kind": "grouping", "op": "propose", "address": ADDR, "group_id": "", "proposal": "B"},
        {"kind": "grouping", "op": "propose", "address": ADDR, "group_id": "g", "proposal": 7},
    ],
)
def test_local_answers_malformed_requests_with_an_error(message):
    a = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
    answer = a.handle(message)
    assert answer["error"] == "bad-request" and answer["kind"] == "grouping", answer
    assert len(a) == 0


def test_remote_fails_the_send_on_a_refusal_or_nonsense_answer():
    async def go():
        for answer in ({"kind": "grouping", "error": "bad-request", "detail": "x"}, {"route": ""}, ["B"]):

            async def request(message, answer=answer):
                return answer

            b = remote_handler("B", request, timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
            with pytest.raises(GroupingError):
                await b.route(ADDR, "g", "B")
            assert b.cached_route(ADDR, "g") is None
            await b.close()

    asyncio.run(go())


def test_a_closed_local_handler_is_waited_for_like_a_broken_link():
    """GRP-CLUSTER-5: a LOCAL handler that is shutting down makes no decisions: the REMOTE keeps
    asking within its timeout (a restarted LOCAL may answer), then fails the send."""

    async def go():
        old = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
        await old.close()
        link = Link(old)
        b = remote_handler("B", link, timeout_ms=SHORT_MS, group_timeout_ms=-1, reaper_period_ms=1000)
        with pytest.raises(GroupingTimeout):
            await b.route(ADDR, "g", "B")
        link.local = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
        assert await b.route(ADDR, "g", "B") == "B", "the restarted LOCAL decides"
        await close_all(link.local, b)

    asyncio.run(go())


def test_closed_handlers_fail_sends_and_release_waiters():
    async def go():
        gate = asyncio.Event()
        a, b, c, links = cluster(gate=gate)
        waiting = asyncio.create_task(b.route(ADDR, "g", "B"))
        while not links["B"].requests:
            await asyncio.sleep(0)
        await b.close()
        with pytest.raises(GroupingError, match="closed"):
            await waiting
        with pytest.raises(GroupingError, match="closed"):
            await b.route(ADDR, "g", "B")
        await a.close()
        with pytest.raises(GroupingError, match="closed"):
            await a.route(ADDR, "g", "A")
        assert a.handle(proposal_message(ADDR, "g", "B"))["error"] == "closed"
        await c.close()

    asyncio.run(go())


def test_handlers_satisfy_the_shared_interface():
    a = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)

    async def request(message):
        return a.handle(message)

    b = remote_handler("B", request, timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
    assert isinstance(a, LocalGroupingHandler) and isinstance(b, RemoteGroupingHandler)
    for handler in (a, b):
        for name in ("route", "touch", "forget_node", "close"):
            assert callable(getattr(handler, name)), name
    assert (a.kind, b.kind) == ("LOCAL", "REMOTE")


# --------------------------------------------------------------------------- LOCAL restarts


def test_local_bindings_persist_and_restore():
    """GRP-CLUSTER-5 (AMG §Clustered Grouping): a backup configured with the same LOCAL handler
    takes over the decisions; here the decisions are carried over by bindings() / restore()."""
    old = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
    old.decide(ADDR, "g1", "B")
    old.decide("payments", "g2", "C")
    backup = local_handler("A2", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000, max_groups=2)
    backup.restore(old.bindings())
    assert backup.decide(ADDR, "g1", "C") == ("B", False), "GRP-CLUSTER-5: the backup keeps the decisions"
    assert backup.route_of("payments", "g2") == "C"
    with pytest.raises(GroupingCapacityExceeded, match="max_groups=2"):
        backup.restore([(ADDR, "g3", "B")])
    with pytest.raises(ValueError, match="binding"):
        backup.restore([(ADDR, "", "B")])


def test_remote_drops_its_cache_when_the_local_handler_changes():
    """A REMOTE node whose LOCAL handler was replaced (restart without restore) must not keep
    routing by the old decisions once it has talked to the new one."""

    async def go():
        old = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
        link = Link(old)
        b = remote_handler("B", link, timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
        assert await b.route(ADDR, "g1", "B") == "B"
        assert await b.route(ADDR, "g2", "B") == "B"
        link.local = local_handler("A", timeout_ms=1000, group_timeout_ms=-1, reaper_period_ms=1000)
        link.local.decide(ADDR, "g2", "C")  # the new LOCAL pinned g2 elsewhere
        assert await b.route(ADDR, "g3", "B") == "B"
        assert b.cached_route(ADDR, "g3") == "B", "the new LOCAL's answer is cached"
        assert b.cached_route(ADDR, "g2") is None and b.cached_route(ADDR, "g1") is None
        assert await b.route(ADDR, "g2", "B") == "C", "GRP-CLUSTER-3: B follows the new LOCAL's route"
        b.forget_all()
        assert len(b) == 0
        await close_all(old, link.local, b)

    asyncio.run(go())
