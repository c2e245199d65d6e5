"""ObjectNames of ActiveMQ Classic's MBeans (destinations, their consumers), as the broker
builds them, shared by the single-broker handle and the network / shared-store nodes."""

from __future__ import annotations

import re


def _encode_name_part(part: str) -> str:
    # The same replacements ActiveMQ applies when it names MBeans (util.JMXSupport
    # .encodeObjectNamePart), so a pattern built from a destination name matches its MBean
    # and its `*` / `?` are not read as ObjectName wildcards.
    part = re.sub(r"[:,'\"]", "_", part)
    return part.replace("?", "&qe;").replace("=", "&amp;").replace("*", "&ast;")


def _split_destination(destination: str) -> tuple[str, str]:
    kind, sep, name = destination.partition("://")
    if not sep or kind not in ("queue", "topic") or not name:
        raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME")
    return kind, name


def destination_pattern(broker_name: str, destination: str) -> str:
    """ObjectName of a destination's MBean (BrokerMBeanSupport.createDestinationName layout)."""
    kind, name = _split_destination(destination)
    return (f"org.apache.activemq:type=Broker,brokerName={_encode_name_part(broker_name)},"
            f"destinationType={kind.capitalize()},destinationName={_encode_name_part(name)}")


def subscription_pattern(broker_name: str, destination: str) -> str:
    """ObjectName pattern of every consumer MBean on a destination (``endpoint=Consumer``)."""
    return destination_pattern(broker_name, destination) + ",endpoint=Consumer,*"
