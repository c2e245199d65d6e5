"""What the analysis writes and reads beside the checkers: the anomaly table's schema and the
run record beside a history. Every checker lives in reports/checkers (issue 17); `CheckResult`
and the verdict words are re-exported here for reports/pipeline/verdicts.py, which imports them
from this path.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import types as T

from reports.checkers.result import UNKNOWN, CheckResult, RunKey  # noqa: F401 (re-exported)

ANOMALY_SCHEMA = T.StructType([
    T.StructField("run", T.StringType()),
    T.StructField("target", T.StringType()),
    T.StructField("checker", T.StringType()),
    T.StructField("kind", T.StringType()),
    T.StructField("message_id", T.StringType()),
    T.StructField("ops", T.ArrayType(T.LongType())),
    T.StructField("detail", T.StringType()),
])


#: what `brokerconf chaos run` writes beside a run's history.jsonl (brokerconf/chaos_job.py)
RUN_RECORD = "verdict.json"


def read_run_record(history_file: str | None) -> dict:
    """The verdict.json beside a history file (a path or a file:// URI), or {} when there is none
    or it cannot be read: a history analysed on its own carries no record."""
    if not history_file:
        return {}
    parsed = urlparse(history_file)
    path = Path(unquote(parsed.path) if parsed.scheme == "file" else history_file).parent / RUN_RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    record["_path"] = str(path)
    return record
