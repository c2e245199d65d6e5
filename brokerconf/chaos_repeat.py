"""`brokerconf chaos run FILE... --repeat N`: run each experiment N times and print, side by side,
the median and the spread (min..max) of what each run measured (issue 18, section 5: "each figure
is the median of at least five runs ... with the spread"):

- lock-loss faults (run_stats.lock_loss, chaos/lockloss_fault.py): detection (fault -> the master
  stopped answering), its listener closed, takeover (fault -> another node answered), the time two
  nodes answered and two nodes listened at once; a fault
  whose end never came while watched counts as "never" and is shown as such, not dropped;
- the total_queue checker: messages lost and duplicated; and the verdict.
"""

from __future__ import annotations

import statistics

__all__ = ["figures", "render_table"]

COLUMNS = ("detection_s", "closed_s", "takeover_s", "overlap_s", "open_overlap_s", "lost", "duplicated")


def figures(verdict: dict) -> dict:
    """One run's figures from its verdict (the first lock-loss fault of the run when it had several)."""
    stats = verdict.get("run_stats") or {}
    faults = stats.get("lock_loss") or []
    total = (verdict.get("checks") or {}).get("total_queue") or {}
    row = {"valid": verdict.get("valid"), "faults": len(faults),
           "lost": len(total["lost"]) if "lost" in total else None,
           "duplicated": len(total["duplicated"]) if "duplicated" in total else None}
    first = faults[0] if faults else {}
    for key in ("detection_s", "closed_s", "takeover_s", "overlap_s", "open_overlap_s"):
        row[key] = first.get(key) if faults else None
        row[f"{key}_never"] = bool(faults) and "overlap" not in key and first.get(key) is None
    return row


def _cell(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    never = sum(1 for r in rows if r.get(f"{key}_never"))
    if not values:
        return f"never ({never}/{len(rows)})" if never else "-"
    median = statistics.median(values)
    fmt = (lambda v: f"{v:.1f}") if key.endswith("_s") else (lambda v: f"{v:g}")
    text = f"{fmt(median)} [{fmt(min(values))}..{fmt(max(values))}]"
    return text + (f" never {never}/{len(rows)}" if never else "")


def render_table(results: dict[str, list[dict]]) -> str:
    """``label -> [figures of each run]`` as a fixed-width table: median [min..max] per column."""
    header = ("experiment", "runs", "valid", "detection s", "listener closed s", "takeover s", "two serving s",
              "two listening s", "lost", "duplicated")
    lines = [header]
    for label, rows in results.items():
        valid = f"{sum(1 for r in rows if r['valid'] is True)}/{len(rows)}"
        lines.append((label, str(len(rows)), valid, *(_cell(rows, key) for key in COLUMNS)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
