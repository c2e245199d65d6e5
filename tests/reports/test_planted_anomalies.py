"""Hypothesis-generated queue histories with planted anomalies: the total-queue checker, in plain
Python and as the Spark job, must find exactly the planted ones (Jepsen's definitions, as in
reports/checkers/total_queue.py), nothing more and nothing less.

A clean history: producers send messages (each completes ok, or info when its outcome stays
unknown and the message may or may not arrive), consumers receive some of them, a final drain
receives the rest. Planted on top:
* lost: an ok send whose message is never received;
* unexpected: a receive of an id nobody sent;
* duplicated: a second receive of a delivered message;
* recovered: an info send whose message did arrive (reported, valid).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.checkers.total_queue import check_total_queue

from .histories import H, msg


@dataclass
class Plan:
    ok_sends: int
    info_delivered: int  # info sends that arrived: recovered
    info_lost: int       # info sends that never arrived: neither lost nor recovered
    lost: set[int] = field(default_factory=set)        # ok sends never received
    duplicated: set[int] = field(default_factory=set)  # ok sends received twice
    unexpected: int = 0
    in_drain: set[int] = field(default_factory=set)    # delivered by the drain rather than a consumer


@st.composite
def plans(draw) -> Plan:
    ok_sends = draw(st.integers(1, 30))
    plan = Plan(ok_sends, draw(st.integers(0, 4)), draw(st.integers(0, 4)))
    ids = st.integers(0, ok_sends - 1)
    plan.lost = draw(st.sets(ids, max_size=min(5, ok_sends)))
    plan.duplicated = draw(st.sets(ids, max_size=5)) - plan.lost
    plan.unexpected = draw(st.integers(0, 3))
    plan.in_drain = draw(st.sets(ids)) - plan.lost
    return plan


def build(plan: Plan, run: str = "planted") -> H:
    h = H(run)
    for i in range(plan.ok_sends):
        h.call(0, "send", msg(f"m{i}", seq=i))
    for i in range(plan.info_delivered + plan.info_lost):
        h.call(1, "send", msg(f"i{i}", producer=1, seq=i), "info")
    received = [f"m{i}" for i in range(plan.ok_sends) if i not in plan.lost and i not in plan.in_drain]
    received += [f"i{i}" for i in range(plan.info_delivered)]
    received += [f"x{i}" for i in range(plan.unexpected)]  # never sent by anyone
    received += [f"m{i}" for i in sorted(plan.duplicated)]
    for message_id in received:
        h.call(2, "receive", result=msg(message_id))
    h.call(3, "drain", result=[msg(f"m{i}") for i in sorted(plan.in_drain)])
    return h


def expected(plan: Plan) -> dict:
    return {"lost": sorted(f"m{i}" for i in plan.lost),
            "unexpected": sorted(f"x{i}" for i in range(plan.unexpected)),
            "duplicated": sorted(f"m{i}" for i in plan.duplicated),
            "recovered": sorted(f"i{i}" for i in range(plan.info_delivered)),
            "valid": not plan.lost and not plan.unexpected}


@given(plans())
@settings(max_examples=150, deadline=None)
def test_python_checker_finds_exactly_the_planted_anomalies(plan):
    result = check_total_queue(build(plan).lines, duplicates_allowed=True)
    want = expected(plan)
    assert sorted(result.lost) == want["lost"]
    assert sorted(result.unexpected) == want["unexpected"]
    assert sorted(result.duplicated) == want["duplicated"]
    assert sorted(result.recovered) == want["recovered"]
    assert result.valid is want["valid"]


@given(st.lists(plans(), min_size=1, max_size=4))
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_spark_job_finds_exactly_the_planted_anomalies(spark, tmp_path_factory, engine, plans_):
    from reports.pipeline.analyze import analyze
    from reports.checkers import total_queue

    root = tmp_path_factory.mktemp("planted")
    for n, plan in enumerate(plans_):
        build(plan, run=f"run{n}").write(root)
    output = analyze(spark, root, checkers=[total_queue.NAME], duplicates_allowed=True, engine=engine)
    found: dict[str, dict[str, list]] = {}
    for row in output.anomalies_df.collect():
        found.setdefault(row["run"], {}).setdefault(row["kind"], []).append(row["message_id"])
    results = {r.run: r for r in output.results}
    assert set(results) == {f"run{n}" for n in range(len(plans_))}
    for n, plan in enumerate(plans_):
        want = expected(plan)
        got = found.get(f"run{n}", {})
        for kind in ("lost", "unexpected", "duplicated", "recovered"):
            assert sorted(got.get(kind, [])) == want[kind], (n, kind)
        assert results[f"run{n}"].valid is want["valid"], n
