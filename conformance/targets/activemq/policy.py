"""Translate a `Scenario` into ActiveMQ Classic's own configuration (pure: strings in, strings out).

`render(scenario)` returns the pieces `ActiveMQProcess` pastes into ``activemq.xml``: the
``<policyEntry>`` elements, the broker plugins, whether the scheduler must run, and the
broker-wide memory limit in bytes (``<systemUsage><memoryUsage limit="N b">``).

How each scenario setting maps (ActiveMQ Classic 5.17 element and attribute names):

* destination pattern ``queue://X`` / ``topic://X`` -> ``<policyEntry queue="X">`` /
  ``topic="X"``; Classic uses the same wildcards (``.`` ``*`` ``>``).
* ``pending_message_limit`` / ``prefetch_rate_multiplier`` -> ``<pendingMessageLimitStrategy>``
  with ``constantPendingMessageLimitStrategy limit`` / ``prefetchRatePendingMessageLimitStrategy
  multiplier`` (slow-consumer document, "Pending Message Limit Strategy").
* ``eviction`` -> ``<messageEvictionStrategy>`` with ``oldestMessageEvictionStrategy``,
  ``oldestMessageWithLowestPriorityEvictionStrategy`` or ``uniquePropertyMessageEvictionStrategy
  propertyName`` (slow-consumer document, "Configuring the Eviction Policy").
* ``memory_limit`` -> ``memoryLimit="N b"``: PolicyEntry.setMemoryLimit is read through
  ``MemoryPropertyEditor``, which takes a byte count with an optional ``b`` (or kb/mb/gb).
* ``producer_flow_control`` -> ``producerFlowControl``.
* ``group_buckets`` (an Artemis address setting) -> ``<messageGroupMapFactory>``: N > 0 is
  ``messageGroupHashBucketFactory bucketCount="N"`` (group ids hashed into N buckets, as
  Artemis's buckets); -1 is ``simpleMessageGroupMapFactory`` (one entry per group id, no bound,
  as Artemis's -1). 0 (grouping off) has no Classic equivalent: `UnsupportedPolicy`.
* ``group_rebalance`` / ``group_first_key`` are Artemis-only (no Classic setting): written as an
  XML comment, never silently dropped; suites needing them require the ``groups.rebalance`` /
  ``groups.first_key`` capabilities, which the ActiveMQ target does not claim.
* ``maximum_redeliveries`` -> the broker's ``redeliveryPlugin``. Classic counts redeliveries in the
  *client* (OpenWire RedeliveryPolicy); a STOMP NACK instead is a poison ack (StompSubscription
  .onStompMessageNack sets POISON_ACK_TYPE), which sends the message straight to the dead-letter
  queue. The only broker-side equivalent of "redeliver N times, then dead-letter" is the
  redeliveryPlugin, which intercepts the dead-letter step and re-sends the message through the
  scheduler until its redelivery counter reaches ``maximumRedeliveries`` (RedeliveryPlugin
  .sendToDeadLetterQueue). So it is installed with ``sendToDlqIfMaxRetriesExceeded="true"`` and
  ``fallbackToDeadLetter="true"`` (destinations without an entry keep the stock behaviour),
  which needs ``schedulerSupport="true"``. 5.17's plugin refuses delays under 1000 ms
  (RedeliveryPlugin.validatePolicyDelay), so every redelivery on ActiveMQ waits 1 s: suites must
  allow for it.
* every queue entry gets ``prioritizedMessages="true"``, and a catch-all ``queue=">"`` entry is
  added when the scenario has none: Classic orders queues by JMSPriority only with that flag
  (default false), and a PolicyMap gives each destination its single most specific entry, so the
  flag has to be on every queue entry.
* ``Scenario.users`` -> ``simpleAuthenticationPlugin`` (anonymous access off), each user in group
  ``users``; no authorization plugin, so a logged-in user may use every destination.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conformance.scenario import DestinationPolicy, Scenario

#: 5.17's RedeliveryPlugin.validatePolicyDelay rejects initial / repeat delays below 1000 ms
REDELIVERY_DELAY_MS = 1000
#: where a message goes once its redeliveries run out: the default DeadLetterStrategy
#: (SharedDeadLetterStrategy) sends every destination's to one queue, ActiveMQ.DLQ
ACTIVEMQ_DEAD_LETTER_QUEUE = "queue://ActiveMQ.DLQ"

_EVICTION_ELEMENTS = {
    "oldest": "oldestMessageEvictionStrategy",
    "oldest_with_lowest_priority": "oldestMessageWithLowestPriorityEvictionStrategy",
    "unique_property": "uniquePropertyMessageEvictionStrategy",
}


class UnsupportedPolicy(ValueError):
    """A scenario setting ActiveMQ Classic cannot express; the message names it and why."""


@dataclass(frozen=True)
class ActiveMQConfig:
    """The scenario's part of activemq.xml, ready for `ActiveMQProcess`."""

    policy_entries_xml: str
    plugins_xml: str = ""
    scheduler_support: bool = False
    memory_limit_bytes: int | None = None
    not_applied: tuple[str, ...] = field(default=())  # settings written as comments only

    def process_options(self) -> dict:
        """Keyword arguments for `ActiveMQProcess` (see conformance/targets/activemq/process.py)."""
        return {
            "policy_entries_xml": self.policy_entries_xml,
            "plugins_xml": self.plugins_xml,
            "scheduler_support": self.scheduler_support,
            "memory_limit_bytes": self.memory_limit_bytes,
        }


