"""Jepsen's verdict merge, in one place for every judge in reports/ (the plain-Python judge of a
run, reports/judge.py, and the Spark pipeline, reports/pipeline/verdicts.py).

A verdict is ``True`` (valid), ``False`` (an anomaly was found) or ``"unknown"`` (the checker
could not tell). Merging several: false beats unknown beats true, as Jepsen's
``checker/merge-valid`` does. No verdict at all is ``unknown``: no evidence is not a pass (a run
whose every checker was left out judged nothing).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

UNKNOWN = "unknown"
VALID_VALUES = (True, False, UNKNOWN)
_RANK = {False: 0, UNKNOWN: 1, True: 2}


def merge(values: Iterable[Any]) -> Any:
    """False beats unknown beats true; nothing to merge is ``unknown``. Anything else is refused:
    a checker that returned e.g. ``None`` or ``"true"`` is a bug to see, not a verdict to guess."""
    values = list(values)
    if not values:
        return UNKNOWN
    for value in values:
        if value not in _RANK:  # by equality: numpy's booleans (the fused engine) are verdicts too
            raise ValueError(f"a verdict is true, false or 'unknown', not {value!r}")
    return min(values, key=lambda v: _RANK[v])


def compose(results: Mapping[str, Any]) -> dict:
    """Jepsen's ``checker/compose``: named results (each a verdict, or a mapping with ``valid``)
    into one verdict, ``valid`` their merge, with the names that made it false or unknown. Every
    judge of a run (reports/judge.py, the Spark pipeline's reports/pipeline/verdicts.py) and the
    main job's chaos stage (brokerconf/chaos_stage.py) compose the same way."""
    values = {name: r.get("valid") if isinstance(r, Mapping) else r for name, r in results.items()}
    return {"valid": merge(values.values()),
            "failed": sorted(name for name, v in values.items() if v is False),
            "unknown": sorted(name for name, v in values.items() if v == UNKNOWN)}
