"""Clustered message grouping: the LOCAL and REMOTE grouping handlers of an Artemis-style cluster
(artemis-message-grouping.md, "Clustered Grouping" and "Clustered Grouping Best Practices";
catalogue GRP-CLUSTER-1..6 in conformance/spec/groups.toml).

One node of the cluster has the LOCAL handler, which alone decides each group's route; every other
node has a REMOTE handler that asks it (GRP-CLUSTER-1). The node that receives a group's first
message proposes a route (its normal clustered routing choice); the LOCAL handler accepts the first
proposal it sees for that group and answers every later proposal with the route already chosen
(GRP-CLUSTER-3). A REMOTE handler that gets no decision within ``timeout_ms`` fails the send with
``GroupingTimeout`` rather than guess a route and break the group's order (GRP-CLUSTER-2,
GRP-CLUSTER-5). Behaviour follows Artemis's LocalGroupingHandler / RemoteGroupingHandler
(org.apache.activemq.artemis.core.server.group.impl), read for reference, not copied.

Transport-agnostic: the REMOTE handler's ``request`` is an injected async callable that carries
one JSON-able dict to the LOCAL node and returns the answer of ``LocalGroupingHandler.handle``
there; it raises when the link is broken. Messages::

    request  {"kind": "grouping", "op": "propose", "address": a, "group_id": g, "proposal": node}
    answer   {"kind": "grouping", "route": node, "accepted": bool, "group_timeout_ms": int, "epoch": str}
    refusal  {"kind": "grouping", "error": "capacity" | "bad-request" | "closed", "detail": str}

Group timeout. The LOCAL handler forgets a group unused for ``group_timeout_ms`` (-1: never); its
reaper looks every ``reaper_period_ms``. Using a group on any node must therefore refresh the
LOCAL's last-used time. Artemis's REMOTE handler re-sends its cached proposal once its own
(smaller) group timeout has passed, and relies on the LOCAL pushing an "unproposal" to every node
when it reaps a group. This link has no push, so a REMOTE handler trusts a cached route only for
``min(its group_timeout_ms, LOCAL group_timeout_ms / 2)`` after the LOCAL last confirmed it (the
chapter's best practice: remote timeout at most half the LOCAL's), and confirms it again (one round
trip, proposing the cached route) before using it past that. The LOCAL cannot reap a route within
its group timeout of the confirmation, so a REMOTE never routes by a route the LOCAL has dropped.
With group_timeout_ms -1 on both sides a cached route is kept until ``forget_node``. Stricter than
Artemis on purpose: with group timeouts on and the LOCAL node unreachable, a REMOTE send whose
route needs re-confirming fails with GroupingTimeout instead of going by the stale route
(GRP-CLUSTER-5: no decisions without the LOCAL node).

Keys are (address, group_id); Artemis keys a group by group id and queue name, so a node with
several queues on one address should pass the queue name as ``address``. ``forget_node`` is for
a queue that went away (Artemis drops the routes on the binding's removal); a node that merely
stops and comes back with its durable queue keeps its groups (Artemis's ClusteredGroupingTest,
"pinned node goes down" cases).

LOCAL restarts. Artemis journals its group bindings; this LOCAL handler keeps them in memory, and
``bindings()`` / ``restore()`` let its node persist and reload them (or a backup take them over,
GRP-CLUSTER-5). Every answer carries the LOCAL handler's ``epoch`` (new per handler object): a
REMOTE handler that sees the epoch change drops its whole cache, since the routes in it were
decided by a LOCAL handler that no longer exists. It learns of the change on its next round trip
only, so a node should also call ``forget_all()`` when its link to the LOCAL node reconnects.

Memory. Group ids come from clients, so both handlers remember at most ``max_groups`` groups
(default ``DEFAULT_MAX_GROUPS``; an entry is a tuple of three short strings and two numbers, about
300 bytes plus the group id, measured with tracemalloc: about 30 MB at the default cap):
- LOCAL: a proposal for a new group when full is REFUSED with ``GroupingCapacityExceeded`` (the
  send fails). Evicting a live route instead would let a later proposal pin the same group to
  another node while REMOTE nodes still route it to the old one: the group's order would break
  silently, which the chapter's timeout rule shows Artemis prefers to turn into a failed send.
  Groups known already keep routing; reaped or forgotten groups free room.
- REMOTE: the least recently used cached route is EVICTED. The cache is only a copy of the LOCAL's
  decision, so an evicted group costs one round trip on its next message and gets the same route.
  Concurrent requests in flight are capped by the same number (``GroupingCapacityExceeded``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Protocol

log = logging.getLogger(__name__)

MESSAGE_KIND = "grouping"
PROPOSE = "propose"
DEFAULT_MAX_GROUPS = 100_000
# Retry pacing when the link to the LOCAL node raises (it may be reconnecting): start small, double,
# never beyond this; always within the handler's timeout_ms.
_RETRY_FIRST_S = 0.02
_RETRY_MAX_S = 1.0

Request = Callable[[dict], Awaitable[dict]]
Clock = Callable[[], float]  # seconds, monotonic


class GroupingError(Exception):
    """A grouped message cannot be routed: the send must fail."""


class GroupingTimeout(GroupingError):
    """No routing decision from the LOCAL grouping handler within timeout_ms (GRP-CLUSTER-2)."""


class GroupingCapacityExceeded(GroupingError):
    """The handler already remembers max_groups groups and cannot take a new one."""


class _LocalUnavailable(Exception):
    """The LOCAL node answered that its handler is closed (shutting down or restarting): treated
    like a broken link, retried within timeout_ms."""


class GroupingHandler(Protocol):
    node: str

    async def route(self, address: str, group_id: str, proposal: str) -> str:
        """The node whose queue gets this group's messages: the proposal if the LOCAL handler
        accepts it (first proposal wins), else the route already chosen. Raises GroupingTimeout."""

    def touch(self, address: str, group_id: str) -> None:
        """The group was used on this node (keeps it from the group_timeout reaper)."""

    def forget_node(self, node: str) -> None:
        """The node's queue went away: drop every route to it, the next message proposes anew."""

    async def close(self) -> None: ...


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"grouping {name} must be an integer, not {value!r}")
    return value