def render(scenario: Scenario) -> ActiveMQConfig:
    """The activemq.xml fragments for ``scenario``; raises `UnsupportedPolicy` (what and why)."""
    _check_unique_patterns(scenario.policies)
    entries: list[str] = []
    not_applied: list[str] = []
    for policy in scenario.policies:
        xml, skipped = policy_entry_xml(policy)
        entries.append(xml)
        not_applied += skipped
    if not any(p.pattern == "queue://>" for p in scenario.policies):
        entries.append('<policyEntry queue=">" prioritizedMessages="true"/>')
    if scenario.memory_limit is not None and scenario.memory_limit <= 0:
        raise UnsupportedPolicy(f"scenario {scenario.name!r}: memory_limit must be a positive byte count, "
                                f"not {scenario.memory_limit!r}")
    plugins = [x for x in (redelivery_plugin_xml(scenario.policies), authentication_plugin_xml(scenario.users)) if x]
    return ActiveMQConfig(
        policy_entries_xml="\n".join(_indent(e, 10) for e in entries),
        plugins_xml="\n".join(_indent(p, 6) for p in plugins),
        scheduler_support=any(p.maximum_redeliveries is not None for p in scenario.policies),
        memory_limit_bytes=scenario.memory_limit,
        not_applied=tuple(not_applied),
    )


def policy_entry_xml(policy: DestinationPolicy) -> tuple[str, list[str]]:
    """One ``<policyEntry>`` for ``policy`` and the settings it could only leave as comments."""
    attrs = [f"{policy.kind}={_attr(policy.name)}"]
    if policy.kind == "queue":
        attrs.append('prioritizedMessages="true"')
    if policy.memory_limit is not None:
        if policy.memory_limit <= 0:
            raise UnsupportedPolicy(f"policy {policy.pattern!r}: memory_limit must be a positive byte count, "
                                    f"not {policy.memory_limit!r}")
        attrs.append(f'memoryLimit="{int(policy.memory_limit)} b"')
    if policy.producer_flow_control is not None:
        attrs.append(f'producerFlowControl="{"true" if policy.producer_flow_control else "false"}"')

    children: list[str] = []
    if policy.pending_message_limit is not None:
        if policy.pending_message_limit < -1:
            raise UnsupportedPolicy(f"policy {policy.pattern!r}: pending_message_limit must be -1 (no discarding), "
                                    f"0 or more, not {policy.pending_message_limit}")
        children.append("<pendingMessageLimitStrategy>"
                        f'<constantPendingMessageLimitStrategy limit="{int(policy.pending_message_limit)}"/>'
                        "</pendingMessageLimitStrategy>")
    if policy.prefetch_rate_multiplier is not None:
        if policy.prefetch_rate_multiplier < 0:
            raise UnsupportedPolicy(f"policy {policy.pattern!r}: prefetch_rate_multiplier must be >= 0, "
                                    f"not {policy.prefetch_rate_multiplier}")
        children.append("<pendingMessageLimitStrategy>"
                        f'<prefetchRatePendingMessageLimitStrategy multiplier="{policy.prefetch_rate_multiplier:g}"/>'
                        "</pendingMessageLimitStrategy>")
    if policy.eviction is not None:
        element = _EVICTION_ELEMENTS[policy.eviction]
        extra = f" propertyName={_attr(policy.eviction_property)}" if policy.eviction == "unique_property" else ""
        children.append(f"<messageEvictionStrategy><{element}{extra}/></messageEvictionStrategy>")
    if policy.group_buckets is not None:
        children.append(_group_map_factory_xml(policy))

    not_applied: list[str] = []
    # Artemis address settings with no Classic counterpart (see the module docstring).
    if policy.group_rebalance is not None:
        not_applied.append(f"{policy.pattern}: group_rebalance={policy.group_rebalance} (Artemis only)")
    if policy.group_first_key is not None:
        not_applied.append(f"{policy.pattern}: group_first_key={policy.group_first_key!r} (Artemis only)")
    children += [f"<!-- not applied: {_comment_safe(n)} -->" for n in not_applied]

    head = "<policyEntry " + " ".join(attrs)
    if not children:
        return head + "/>", not_applied
    body = "\n".join("  " + c for c in children)
    return f"{head}>\n{body}\n</policyEntry>", not_applied


