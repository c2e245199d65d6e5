"""Checkers as pure functions of a history (Jepsen's split: the harness records, checkers judge).

These are the plain-Python checkers; the PySpark pipeline (issue 6) runs the same definitions at
scale and is tested against them."""
