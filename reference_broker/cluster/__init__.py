"""Networks of brokers for the reference broker (ActiveMQ Classic, "Networks of Brokers",
../shared/spec/activemq-classic-networks-of-brokers.md).

A network connector on broker A opens a store-and-forward bridge to each peer its URI names
(`uris`: ``static:(...)`` / ``masterslave:(...)`` with the reconnect options). The bridge speaks
STOMP to the peer's STOMP listener -- one of the broker's own protocols:

* demand: every broker publishes the consumer set of each destination as a retained consumer
  advisory (`advisories`); a bridge subscribes to the peer's advisories and keeps one network
  consumer per destination on its own broker (conduit) or one per remote consumer (`demand`);
* forwarding: what a network consumer receives is sent to the peer with a receipt, and only
  acknowledged (removed) on the forwarding broker once the receipt says the peer has it (`bridge`);
* loops and TTLs: a forwarded message carries the brokers it passed through (``brokerPath``), a
  consumer announcement the brokers its demand crossed (`paths`).
* stuck messages: a queue policy's ``conditional_network_bridge_filter`` (replay when no
  consumers, replay delay, rate limit) loosens the loop rule for network consumers of its queues
  (`replay`; ActiveMQ "Stuck Messages", "Throttling a network consumer").

Why STOMP and not AMQP 1.0 links: the broker's AMQP side is proton in server mode; a client side
needs proton's reactor thread (or a hand-driven Transport) bridged into the asyncio loop, a larger
piece of work than a STOMP client on the same loop. STOMP receipts give the same store-and-forward guarantee; the network
prefetch is the STOMP ``activemq.prefetchSize`` of the duplex (pull) half and the local network
consumer's prefetch of the forwarding half.

A reference broker cannot bridge to (or from) ActiveMQ Classic: ActiveMQ's bridges speak OpenWire
and its demand travels as OpenWire advisory messages, neither of which the reference broker speaks.
"""