def _group_map_factory_xml(policy: DestinationPolicy) -> str:
    buckets = policy.group_buckets
    if buckets == 0:
        raise UnsupportedPolicy(
            f"policy {policy.pattern!r}: group_buckets=0 (message grouping off) has no ActiveMQ Classic "
            "equivalent: Classic always pins JMSXGroupID groups; drop the setting for this target or "
            "run the suite against Artemis or the reference broker")
    if buckets == -1:
        factory = "<simpleMessageGroupMapFactory/>"
    elif buckets > 0:
        factory = f'<messageGroupHashBucketFactory bucketCount="{int(buckets)}"/>'
    else:
        raise UnsupportedPolicy(f"policy {policy.pattern!r}: group_buckets must be -1, 0 or a positive count, "
                                f"not {buckets}")
    return f"<messageGroupMapFactory>{factory}</messageGroupMapFactory>"


def redelivery_plugin_xml(policies: tuple[DestinationPolicy, ...]) -> str:
    """``<redeliveryPlugin>`` with one ``<redeliveryPolicy>`` per policy that sets maximum_redeliveries."""
    rows = []
    for p in policies:
        if p.maximum_redeliveries is None:
            continue
        if p.maximum_redeliveries < -1:
            raise UnsupportedPolicy(f"policy {p.pattern!r}: maximum_redeliveries must be -1 (no maximum) or "
                                    f"0 or more, not {p.maximum_redeliveries}")
        rows.append(f"<redeliveryPolicy {p.kind}={_attr(p.name)} maximumRedeliveries=\"{p.maximum_redeliveries}\" "
                    f'initialRedeliveryDelay="{REDELIVERY_DELAY_MS}" redeliveryDelay="{REDELIVERY_DELAY_MS}"/>')
    if not rows:
        return ""
    body = "\n".join(" " * 8 + r for r in rows)
    return ('<redeliveryPlugin fallbackToDeadLetter="true" sendToDlqIfMaxRetriesExceeded="true">\n'
            "  <redeliveryPolicyMap>\n"
            "    <redeliveryPolicyMap>\n"
            "      <redeliveryPolicyEntries>\n"
            f"{body}\n"
            "      </redeliveryPolicyEntries>\n"
            "    </redeliveryPolicyMap>\n"
            "  </redeliveryPolicyMap>\n"
            "</redeliveryPlugin>")


def authentication_plugin_xml(users: tuple[tuple[str, str], ...]) -> str:
    """``<simpleAuthenticationPlugin>`` for the scenario's users; empty (anonymous) when there are none."""
    if not users:
        return ""
    rows = "\n".join(f'    <authenticationUser username={_attr(u)} password={_attr(pw)} groups="users"/>'
                     for u, pw in users)
    return ('<simpleAuthenticationPlugin anonymousAccessAllowed="false">\n'
            f"  <users>\n{rows}\n  </users>\n"
            "</simpleAuthenticationPlugin>")


def _check_unique_patterns(policies: tuple[DestinationPolicy, ...]) -> None:
    seen: set[str] = set()
    for p in policies:
        if p.pattern in seen:
            # Classic's PolicyMap would pick one of the two entries, silently dropping the other.
            raise UnsupportedPolicy(f"policy pattern {p.pattern!r} is given twice; merge its settings into "
                                    "one DestinationPolicy")
        seen.add(p.pattern)


def _attr(value: str) -> str:
    """A quoted XML attribute value; ``>`` stays literal (legal in attributes) so wildcards read as written."""
    return '"' + value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;") + '"'


def _comment_safe(text: str) -> str:
    return text.replace("--", "- -")


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.splitlines())
