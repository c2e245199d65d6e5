"""How the clients' operations ended: Jepsen's ``stats`` checker as a brokerconf measurement.

For each operation kind ``f`` of the clients (the nemesis's steps are not counted): how many
completed ``ok``, ``fail`` and ``info`` (in doubt), and for the failed and the in-doubt ones the
most frequent error texts (`TOP_ERRORS`, with their counts). For the sends in doubt, how many of
their messages a client got anyway (a ``receive`` or ``drain`` that completed ok carried them:
the deliveries total_queue.py counts as dequeued) and how many never arrived. The send's
completion carries the message it was invoked with (chaos/history.py completes an op with its
invoked value), so the in-doubt messages are read from the ``info`` rows themselves.

Jepsen's stats checker calls a run invalid when some ``f`` never succeeded. Here it is a
measurement (shown beside the verdict, never merged into it): an experiment whose nemesis keeps
a broker down may rightly see no ok ack for a while, or for the whole of a short run, and what
the broker must not do is judged by the checks (total_queue.py, failover_downtime.py...). The
kinds that never succeeded are listed (``never_ok``) for a reader to weigh.

The facts come in two families, each split by the key that keeps it exact over a run too big for
one task (reports/checkers/split.py): the counts and error texts per op by ``client`` (an op's
invoke and completion stay together), the in-doubt messages by ``id`` (a send and every delivery
of its message stay together). Every distinct error text keeps its count in the facts: the run's
most frequent texts are not the most frequent of each part's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .history import Columns
from .protocol import Checker, Facts, Table
from .result import VALID, CheckResult, RunKey

NAME = "outcomes"
IN_DOUBT = "outcomes_in_doubt"
OUTCOMES = ("ok", "fail", "info")
#: the error texts shown per (f, outcome)
TOP_ERRORS = 3


def outcome_facts(c: Columns) -> dict:
    """Per client ``f``: its completions by outcome; per (f, fail | info): every distinct error
    text with its count (a missing text is None)."""
    done = c.done
    names = done.r.f.sorted_values()
    rank = done.r.f.rank()
    has_f = done.f >= 0
    counts = {}
    for outcome in OUTCOMES:
        picked = has_f & (done.type == done.r.type.code(outcome))
        counts[outcome] = np.bincount(rank[done.f[picked]], minlength=len(names) + 1)
    ops = [{"f": name, **{o: int(counts[o][k]) for o in OUTCOMES}}
           for k, name in enumerate(names) if any(counts[o][k] for o in OUTCOMES)]
    errors = []
    error_column = c.column("error")
    for outcome in ("fail", "info"):
        picked = has_f & (done.type == done.r.type.code(outcome))
        for k in np.unique(rank[done.f[picked]]).tolist():
            rows = done.rows[picked & (rank[done.f] == k)]
            texts = error_column.take(pa.array(c.original(rows))).cast(pa.string())
            for entry in pc.value_counts(texts).to_pylist():
                errors.append({"f": names[k], "type": outcome, "error": entry["values"], "count": int(entry["counts"])})
    # in the order `combine_outcomes` gives: a run judged whole and one combined from parts alike
    return {"ops": ops, "errors": sorted(errors, key=lambda e: _text_order((e["f"], e["type"], e["error"])))}


def combine_outcomes(parts: list[dict]) -> dict:
    """A run's outcome facts from its parts split by client: every count adds up."""
    ops: dict[str, dict] = {}
    errors: dict[tuple, int] = {}
    for part in parts:
        for row in part["ops"]:
            into = ops.setdefault(row["f"], {"f": row["f"], **{o: 0 for o in OUTCOMES}})
            for o in OUTCOMES:
                into[o] += row[o]
        for e in part["errors"]:
            errors[(e["f"], e["type"], e["error"])] = errors.get((e["f"], e["type"], e["error"]), 0) + e["count"]
    return {"ops": [ops[f] for f in sorted(ops)],
            "errors": [{"f": f, "type": t, "error": text, "count": n}
                       for (f, t, text), n in sorted(errors.items(), key=lambda item: _text_order(item[0]))]}


def _text_order(key: tuple) -> tuple:
    f, outcome, text = key
    return f, outcome, text is not None, text or ""


