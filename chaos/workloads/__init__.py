"""Workloads: generators of client operations with unique, traceable message ids, recorded in a
history (queue, grouped queue, topic fan-out)."""

from .base import ClientFactory, outcome_of
from .queue import GroupedQueueWorkload, QueueWorkload
from .topic import TopicFanoutWorkload

__all__ = ["ClientFactory", "GroupedQueueWorkload", "QueueWorkload", "TopicFanoutWorkload", "outcome_of"]
