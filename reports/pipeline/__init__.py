"""The PySpark analysis pipeline: histories (JSON lines or Parquet) -> checker jobs -> verdicts.

session.py  the SparkSession (local[*] or spark://HOST:PORT)     load.py      histories in, Parquet out
checkers/   one Spark job per checker                              verdicts.py  merging, skipped lines
analyze.py  `brokerconf analyze`                                   compare.py   runs x matrices table
"""
