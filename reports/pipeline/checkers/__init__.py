"""The Spark SQL checkers are gone: every checker is one function in reports/checkers (issue 17).
`common` keeps the anomaly schema, the run record reader and re-exports for verdicts.py."""