def in_doubt_facts(c: Columns) -> dict:
    """The distinct messages of the client sends that completed ``info``, and how many of them a
    receive or drain that completed ok carried."""
    carried = c.msgs & (c.id.codes >= 0)
    in_doubt = np.zeros(c.id.n_values, dtype=bool)
    in_doubt[c.id.codes[carried & c.f.eq("send") & c.type.eq("info")]] = True
    delivered = np.zeros(c.id.n_values, dtype=bool)
    delivered[c.id.codes[carried & c.f.isin(("receive", "drain")) & c.type.eq("ok")]] = True
    return {"messages": int(in_doubt.sum()), "delivered": int((in_doubt & delivered).sum())}


def combine_in_doubt(parts: list[dict]) -> dict:
    """Split by message id, every message lies in one part: the counts add up."""
    return {"messages": sum(p["messages"] for p in parts), "delivered": sum(p["delivered"] for p in parts)}


def judge(key: RunKey, outcomes: dict, in_doubt: dict) -> tuple[CheckResult, list[tuple]]:
    """The result (counts per f, top error texts, the in-doubt sends' fate) and the table's rows
    (run, target, f, ok, fail, info, then for sends the in-doubt messages delivered and not)."""
    top: dict[tuple[str, str], list] = {}
    for e in sorted(outcomes["errors"], key=lambda e: (-e["count"], e["error"] is None, e["error"] or "")):
        shown = top.setdefault((e["f"], e["type"]), [])
        if len(shown) < TOP_ERRORS:
            shown.append([e["error"], e["count"]])
    never = in_doubt["messages"] - in_doubt["delivered"]
    by_f, table = {}, []
    for row in outcomes["ops"]:
        f = row["f"]
        by_f[f] = {**{o: row[o] for o in OUTCOMES}, "fail_errors": top.get((f, "fail"), []),
                   "info_errors": top.get((f, "info"), [])}
        sends = f == "send"
        table.append((*key, f, row["ok"], row["fail"], row["info"], in_doubt["delivered"] if sends else None,
                      never if sends else None))
    stats = {"by_f": by_f, "never_ok": sorted(f for f, s in by_f.items() if not s["ok"]),
             "in_doubt_sends": {"messages": in_doubt["messages"], "delivered": in_doubt["delivered"],
                                "never_delivered": never}}
    if not by_f:
        return CheckResult(NAME, *key, VALID, "no completed client operation", applicable=False, stats=stats), table
    return CheckResult(NAME, *key, VALID, stats=stats), table


def describe(result: dict) -> list[str]:
    """A line per operation kind, one for the sends in doubt, one for the kinds never ok."""
    stats = result["stats"]
    lines = []
    for f, s in stats["by_f"].items():
        line = f"outcomes of {f}: {s['ok']} ok, {s['fail']} fail, {s['info']} info"
        for outcome in ("info", "fail"):
            if s[f"{outcome}_errors"]:
                texts = ", ".join(f"{text if text is not None else '(no error text)'!r} x{n}"
                                  for text, n in s[f"{outcome}_errors"])
                line += f"; {outcome}: {texts}"
        lines.append(line)
    doubt = stats["in_doubt_sends"]
    if doubt["messages"]:
        lines.append(f"sends in doubt: {doubt['messages']} messages, {doubt['delivered']} delivered nevertheless, "
                     f"{doubt['never_delivered']} never")
    if stats["never_ok"]:
        lines.append(f"never ok (Jepsen's stats would call the run invalid; here only shown): "
                     f"{', '.join(stats['never_ok'])}")
    return lines


def _as_registered(key: RunKey, facts_: dict, options: dict):
    result, table = judge(key, facts_[NAME], facts_[IN_DOUBT])
    return result, [], table


#: a measurement: shown beside the verdict, never merged into it (the module docstring says why)
CHECKER = Checker(NAME, _as_registered, measurement=True, facts=(
    Facts(NAME, outcome_facts, "client", combine_outcomes), Facts(IN_DOUBT, in_doubt_facts, "id", combine_in_doubt)),
    table=Table(NAME, "run string, target string, f string, ok bigint, fail bigint, info bigint, "
                      "in_doubt_delivered bigint, in_doubt_never_delivered bigint"),
    describe=describe)
