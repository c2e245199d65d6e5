"""Artemis-style clustering of reference brokers (artemis-clusters.md): cluster connections over a
link of their own, server-side load balancing of queue messages to the nodes of the cluster
(OFF / STRICT / ON_DEMAND / OFF_WITH_REDISTRIBUTION), bindings propagated up to ``max_hops``,
message redistribution, scale-down on a graceful stop, UDP broadcast / discovery groups.

Not ActiveMQ Classic's networks of brokers: those are reference_broker/cluster.

Modules, one job each: `wire` (frames and messages on the link), `retry` (reconnect arithmetic),
`duplicates` (the duplicate-id cache of a receiving node), `bindings` (who has which queue and
consumers, with hop counts), `balancer` (initial distribution of one message), `link` (one TCP
cluster link: hello with the cluster credentials, forwards acknowledged by the target, an RPC),
`store_forward` (persistent forwards kept until acknowledged, resent after a restart),
`redistribution`, `udp_discovery`, and `service` (wires them into a running broker). The
clustered grouping handlers are `grouping` (its own module; the service calls it).
"""
