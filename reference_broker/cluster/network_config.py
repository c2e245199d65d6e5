"""A network connector's properties, declared once for the whole project: the "NetworkConnector
Properties" table of ActiveMQ "Networks of Brokers" in snake_case with the table's defaults
(`NetworkConnectorProperties`). The reference broker's configuration adds the connector's ``uri``
(`NetworkConnectorConfig`), which carries the "Static discovery" reconnect options; the harness's
broker-neutral topology model (conformance/topology.py, `NetworkConnectorOptions`) adds those
reconnect options as fields and renders them into each broker's own configuration.

This module imports neither the engine nor reference_broker.config (config.py imports it).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .uris import NetworkUri, parse_network_uri


def check_destination(destination: str) -> None:
    kind, sep, name = destination.partition("://")
    if not sep or kind not in ("queue", "topic") or not name:
        raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME (wildcards allowed)")


class NetworkConnectorProperties(BaseModel):
    """The table's properties. ``None`` for ``message_ttl`` / ``consumer_ttl`` means "not set": the
    broker then takes both from ``network_ttl`` (the table: networkTTL sets both).
    ``decrease_network_consumer_priority`` defaults to the table's ``True``; releases before 5.18
    defaulted to ``False`` (5.17 does)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "bridge"
    dynamic_only: bool = False
    decrease_network_consumer_priority: bool = True
    network_ttl: int = 1
    message_ttl: int | None = None
    consumer_ttl: int | None = None
    conduit_subscriptions: bool = True
    excluded_destinations: tuple[str, ...] = ()
    dynamically_included_destinations: tuple[str, ...] = ()
    statically_included_destinations: tuple[str, ...] = ()
    use_virtual_dest_subs: bool = False
    duplex: bool = False
    prefetch_size: int = 1000
    suppress_duplicate_queue_subscriptions: bool = False
    bridge_temp_destinations: bool = True
    always_sync_send: bool = False
    static_bridge: bool = False
    user_name: str | None = None
    password: str | None = None
    #: "Dynamic networks" (destinationFilter): which consumer advisories of the remote broker the
    #: bridge listens to, appended to ``ActiveMQ.Advisory.Consumer.`` (comma-separated; an entry
    #: already starting with that prefix is taken as is). None: every one (the property's ">")
    destination_filter: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"network connector name must match [A-Za-z0-9_.-]+: {value!r}")
        return value

    @field_validator("destination_filter")
    @classmethod
    def _destination_filter(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.>*-]+(,[A-Za-z0-9_.>*-]+)*", value):
            raise ValueError(f"destination_filter is a comma-separated list of advisory topic names: {value!r}")
        return value

    @field_validator("prefetch_size")
    @classmethod
    def _prefetch(cls, value: int) -> int:
        # The table: the network consumer does not poll, so its prefetch must be above zero.
        if value <= 0:
            raise ValueError(f"prefetch_size must be > 0 (network consumers do not poll), not {value}")
        return value

    @field_validator("network_ttl", "message_ttl", "consumer_ttl")
    @classmethod
    def _ttl(cls, value: int | None, info) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"{info.field_name} counts brokers a message or subscription may cross: >= 1, "
                             f"not {value}")
        return value

    @field_validator("excluded_destinations", "dynamically_included_destinations",
                     "statically_included_destinations", mode="before")
    @classmethod
    def _destinations(cls, value, info):
        if isinstance(value, str):
            raise ValueError(f"{info.field_name} is a tuple of destinations, not the string {value!r}")
        for destination in value:
            check_destination(destination)
        return value

    @model_validator(mode="after")
    def _checks(self):
        # The document's last N.B. of "Example Configuration": wildcards only in the excluded and
        # dynamically included lists; ActiveMQ would treat them literally elsewhere.
        for destination in self.statically_included_destinations:
            parts = destination.partition("://")[2].split(".")
            if "*" in parts or ">" in parts:
                raise ValueError(f"statically_included_destinations takes no wildcards (document, Example "
                                 f"Configuration N.B.): {destination!r}")
        if (self.user_name is None) != (self.password is None):
            raise ValueError("user_name and password go together (both unset, or both set)")
        return self


class NetworkConnectorConfig(NetworkConnectorProperties):
    """The reference broker's ``network_connectors`` entry: the properties and the connector's
    ``uri`` (``static:(...)``, ``masterslave:(...)`` or a discovery URI, with its options)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    uri: str

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        parse_network_uri(value)  # NetworkUriError (a ValueError) names what is wrong
        return value

    @property
    def parsed_uri(self) -> NetworkUri:
        return parse_network_uri(self.uri)

    @property
    def effective_message_ttl(self) -> int:
        return self.message_ttl if self.message_ttl is not None else self.network_ttl

    @property
    def effective_consumer_ttl(self) -> int:
        return self.consumer_ttl if self.consumer_ttl is not None else self.network_ttl
