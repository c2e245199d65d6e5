"""The checkers as Spark jobs, by name, in the order `brokerconf analyze` runs them."""

from . import downtime, fifo, groups, performance, slow_consumer, topic_fanout, total_queue

CHECKERS = {
    total_queue.NAME: total_queue.check,
    fifo.NAME: fifo.check,
    groups.NAME: groups.check,
    # topic fan-out computes the subscription facts once per Context; slow_consumer reuses them
    topic_fanout.NAME: topic_fanout.check,
    slow_consumer.NAME: slow_consumer.check,
    downtime.NAME: downtime.check,
    performance.LATENCY: performance.check_latency,
    performance.THROUGHPUT: performance.check_throughput,
}
