"""The PySpark analysis pipeline: histories (JSON lines or Parquet) -> Spark tasks that run the
checkers of reports/checkers -> verdicts.

session.py  the SparkSession (local[*] or spark://HOST:PORT)     load.py      histories in, Parquet out
fused/      the tasks: scan, per-run facts, split by key           verdicts.py  merging, skipped lines
analyze.py  `brokerconf analyze`                                   compare.py   runs x matrices table
main_job.py the Spark stage of `brokerconf run`                    standalone.py a loopback cluster
"""
