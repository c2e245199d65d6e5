"""The run's checker list: which checks judge it, with which options, and why the others do not,
as one typed record written into the history's header when the run starts.

`brokerconf chaos run` plans the checks from the experiment before the run (the plan only needs
the experiment: its [checkers] section, its workload's kind, its nemeses, its cluster settings)
(reports/check_plan.py, `checker_list_for`) and hands the list to the harness, which writes it in the experiment record (chaos/history.py,
the first line, so `reports/run_record.read_record` reads it with the header). Every judge then
reads the list back instead of deciding again: `chaos run`'s (reports/judge.py), the Spark
pipeline's (reports/pipeline/fused/engine.py) and so the main job's, which shows both.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from reports.checkers import registry

FORMAT = 1


class CheckerListError(ValueError):
    """A history's checker list names a checker this version does not have, or is malformed."""


class PlannedCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    options: dict[str, Any] = {}


class CheckerList(BaseModel):
    """``checks``: the planned checks in the judges' order, each with its options; ``skipped``:
    check -> why it does not judge this run (shown, never merged)."""
    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = FORMAT
    checks: list[PlannedCheck]
    skipped: dict[str, str] = {}

    @classmethod
    def parse(cls, value: dict) -> "CheckerList":
        try:
            parsed = cls.model_validate(value)
        except ValidationError as exc:
            raise CheckerListError(f"the history's checker list is malformed: {exc}") from None
        unknown = [c.name for c in parsed.checks if c.name not in registry.CHECKERS]
        if unknown:
            raise CheckerListError(f"the history's checker list names {unknown}, not registered checkers "
                                   f"({', '.join(registry.CHECKERS)})")
        for check in parsed.checks:
            wrong = set(check.options) - set(registry.option_defaults(registry.CHECKERS[check.name]))
            if wrong:
                raise CheckerListError(f"the history's checker list gives {check.name} options it does not take: "
                                       f"{sorted(wrong)}")
        return parsed
