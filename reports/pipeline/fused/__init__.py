"""The fused analysis engine (issue 6): Spark reads and distributes the histories, and every
checker of one run runs in one vectorized pass (numpy/pandas) over that run's rows, inside Spark
(`groupBy("run", "target").applyInPandas`). One sort per run instead of a shuffle per checker.

* `load.py`   JSON lines read with ``value`` typed as a struct (no second JSON parse), flattened to
              one row per message; lean Parquet written back and read again;
* `checks.py` the per-run pass: total queue, FIFO, groups, failover downtime, latency, throughput
              with the SQL engine's definitions (reports/pipeline/checkers/);
* `engine.py` runs the pass, turns its facts into the SQL engine's CheckResults and anomaly rows;
              topic fan-out and slow consumer are delegated to the SQL checkers for the runs that
              have topic subscriptions.
"""