def _check_options(node: Any, timeout_ms: Any, group_timeout_ms: Any, reaper_period_ms: Any, max_groups: Any) -> None:
    if not isinstance(node, str) or not node:
        raise ValueError(f"grouping node must be a non-empty node name, not {node!r}")
    if _check_int("timeout_ms", timeout_ms) <= 0:
        raise ValueError(f"grouping timeout_ms must be above 0, not {timeout_ms!r}")
    group_timeout_ms = _check_int("group_timeout_ms", group_timeout_ms)
    if group_timeout_ms < -1 or group_timeout_ms == 0:
        raise ValueError(f"grouping group_timeout_ms is -1 (never) or above 0, not {group_timeout_ms!r}")
    if _check_int("reaper_period_ms", reaper_period_ms) <= 0:
        raise ValueError(f"grouping reaper_period_ms must be above 0, not {reaper_period_ms!r}")
    if _check_int("max_groups", max_groups) <= 0:
        raise ValueError(f"grouping max_groups must be above 0, not {max_groups!r}")


def proposal_message(address: str, group_id: str, proposal: str) -> dict:
    """The request a REMOTE handler sends to the LOCAL one."""
    return {"kind": MESSAGE_KIND, "op": PROPOSE, "address": address, "group_id": group_id, "proposal": proposal}


def _refusal(error: str, detail: str) -> dict:
    return {"kind": MESSAGE_KIND, "error": error, "detail": detail}


