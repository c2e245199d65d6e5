"""The checkers as Spark jobs, by name, in the order `brokerconf analyze` runs them."""

from . import downtime, fifo, groups, performance, total_queue

CHECKERS = {
    total_queue.NAME: total_queue.check,
    fifo.NAME: fifo.check,
    groups.NAME: groups.check,
    downtime.NAME: downtime.check,
    performance.LATENCY: performance.check_latency,
    performance.THROUGHPUT: performance.check_throughput,
}
