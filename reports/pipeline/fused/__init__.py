"""The fused analysis engine (issue 6, the default): Spark schedules one task per history (a
history.jsonl, or one run's flat Parquet), and the task reads it (a C line scanner, or pyarrow)
and runs every checker of its run in one vectorized pass (numpy on integer codes). No row crosses
the JVM: the tasks return a few records per run, and write the flat Parquet back themselves.

* `load.py`   a history file into flat Arrow rows (one per message): the C scanner (`_scan.c`)
              for plain client lines with every other line taken by the SQL loader's rules, or
              pyarrow's typed read where the scanner is not built; lean Parquet written and read;
* `checks.py` the per-run pass: total queue, FIFO, groups, failover downtime, latency, throughput
              with the SQL engine's definitions (reports/pipeline/checkers/);
* `engine.py` the Spark job, and the pass's facts turned into the SQL engine's CheckResults and
              anomaly rows; topic fan-out and slow consumer are delegated to the SQL checkers for
              the runs that have topic subscriptions.

The SQL engine (`--engine sql`, a Spark SQL job per checker) stays: it is the reference the tests
hold this one to, and it spreads one run over many executors where this engine gives a run one
task.
"""