class _Reaper:
    """Runs ``reap`` every period on the running loop; started on first use (handlers may be built
    before the loop runs), stopped by ``close``."""

    def __init__(self, reap: Callable[[], int], period_s: float) -> None:
        self._reap = reap
        self._period_s = period_s
        self._task: asyncio.Task | None = None

    def ensure_started(self) -> None:
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._task = loop.create_task(self._run(), name="grouping-reaper")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period_s)
            try:
                self._reap()
            except Exception:  # a reaper that dies silently would let memory grow
                log.exception("grouping reaper failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


@dataclass
class _Binding:
    route: str
    last_used: float


class LocalGroupingHandler:
    """The one handler that decides (GRP-CLUSTER-1): first proposal wins, later ones get the route
    already chosen as the alternative (GRP-CLUSTER-3)."""

    kind = "LOCAL"

    def __init__(
        self,
        node: str,
        *,
        timeout_ms: int,
        group_timeout_ms: int,
        reaper_period_ms: int,
        max_groups: int = DEFAULT_MAX_GROUPS,
        clock: Clock = time.monotonic,
    ) -> None:
        _check_options(node, timeout_ms, group_timeout_ms, reaper_period_ms, max_groups)
        self.node = node
        self.timeout_ms = timeout_ms  # kept for symmetry: the LOCAL decides at once, it never waits
        self.group_timeout_ms = group_timeout_ms
        self.reaper_period_ms = reaper_period_ms
        self.max_groups = max_groups
        self._clock = clock
        self._bindings: dict[tuple[str, str], _Binding] = {}
        self.epoch = uuid.uuid4().hex
        self._closed = False
        self._reaper = _Reaper(self.reap, reaper_period_ms / 1000)

    def __len__(self) -> int:
        return len(self._bindings)

    def route_of(self, address: str, group_id: str) -> str | None:
        """The route chosen for a group, or None (does not count as use)."""
        binding = self._bindings.get((address, group_id))
        return binding.route if binding else None

    def decide(self, address: str, group_id: str, proposal: str) -> tuple[str, bool]:
        """(route, accepted). Synchronous, so two proposals can never interleave: whichever reaches
        the LOCAL first is the one every node gets. Raises GroupingCapacityExceeded, GroupingError."""
        if self._closed:
            raise GroupingError(f"LOCAL grouping handler on {self.node} is closed")
        if not isinstance(group_id, str) or not group_id or not isinstance(proposal, str) or not proposal:
            raise ValueError(f"grouping needs a non-empty group_id and proposal, not {group_id!r}, {proposal!r}")
        self._reaper.ensure_started()
        key = (address, group_id)
        now = self._clock()
        binding = self._bindings.get(key)
        if binding is not None:
            binding.last_used = now
            return binding.route, binding.route == proposal
        if len(self._bindings) >= self.max_groups:
            raise GroupingCapacityExceeded(
                f"LOCAL grouping handler on {self.node} already routes max_groups={self.max_groups} groups; "
                f"group {group_id!r} on {address!r} refused"
            )
        self._bindings[key] = _Binding(proposal, now)
        return proposal, True

    async def route(self, address: str, group_id: str, proposal: str) -> str:
        return self.decide(address, group_id, proposal)[0]

    def handle(self, message: dict) -> dict:
        """Answer one request of a REMOTE handler (synchronous: call it, do not await it)."""
        if not isinstance(message, dict) or message.get("kind") != MESSAGE_KIND or message.get("op") != PROPOSE:
            return _refusal("bad-request", f"not a grouping proposal: {message!r:.200}")
        address, group_id, proposal = message.get("address"), message.get("group_id"), message.get("proposal")
        if not isinstance(address, str) or not isinstance(group_id, str) or not group_id:
            return _refusal("bad-request", "a proposal needs string 'address' and non-empty 'group_id'")
        if not isinstance(proposal, str) or not proposal:
            return _refusal("bad-request", "a proposal needs a non-empty 'proposal' node name")
        try:
            route, accepted = self.decide(address, group_id, proposal)
        except GroupingCapacityExceeded as exc:
            return _refusal("capacity", str(exc))
        except GroupingError as exc:
            return _refusal("closed", str(exc))
        return {
            "kind": MESSAGE_KIND,
            "route": route,
            "accepted": accepted,
            "group_timeout_ms": self.group_timeout_ms,
            "epoch": self.epoch,
        }

    def touch(self, address: str, group_id: str) -> None:
        binding = self._bindings.get((address, group_id))
        if binding is not None:
            binding.last_used = self._clock()
        self._reaper.ensure_started()

    def forget_node(self, node: str) -> None:
        # As Artemis's LOCAL handler on a removed binding: every group routed there is dropped, so
        # the next message of such a group is a first message again (best practices: durable queues).
        for key in [key for key, binding in self._bindings.items() if binding.route == node]:
            del self._bindings[key]

    def bindings(self) -> list[tuple[str, str, str]]:
        """Every decision as (address, group_id, route), for the node to persist."""
        return [(address, group_id, binding.route) for (address, group_id), binding in self._bindings.items()]

    def restore(self, bindings: Iterable[tuple[str, str, str]]) -> None:
        """Reload persisted decisions (before serving requests); each counts as used now. Raises
        GroupingCapacityExceeded past max_groups, ValueError on a malformed entry."""
        now = self._clock()
        for entry in bindings:
            if (
                not isinstance(entry, (tuple, list))
                or len(entry) != 3
                or not all(isinstance(part, str) for part in entry)
                or not entry[1]
                or not entry[2]
            ):
                raise ValueError(f"grouping binding must be (address, group_id, route) strings, not {entry!r:.200}")
            address, group_id, route = entry
            if (address, group_id) not in self._bindings and len(self._bindings) >= self.max_groups:
                raise GroupingCapacityExceeded(f"restoring more than max_groups={self.max_groups} grouping bindings")
            self._bindings[(address, group_id)] = _Binding(route, now)

    def reap(self) -> int:
        """Drop groups unused for group_timeout_ms; returns how many. The reaper calls this every
        reaper_period_ms; callable directly (tests, a fake clock)."""
        if self.group_timeout_ms < 0:
            return 0
        deadline = self._clock() - self.group_timeout_ms / 1000
        stale = [key for key, binding in self._bindings.items() if binding.last_used < deadline]
        for key in stale:
            del self._bindings[key]
        return len(stale)

    async def close(self) -> None:
        self._closed = True
        await self._reaper.stop()


@dataclass
class _Cached:
    route: str
    confirmed_at: float  # when the request that got this answer was sent (conservative)
    valid_for: float  # seconds; math.inf when neither side has a group timeout


class RemoteGroupingHandler:
    """Asks the LOCAL handler through ``request`` and caches its answers (GRP-CLUSTER-1, -2)."""

    kind = "REMOTE"

    def __init__(
        self,
        node: str,
        request: Request,
        *,
        timeout_ms: int,
        group_timeout_ms: int,
        reaper_period_ms: int,
        max_groups: int = DEFAULT_MAX_GROUPS,
        clock: Clock = time.monotonic,
    ) -> None:
        _check_options(node, timeout_ms, group_timeout_ms, reaper_period_ms, max_groups)
        if not callable(request):
            raise ValueError(f"grouping request must be an async callable, not {request!r}")
        self.node = node
        self.timeout_ms = timeout_ms
        self.group_timeout_ms = group_timeout_ms
        self.reaper_period_ms = reaper_period_ms
        self.max_groups = max_groups
        self._request = request
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], _Cached] = OrderedDict()  # least recently used first
        self._in_flight: dict[tuple[str, str], asyncio.Task] = {}
        # forget_node bumps the generation and notes it per node: an answer naming a node forgotten
        # while its request was in flight is returned but not cached (bounded: one entry per node).
        self._generation = 0
        self._forgotten_at: dict[str, int] = {}
        self._forget_all_at = 0
        self._local_epoch: str | None = None  # the epoch of the LOCAL handler that decided the cache
        self._closed = False
        self._reaper = _Reaper(self.reap, reaper_period_ms / 1000)

    def __len__(self) -> int:
        return len(self._cache)

    def cached_route(self, address: str, group_id: str) -> str | None:
        """The cached route, trusted or not (does not count as use)."""
        entry = self._cache.get((address, group_id))
        return entry.route if entry else None

    def _trusted(self, entry: _Cached) -> bool:
        return self._clock() - entry.confirmed_at < entry.valid_for

    async def route(self, address: str, group_id: str, proposal: str) -> str:
        if self._closed:
            raise GroupingError(f"REMOTE grouping handler on {self.node} is closed")
        self._reaper.ensure_started()
        key = (address, group_id)
        entry = self._cache.get(key)
        if entry is not None and self._trusted(entry):
            self._cache.move_to_end(key)
            return entry.route
        # Unknown, or cached but past its group timeout: ask. A stale cached route is proposed again
        # (as Artemis's REMOTE handler does): the LOCAL answers the same route if it still has it.
        task = self._ask_once(key, entry.route if entry is not None else proposal)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self._closed and not (current and current.cancelling()):
                raise GroupingError(f"REMOTE grouping handler on {self.node} closed during the send") from None
            raise

    def _ask_once(self, key: tuple[str, str], proposal: str) -> asyncio.Task:
        """The request in flight for this group, started if there is none: concurrent sends of one
        group on this node share it."""
        task = self._in_flight.get(key)
        if task is not None:
            return task
        if len(self._in_flight) >= self.max_groups:
            raise GroupingCapacityExceeded(
                f"REMOTE grouping handler on {self.node} already waits for max_groups={self.max_groups} decisions"
            )
        task = asyncio.get_running_loop().create_task(self._ask(key, proposal), name=f"grouping-propose-{key[1]!r:.40}")
        self._in_flight[key] = task

        def done(finished: asyncio.Task) -> None:
            if self._in_flight.get(key) is finished:
                del self._in_flight[key]
            if not finished.cancelled():
                finished.exception()  # retrieved: a background refresh may have no waiter

        task.add_done_callback(done)
        return task

    async def _ask(self, key: tuple[str, str], proposal: str) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        message = proposal_message(key[0], key[1], proposal)
        generation = self._generation
        pause = _RETRY_FIRST_S
        last_error: BaseException | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise GroupingTimeout(
                    f"no decision for group {key[1]!r} on {key[0]!r} from the LOCAL grouping handler within "
                    f"timeout_ms={self.timeout_ms} (last link error: {last_error!r})"
                ) from last_error
            sent_at = self._clock()
            pending = asyncio.ensure_future(self._request(dict(message)))
            try:
                done, _ = await asyncio.wait({pending}, timeout=remaining)
            finally:
                if not pending.done():
                    pending.cancel()
            if not done:
                raise GroupingTimeout(
                    f"no decision for group {key[1]!r} on {key[0]!r} from the LOCAL grouping handler within "
                    f"timeout_ms={self.timeout_ms}"
                )
            error = pending.exception() if not pending.cancelled() else asyncio.CancelledError()
            if error is None:
                answer = pending.result()
                try:
                    route, local_group_timeout_ms = self._parse(answer, key)
                except _LocalUnavailable as unavailable:
                    error = unavailable
            if error is None:
                cacheable = self._forgotten_at.get(route, -1) <= generation and self._forget_all_at <= generation
                if self._check_epoch(answer.get("epoch")):
                    # Decided by the new LOCAL handler: the one entry the dropped cache may keep.
                    cacheable = self._forgotten_at.get(route, -1) <= generation
                if cacheable:
                    self._remember(key, route, sent_at, local_group_timeout_ms)
                return route
            # The link raised (LOCAL node down or reconnecting): try again until timeout_ms is spent.
            # Re-proposing is harmless: if the first request did reach the LOCAL, it answers the
            # route it chose then.
            last_error = error
            log.debug("grouping request to the LOCAL node failed: %r", error)
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, _RETRY_MAX_S)

    def _parse(self, answer: Any, key: tuple[str, str]) -> tuple[str, Any]:
        if not isinstance(answer, dict):
            raise GroupingError(f"the LOCAL grouping handler answered {answer!r:.200}, not a dict")
        if "error" in answer:
            detail = answer.get("detail", "")
            if answer["error"] == "capacity":
                raise GroupingCapacityExceeded(detail)
            if answer["error"] == "closed":
                raise _LocalUnavailable(detail)
            raise GroupingError(f"the LOCAL grouping handler refused group {key[1]!r}: {answer['error']}: {detail}")
        route = answer.get("route")
        if not isinstance(route, str) or not route:
            raise GroupingError(f"the LOCAL grouping handler answered no route: {answer!r:.200}")
        return route, answer.get("group_timeout_ms")

    def _check_epoch(self, epoch: Any) -> bool:
        """True when the answer comes from another LOCAL handler than the cache's: cache dropped."""
        if not isinstance(epoch, str) or epoch == self._local_epoch:
            return False
        changed = self._local_epoch is not None
        if changed:
            log.info("grouping: the LOCAL handler changed (epoch %s -> %s), cached routes dropped", self._local_epoch, epoch)
            self.forget_all()
        self._local_epoch = epoch
        return changed

    def _remember(self, key: tuple[str, str], route: str, confirmed_at: float, local_group_timeout_ms: Any) -> None:
        valid_for = self.group_timeout_ms / 1000 if self.group_timeout_ms > 0 else math.inf
        if isinstance(local_group_timeout_ms, int) and not isinstance(local_group_timeout_ms, bool) and local_group_timeout_ms > 0:
            # Never trust a route for longer than half the LOCAL's group timeout, whatever this
            # node was configured with (the chapter's best practice, enforced).
            valid_for = min(valid_for, local_group_timeout_ms / 2000)
        self._cache[key] = _Cached(route, confirmed_at, valid_for)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_groups:
            self._cache.popitem(last=False)

    def touch(self, address: str, group_id: str) -> None:
        """The group was used here without a route() call: refresh the LOCAL's last-used time in
        the background once this node's trust in the route has run out (Artemis's checkTimeout)."""
        key = (address, group_id)
        entry = self._cache.get(key)
        if entry is None or self._closed:
            return
        self._cache.move_to_end(key)
        if self._trusted(entry):
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._reaper.ensure_started()
        try:
            self._ask_once(key, entry.route)
        except GroupingCapacityExceeded:
            pass  # the next route() will ask again

    def forget_node(self, node: str) -> None:
        self._generation += 1
        self._forgotten_at[node] = self._generation
        for key in [key for key, entry in self._cache.items() if entry.route == node]:
            del self._cache[key]

    def forget_all(self) -> None:
        """Drop every cached route (the link to the LOCAL node reconnected: it may have restarted)."""
        self._generation += 1
        self._forget_all_at = self._generation
        self._cache.clear()

    def reap(self) -> int:
        """Drop cached routes this node no longer trusts (they need a round trip anyway)."""
        stale = [key for key, entry in self._cache.items() if not self._trusted(entry)]
        for key in stale:
            del self._cache[key]
        return len(stale)

    async def close(self) -> None:
        self._closed = True
        await self._reaper.stop()
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def local_handler(
    node: str,
    *,
    timeout_ms: int,
    group_timeout_ms: int,
    reaper_period_ms: int,
    max_groups: int = DEFAULT_MAX_GROUPS,
    clock: Clock = time.monotonic,
) -> LocalGroupingHandler:
    return LocalGroupingHandler(
        node,
        timeout_ms=timeout_ms,
        group_timeout_ms=group_timeout_ms,
        reaper_period_ms=reaper_period_ms,
        max_groups=max_groups,
        clock=clock,
    )


def remote_handler(
    node: str,
    request: Request,
    *,
    timeout_ms: int,
    group_timeout_ms: int,
    reaper_period_ms: int,
    max_groups: int = DEFAULT_MAX_GROUPS,
    clock: Clock = time.monotonic,
) -> RemoteGroupingHandler:
    return RemoteGroupingHandler(
        node,
        request,
        timeout_ms=timeout_ms,
        group_timeout_ms=group_timeout_ms,
        reaper_period_ms=reaper_period_ms,
        max_groups=max_groups,
        clock=clock,
    )
