"""Effective settings for one destination: the ActiveMQ policy entry that matches it and the
Artemis group settings (address-setting defaults overridden by destination parameters)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import AddressSetting, BrokerConfig, PolicyEntry
from .errors import InvalidDestination
from .names import QUEUE, DestinationName
from .wildcard import WildcardMap


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Artemis "Message Grouping": group-rebalance, group-buckets and group-first-key."""

    rebalance: bool = False
    buckets: int = -1  # -1 tracks every group id, 0 disables grouping, N hashes into N buckets
    first_key: str | None = None

    @property
    def enabled(self) -> bool:
        return self.buckets != 0


_BOOLS = {"true": True, "false": False}

# address-setting option -> GroupSettings field
_GROUP_OPTIONS = {
    "default_group_rebalance": "rebalance",
    "default_group_buckets": "buckets",
    "default_group_first_key": "first_key",
}


def _group_params(dest: DestinationName, base: GroupSettings) -> GroupSettings:
    rebalance, buckets, first_key = base.rebalance, base.buckets, base.first_key
    value = dest.param("group-rebalance")
    if value is not None:
        if value.lower() not in _BOOLS:
            raise InvalidDestination(f"group-rebalance must be true or false, got {value!r}")
        rebalance = _BOOLS[value.lower()]
    value = dest.param("group-buckets")
    if value is not None:
        try:
            buckets = int(value)
        except ValueError:
            raise InvalidDestination(f"group-buckets must be an integer, got {value!r}") from None
        if buckets < -1:
            raise InvalidDestination(f"group-buckets must be -1, 0 or positive, got {buckets}")
    value = dest.param("group-first-key")
    if value is not None:
        first_key = value or None
    return GroupSettings(rebalance, buckets, first_key)


class Policies:
    def __init__(self, config: BrokerConfig) -> None:
        self._queue_entries = WildcardMap(
            (e.pattern, e) for e in config.policy_entries if e.kind == QUEUE
        )
        self._topic_entries = WildcardMap(
            (e.pattern, e) for e in config.policy_entries if e.kind != QUEUE
        )
        self._default_queue = PolicyEntry(queue=">")
        self._default_topic = PolicyEntry(topic=">")
        self._address_settings: WildcardMap[AddressSetting] = WildcardMap(
            (s.match, s) for s in config.address_settings
        )

    def policy_for(self, dest: DestinationName) -> PolicyEntry:
        if dest.is_queue:
            return self._queue_entries.lookup(dest.name) or self._default_queue
        return self._topic_entries.lookup(dest.name) or self._default_topic

    def redistribution_delay_for(self, dest: DestinationName) -> int:
        """The ``redistribution_delay`` address setting of ``dest`` (ms; -1 never): the most
        specific matching setting that sets it (reference_broker/clustering)."""
        delay = -1
        for setting in self._address_settings.lookup_all(dest.name):
            if "redistribution_delay" in setting.model_fields_set:
                delay = setting.redistribution_delay
        return delay

    def groups_for(self, dest: DestinationName) -> GroupSettings:
        # Artemis merges every matching address-setting: a more specific match overrides only
        # the options it sets itself, the rest come from broader matches, then the defaults.
        merged: dict[str, object] = {}
        for setting in self._address_settings.lookup_all(dest.name):
            for option in setting.model_fields_set & _GROUP_OPTIONS.keys():
                merged[_GROUP_OPTIONS[option]] = getattr(setting, option)
        base = GroupSettings(**merged)
        return _group_params(dest, base) if dest.params else base
