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
from collections import OrderedDict
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


# --------------------------------------------------------------------------- names by pattern


class _NameNode:
    __slots__ = ("children", "sequence")

    def __init__(self) -> None:
        self.children: dict[str, _NameNode] = {}
        self.sequence: int | None = None  # set when a name ends here


class NameIndex:
    """The reverse question: which of a set of names (no wildcards meant) does a pattern match?
    A virtual topic asks it of the broker's queues for every message (its consumer queues
    ``Consumer.*.VirtualTopic.X``); a trie of the names answers by walking the pattern's
    branches, so queues under other names cost nothing. Agrees with `wildcard.matches`, and
    answers in the order the names were added."""

    def __init__(self) -> None:
        self._root = _NameNode()
        self._sequence = itertools.count()
        self.nodes_visited = 0

    def add(self, name: str) -> None:
        node = self._root
        for element in name.split("."):
            node = node.children.setdefault(element, _NameNode())
        if node.sequence is None:
            node.sequence = next(self._sequence)

    def discard(self, name: str) -> None:
        path: list[tuple[_NameNode, str]] = []
        node = self._root
        for element in name.split("."):
            child = node.children.get(element)
            if child is None:
                return
            path.append((node, element))
            node = child
        node.sequence = None
        for parent, element in reversed(path):
            child = parent.children[element]
            if child.children or child.sequence is not None:
                break
            del parent.children[element]

    def matching(self, pattern: str) -> list[str]:
        found: list[tuple[int, str]] = []
        elements = pattern.split(".")
        last = len(elements)
        stack: list[tuple[_NameNode, int, tuple[str, ...]]] = [(self._root, 0, ())]
        visited = 0
        while stack:
            node, depth, path = stack.pop()
            visited += 1
            if depth == last:
                if node.sequence is not None:
                    found.append((node.sequence, ".".join(path)))
                continue
            element = elements[depth]
            if element in _REST:  # everything below, this node included
                self._collect(node, path, found)
                continue
            if element == "*":
                stack.extend((child, depth + 1, path + (key,)) for key, child in node.children.items()
                             if key not in _REST)
            else:
                child = node.children.get(element)
                if child is not None:
                    stack.append((child, depth + 1, path + (element,)))
        self.nodes_visited += visited
        found.sort()
        return [name for _, name in found]

    def _collect(self, node: _NameNode, path: tuple[str, ...], found: list[tuple[int, str]]) -> None:
        stack = [(node, path)]
        while stack:
            node, path = stack.pop()
            self.nodes_visited += 1
            if node.sequence is not None:
                found.append((node.sequence, ".".join(path)))
            stack.extend((child, path + (key,)) for key, child in node.children.items())


class IndexedQueues(OrderedDict):
    """The broker's queues by canonical name (``queue://NAME``), keeping `names`, a NameIndex of
    their plain names, in step with every insertion and removal (`move_to_end` changes only the
    order)."""

    def __init__(self) -> None:
        super().__init__()
        self.names = NameIndex()

    @staticmethod
    def _plain(key: str) -> str:
        return key.partition("://")[2]

    def __setitem__(self, key: str, value) -> None:
        if key not in self:
            self.names.add(self._plain(key))
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.names.discard(self._plain(key))

    def pop(self, key: str, *default):
        if key in self:
            self.names.discard(self._plain(key))
        return super().pop(key, *default)

    def popitem(self):
        key, value = super().popitem()
        self.names.discard(self._plain(key))
        return key, value

    def clear(self) -> None:
        super().clear()
        self.names = NameIndex()

    def setdefault(self, key: str, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value
