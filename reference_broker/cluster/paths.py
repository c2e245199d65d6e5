"""Broker paths: which brokers a message or a consumer announcement has passed through.

ActiveMQ "Networks of Brokers", NetworkConnector Properties: networkTTL / messageTTL /
consumerTTL count the brokers a message or a subscription may pass through. A forwarded message
carries ``brokerPath`` (",A,B," -- the brokers that forwarded it, oldest first) so a bridge never
sends it back to a broker it came through (loop suppression) nor further than message_ttl; a
network consumer announces the brokers its demand crossed so peers apply consumer_ttl.

Network consumers that arrive over STOMP (the pull half of a duplex bridge) cannot be flagged by
the engine, so their subscription id carries the path and priority: ``NC|A,C|-6|3``.
"""

from __future__ import annotations

import re

PATH_PROPERTY = "brokerPath"
#: engine.selector's ActiveMQ-style prefix (not imported: this module stays free of the engine)
CONVERT_PREFIX = "convert_string_expressions:"
NETWORK_ID_PREFIX = "NC|"
#: ActiveMQ: decreased network consumer priority starts at -5 and drops by one per further hop.
NETWORK_PRIORITY_BASE = -5


def parse_path(value: object) -> tuple[str, ...]:
    if not isinstance(value, str) or not value:
        return ()
    return tuple(part for part in value.split(",") if part)


def format_path(path: tuple[str, ...]) -> str:
    return "," + ",".join(path) + "," if path else ""


def extend_path(value: object, broker: str) -> str:
    """The ``brokerPath`` a message gets when ``broker`` forwards it."""
    return format_path(parse_path(value) + (broker,))


def may_forward(path: tuple[str, ...], target: str, message_ttl: int) -> bool:
    """Whether a message that passed through ``path`` may be forwarded to ``target``: not back to
    a broker it came through, and only while it has crossed fewer than message_ttl brokers."""
    return target not in path and len(path) < message_ttl


def network_priority(path: tuple[str, ...], decrease: bool) -> int:
    """decreaseNetworkConsumerPriority: -5 for a consumer one broker away, -6 two away...; off,
    network consumers have the local consumers' default priority 0."""
    return NETWORK_PRIORITY_BASE - (len(path) - 1) if decrease else 0


def network_id(path: tuple[str, ...], priority: int, number: int) -> str:
    return f"{NETWORK_ID_PREFIX}{','.join(path)}|{priority}|{number}"


def network_subscription(consumer) -> tuple[tuple[str, ...], int] | None:
    """(path, priority) of a network consumer: an ``NC|`` id on a connection the broker trusts as a
    network bridge (``connection.network``, engine/network_principal.py). Any other client's id is
    just a name, whatever it starts with."""
    if not getattr(consumer.connection, "network", False):
        return None
    return parse_network_id(consumer.consumer_id)


def parse_network_id(consumer_id: str) -> tuple[tuple[str, ...], int] | None:
    """(path, priority) of a network subscription id, None for an ordinary consumer."""
    if not consumer_id.startswith(NETWORK_ID_PREFIX):
        return None
    try:
        path, priority, _ = consumer_id[len(NETWORK_ID_PREFIX):].split("|")
        return parse_path(path), int(priority)
    except ValueError:
        return None


def _like_literal(text: str) -> tuple[str, bool]:
    escaped = re.sub(r"([%_!])", r"!\1", text).replace("'", "''")
    return escaped, escaped != text.replace("'", "''")


def remote_message_selector(exclude: str, message_ttl: int, consumer_selector: str | None = None) -> str:
    """A JMS selector, evaluated by the peer, with `may_forward`'s rule for messages pulled to
    ``exclude``: its name not in ``brokerPath`` and fewer than message_ttl brokers in it (a path of
    n brokers has n + 1 commas)."""
    name, needs_escape = _like_literal(exclude)
    escape = " ESCAPE '!'" if needs_escape else ""
    too_long = "%" + ",%" * (message_ttl + 1)
    rule = (f"({PATH_PROPERTY} IS NULL OR ({PATH_PROPERTY} NOT LIKE '%,{name},%'{escape}"
            f" AND {PATH_PROPERTY} NOT LIKE '{too_long}'))")
    if not consumer_selector:
        return rule
    # A STOMP consumer's selector may carry ActiveMQ's convert_string_expressions: prefix, which
    # is only valid at the very start of a selector: it moves in front of the whole text.
    prefix = ""
    if consumer_selector.startswith(CONVERT_PREFIX):
        prefix, consumer_selector = CONVERT_PREFIX, consumer_selector[len(CONVERT_PREFIX):]
    return f"{prefix}{rule} AND ({consumer_selector})"


def without_convert_prefix(selector: str) -> str:
    """The selector without a leading convert_string_expressions: (a STOMP peer adds its own)."""
    return selector[len(CONVERT_PREFIX):] if selector.startswith(CONVERT_PREFIX) else selector


def split_remote_selector(text: str) -> tuple[str, str | None]:
    """The two parts of a `remote_message_selector`: (path rule, the remote consumer's own
    selector or None). Text that is not such a selector comes back whole, with None."""
    prefix = ""
    if text.startswith(CONVERT_PREFIX):
        prefix, text = CONVERT_PREFIX, text[len(CONVERT_PREFIX):]
    if not text.startswith(f"({PATH_PROPERTY} IS NULL OR "):
        return prefix + text, None
    rule_end = text.find("'))")
    if rule_end < 0:
        return text, None
    rule, rest = text[:rule_end + 3], text[rule_end + 3:]
    if rest.startswith(" AND (") and rest.endswith(")"):
        return rule, prefix + rest[len(" AND ("):-1]
    return rule, None
