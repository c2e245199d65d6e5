"""One network connector's configuration: the "NetworkConnector Properties" table of ActiveMQ
"Networks of Brokers" in snake_case with the table's defaults (the same field names as
conformance/targets/activemq_network.py's NetworkConnectorOptions), plus the connector's ``uri``
(`uris`) which carries the "Static discovery" reconnect options.

This module imports neither the engine nor reference_broker.config (config.py imports it).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .uris import NetworkUri, parse_network_uri


class NetworkConnectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=True)

    uri: str
    name: str = Field(default="bridge", pattern=r"^[A-Za-z0-9_.-]+$")
    dynamic_only: bool = False
    # The table's default is true (5.18 on); ActiveMQ 5.17 itself defaults to false.
    decrease_network_consumer_priority: bool = True
    network_ttl: int = Field(default=1, ge=1)
    message_ttl: int | None = Field(default=None, ge=1)  # None: network_ttl ("sets both")
    consumer_ttl: int | None = Field(default=None, ge=1)
    conduit_subscriptions: bool = True
    excluded_destinations: tuple[str, ...] = ()
    dynamically_included_destinations: tuple[str, ...] = ()
    statically_included_destinations: tuple[str, ...] = ()
    use_virtual_dest_subs: bool = False
    duplex: bool = False
    # The table: network consumers do not poll, so the prefetch must be above zero.
    prefetch_size: int = Field(default=1000, gt=0)
    suppress_duplicate_queue_subscriptions: bool = False
    bridge_temp_destinations: bool = True
    always_sync_send: bool = False
    static_bridge: bool = False
    user_name: str | None = None
    password: str | None = None

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        parse_network_uri(value)  # NetworkUriError (a ValueError) names what is wrong
        return value

    @field_validator("excluded_destinations", "dynamically_included_destinations", "statically_included_destinations")
    @classmethod
    def _destinations(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for destination in value:
            kind, sep, name = destination.partition("://")
            if not sep or kind not in ("queue", "topic") or not name:
                raise ValueError(f"destination {destination!r} must be queue://NAME or topic://NAME")
        return value

    @model_validator(mode="after")
    def _checks(self) -> "NetworkConnectorConfig":
        # The document's last N.B. of "Example Configuration": wildcards only in the excluded and
        # dynamically included lists.
        for destination in self.statically_included_destinations:
            parts = destination.partition("://")[2].split(".")
            if "*" in parts or ">" in parts:
                raise ValueError(f"statically_included_destinations takes no wildcards: {destination!r}")
        if (self.user_name is None) != (self.password is None):
            raise ValueError("user_name and password go together (both unset, or both set)")
        return self

    @property
    def parsed_uri(self) -> NetworkUri:
        return parse_network_uri(self.uri)

    @property
    def effective_message_ttl(self) -> int:
        return self.message_ttl if self.message_ttl is not None else self.network_ttl

    @property
    def effective_consumer_ttl(self) -> int:
        return self.consumer_ttl if self.consumer_ttl is not None else self.network_ttl
