#!/usr/bin/env python3
"""Refresh the recorded cost of each work unit (conformance/unit_costs.json) from runs' timing
reports, so the next parallel run hands out its costliest units first (conformance/schedule.py).

    .venv/bin/python scripts/record_costs.py reports/out/<run>/timing.json [more timing.json ...]

A timing report comes from ``brokerconf run`` (``<run>/timing.json``) or from any pytest run with
``--timing-report FILE`` (e.g. ``./scripts/test.sh --timing-report /tmp/timing.json``); the
costs file itself reads as one too, so naming it first keeps the units a run did not have (the
test run's, when refreshing from a main job's report). A unit
seen in several reports keeps its largest cost (the slowest run is the one to plan for); units
under `KEEP_ABOVE_S` are left out: an unrecorded unit is scheduled as cheap unless it is a suite
module or a slow test (then it gets an estimate, conformance/schedule.py's `estimated_cost`, which
only moves a unit that ends within a second anyway to an earlier place in the run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.schedule import COSTS_FILE  # noqa: E402

#: seconds: cheaper units are not worth a line (an unrecorded unit is estimated, see above)
KEEP_ABOVE_S = 1.0


def merged_costs(reports: list[dict]) -> dict[str, float]:
    costs: dict[str, float] = {}
    for report in reports:
        # the suites' and tests' work units, and the main job's chaos runs (brokerconf/chaos_stage.py)
        for unit, seconds in [*report.get("units", {}).items(), *report.get("chaos", {}).items()]:
            costs[unit] = max(costs.get(unit, 0.0), float(seconds))
    return {unit: round(seconds, 1) for unit, seconds in sorted(costs.items()) if seconds >= KEEP_ABOVE_S}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, metavar="timing.json")
    parser.add_argument("--out", type=Path, default=COSTS_FILE, help=f"default: {COSTS_FILE}")
    args = parser.parse_args(argv)
    reports = []
    for path in args.reports:
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            parser.error(f"{path}: not a readable timing report ({exc})")
    costs = merged_costs(reports)
    args.out.write_text(json.dumps({"about": "seconds of test time per pytest-xdist work unit, from "
                                             "scripts/record_costs.py; read by conformance/schedule.py",
                                    "units": costs}, indent=1) + "\n")
    print(f"{len(costs)} units, {sum(costs.values()):.0f} s in all, written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
