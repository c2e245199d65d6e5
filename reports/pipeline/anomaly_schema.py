"""The anomaly table's Spark schema. Every checker lives in reports/checkers (issue 17); a run's
record comes from its history (reports/run_record.py)."""

from __future__ import annotations

from pyspark.sql import types as T

ANOMALY_SCHEMA = T.StructType([
    T.StructField("run", T.StringType()),
    T.StructField("target", T.StringType()),
    T.StructField("checker", T.StringType()),
    T.StructField("kind", T.StringType()),
    T.StructField("message_id", T.StringType()),
    T.StructField("ops", T.ArrayType(T.LongType())),
    T.StructField("detail", T.StringType()),
])
