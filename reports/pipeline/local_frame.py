"""A result table held as rows on the driver, turned into a Spark DataFrame only if someone asks.

The fused engine's results (anomalies, latency, throughput, downtime) are a few hundred rows built
on the driver. Creating a DataFrame from them and writing it through Spark cost about 0.4 s per
table per step here, several seconds per analysis for tables nobody queries; `analyze.write_small`
writes a LocalFrame with pyarrow directly. Any other use (``.collect()``, ``.where(...)``, ...)
creates the DataFrame once and delegates to it, so callers see a DataFrame either way.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T


class LocalFrame:
    def __init__(self, spark, rows: list[tuple], schema: str | T.StructType) -> None:
        self._spark, self.rows = spark, [tuple(r) for r in rows]
        self.schema = schema if isinstance(schema, T.StructType) else T._parse_datatype_string(schema)  # pylint: disable=protected-access
        self._frame = None

    def to_arrow(self) -> pa.Table:
        from pyspark.sql.pandas.types import to_arrow_schema

        names = self.schema.fieldNames()
        return pa.Table.from_pylist([dict(zip(names, r)) for r in self.rows], schema=to_arrow_schema(self.schema))

    def frame(self):
        if self._frame is None:
            self._frame = self._spark.createDataFrame(self.rows, self.schema)
        return self._frame

    def __getattr__(self, name: str):
        return getattr(self.frame(), name)
