"""Topic routing through a subscription trie: which subscriptions a topic name reaches.

Patterns are ActiveMQ destination wildcards (engine/wildcard.py; MQTT filters arrive already
mapped, `+` -> `*`, `#` -> `>`). The trie has one level per `.`-separated element of a pattern;
finding the subscriptions of a name walks only the branches the name can take (its own element
and `*` at each level, plus the `>` entries met on the way), so the cost of a publish depends on
the length of the name and on the wildcard subscriptions that could match it, never on the number
of unrelated subscriptions. Brokers route this way: ActiveMQ's `DestinationMap` is such a tree,
and Mosquitto keeps a subscription tree per topic level.

The answers agree with `wildcard.matches` (a hypothesis test holds them together), including its
edge cases: `>` (or `#`) ends the match wherever it stands, so `a.>.b` behaves as `a.>` and `a.>`
also matches `a`; `*` matches one element, an empty one too, but not an element that is itself
`>` or `#`. Matches come back in the order the subscriptions were added, as the list scan they
replace delivered them.

Nothing here is cached per name: a name that was published once leaves nothing behind.
"""

from __future__ import annotations

import itertools
from typing import Generic, Iterator, TypeVar

T = TypeVar("T")

_REST = (">", "#")  # wildcard elements matching everything that follows (Artemis spells it `#`)


class _Node:
    __slots__ = ("children", "star", "here", "rest")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}  # literal element -> node
        self.star: _Node | None = None  # the `*` branch
        self.here: dict[int, object] = {}  # patterns ending at this node: sequence -> item
        self.rest: dict[int, object] = {}  # patterns with `>` at this level: sequence -> item

    def empty(self) -> bool:
        return not (self.children or self.star or self.here or self.rest)


class SubscriptionTrie(Generic[T]):
    """Items (subscriptions) keyed by wildcard pattern; `match(name)` finds those a name reaches.

    `nodes_visited` counts the trie nodes lookups have visited, so tests can check that routing
    work stays bounded without timing anything."""

    def __init__(self) -> None:
        self._root = _Node()
        # id(item) -> (pattern, sequence, item), in the order items were added
        self._where: dict[int, tuple[str, int, T]] = {}
        self._sequence = itertools.count()
        self.nodes_visited = 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item: object) -> bool:
        return id(item) in self._where

    def add(self, pattern: str, item: T) -> None:
        if id(item) in self._where:
            raise ValueError(f"already routed: {item!r}")
        sequence = next(self._sequence)
        node = self._root
        for element in pattern.split("."):
            if element in _REST:
                node.rest[sequence] = item
                break
            if element == "*":
                if node.star is None:
                    node.star = _Node()
                node = node.star
            else:
                node = node.children.setdefault(element, _Node())
        else:
            node.here[sequence] = item
        self._where[id(item)] = (pattern, sequence, item)

    def remove(self, item: T) -> None:
        """Forget `item`, pruning the branches it leaves empty (an unsubscribed name leaves nothing)."""
        pattern, sequence, _ = self._where.pop(id(item))
        path: list[tuple[_Node, str]] = []
        node = self._root
        for element in pattern.split("."):
            if element in _REST:
                del node.rest[sequence]
                break
            path.append((node, element))
            node = node.star if element == "*" else node.children[element]
        else:
            del node.here[sequence]
        for parent, element in reversed(path):
            child = parent.star if element == "*" else parent.children[element]
            if not child.empty():
                break
            if element == "*":
                parent.star = None
            else:
                del parent.children[element]

    def match(self, name: str) -> list[T]:
        """Items whose pattern matches the topic `name`, in the order they were added."""
        elements = name.split(".")
        last = len(elements)
        found: dict[int, object] = {}
        level = [self._root]
        visited = 0
        for depth in range(last + 1):
            if not level:
                break
            visited += len(level)
            following: list[_Node] = []
            for node in level:
                if node.rest:
                    found.update(node.rest)
                if depth == last:
                    if node.here:
                        found.update(node.here)
                    continue
                element = elements[depth]
                child = node.children.get(element)
                if child is not None:
                    following.append(child)
                if node.star is not None and element not in _REST:
                    following.append(node.star)
            level = following
        self.nodes_visited += visited
        if len(found) > 1:
            return [found[s] for s in sorted(found)]  # type: ignore[misc]
        return list(found.values())  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        """Every item, in the order they were added."""
        return (item for _, _, item in self._where.values())
