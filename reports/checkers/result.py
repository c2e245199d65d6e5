"""What a checker returns for one run, and Jepsen's three verdicts.

``valid`` is ``True``, ``False`` or ``"unknown"`` (Jepsen's checkers: unknown when the history
cannot tell, e.g. no final drain). ``applicable`` False: the run has nothing this checker can
judge (no fault, no queue...), and the run's verdict leaves it out of the merge.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reports.verdicts import UNKNOWN  # the one verdict vocabulary, with the merge

VALID, INVALID = True, False
RunKey = tuple[str, str]  # (run, target)


@dataclass
class CheckResult:
    checker: str
    run: str
    target: str
    valid: Any  # True | False | "unknown"
    reason: str = ""
    applicable: bool = True
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def anomaly(key: RunKey, checker: str, kind: str, message_id, ops: list, detail: str | None) -> dict:
    """One anomaly row (reports/pipeline/analyze.py writes them to anomalies.parquet)."""
    return {"run": key[0], "target": key[1], "checker": checker, "kind": kind, "message_id": message_id,
            "ops": [int(i) for i in ops], "detail": detail}


def count_kinds(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["kind"]] = out.get(r["kind"], 0) + 1
    return out


def count_by_run(rows: list[dict]) -> dict[RunKey, dict[str, int]]:
    """{(run, target): {kind: count}} for anomaly rows."""
    out: dict[RunKey, dict[str, int]] = {}
    for r in rows:
        counts = out.setdefault((r["run"], r["target"]), {})
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    return out


def describe_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()) if n)
