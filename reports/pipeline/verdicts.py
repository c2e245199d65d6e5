"""Verdicts of the Spark pipeline: a run's checker results merged (reports/verdicts.py: ``false``
beats ``unknown`` beats ``true``, no evidence is ``unknown``), and what skipped malformed lines do
to them.

A run analysed without some of its lines (``--skip-malformed``) cannot be trusted either way: the
missing line might be the receive that makes a "lost" message arrive, or the send that makes an
"unexpected" one expected. Every result of such a run becomes ``unknown``, keeping what the
checker found (``valid_without_skipped_lines``) so the user can still look.
"""

from __future__ import annotations

from reports.check_plan import MEASUREMENTS
from reports.checkers.result import CheckResult
from reports.pipeline.load import Malformed
# The merge lives in reports/verdicts.py (one rule for every judge); re-exported for callers here.
from reports.verdicts import UNKNOWN, compose, merge

__all__ = ["UNKNOWN", "apply_skipped_lines", "merge", "run_verdicts"]


def apply_skipped_lines(results: list[CheckResult], skipped: dict[str, list[Malformed]]) -> list[CheckResult]:
    for result in results:
        lines = skipped.get(result.run)
        if not lines:
            continue
        result.stats["valid_without_skipped_lines"] = result.valid
        result.valid = UNKNOWN
        where = ", ".join(f"{m.file}:{m.line}" for m in lines[:3]) + (f" and {len(lines) - 3} more" if len(lines) > 3 else "")
        note = f"{len(lines)} malformed line(s) skipped ({where})"
        result.reason = f"{note}; {result.reason}" if result.reason else note
    return results


def run_verdicts(results: list[CheckResult], skipped: dict[str, list[Malformed]] | None = None) -> list[dict]:
    """One verdict per (run, target): the merge of its applicable checks, and every check's result."""
    by_run: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        by_run.setdefault((r.run, r.target), []).append(r)
    skipped = skipped or {}
    verdicts = []
    for (run, target), checks in sorted(by_run.items()):
        # the measurements (latency, throughput: always true) never decide a verdict: a run with
        # nothing else judged is unknown, as `brokerconf chaos run` says (reports/check_plan.py)
        judged = compose({c.checker: c.valid for c in checks if c.applicable and c.checker not in MEASUREMENTS})
        valid = UNKNOWN if run in skipped else judged["valid"]
        verdicts.append({
            "run": run, "target": target, "valid": valid,
            "failed": judged["failed"],
            "unknown": judged["unknown"],
            "not_applicable": sorted(c.checker for c in checks if not c.applicable),
            "skipped_lines": [m.describe() for m in skipped.get(run, [])],
            "checks": {c.checker: c.to_json() for c in checks},
        })
    return verdicts
