"""Errors the engine raises; protocol adapters turn them into their protocol's error form
(a STOMP ERROR frame, an MQTT reason code, an AMQP error condition)."""


class EngineError(Exception):
    """Base class; `str()` is a message fit to show a client."""


class InvalidDestination(EngineError):
    pass


class InvalidSelectorError(EngineError):
    pass


class NotAuthorized(EngineError):
    pass


class AuthenticationFailed(EngineError):
    pass


class ClientIdInUse(EngineError):
    pass


class ResourceLimitError(EngineError):
    """A destination's memory limit is reached and its policy refuses the send."""


class UnknownSubscription(EngineError):
    pass


class UnknownMessage(EngineError):
    pass


class TransactionError(EngineError):
    pass


class RoutingFailed(EngineError):
    """The broker could not route an accepted send (an Artemis-style cluster's grouping handler
    gave no decision in time: reference_broker/clustering); the send fails."""
