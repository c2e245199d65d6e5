"""The shipped experiments (chaos/experiments/*.toml), run from pytest in short versions, each
judged by the same checkers as `brokerconf chaos run`. A failing verdict fails the test with the
checkers' summary; the verdict and the history's first and last lines are attached to the
pytest report (and to Allure when it records).

Besides "valid", each test asserts that the experiment exercised what it is about (faults
happened, the slow subscriber did lose messages, every client was measured): a run where the
nemesis never struck would otherwise pass vacuously.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chaos
from chaos.experiment import run_experiment
from chaos.experiment_file import load_experiment, with_overrides
from conformance.requirements import skip_or_fail, target_requirement
from conformance.targets.registry import resolve
from reports.check_plan import RECORD_CHECKS, checker_list_for, plan_checks
from reports.judge import judge_run
from reports.run_record import read_record

EXPERIMENTS = Path(chaos.__file__).resolve().parent / "experiments"
# an experiment runs for its duration plus broker start-up, drain and checkers
pytestmark = pytest.mark.timeout(300)


def _attach(request, out_dir: Path, verdict: dict) -> None:
    lines = (out_dir / "history.jsonl").read_text().splitlines()
    excerpt = "\n".join(lines[:20] + ["..."] + lines[-20:])
    request.node.add_report_section("call", "verdict", json.dumps(verdict, indent=2, default=str)[:20000])
    request.node.add_report_section("call", "history excerpt", excerpt)
    try:
        import allure
    except ImportError:
        return
    allure.attach(json.dumps(verdict, indent=2, default=str), "verdict.json", allure.attachment_type.JSON)
    allure.attach(excerpt, "history excerpt", allure.attachment_type.TEXT)
    # the timeline, latency / throughput plots and anomalies, as the run's own page
    allure.attach.file(verdict["report"], "report (plots)", allure.attachment_type.HTML)
    if (out_dir / "transport.jsonl").is_file():  # failover clients' transport events
        allure.attach.file(str(out_dir / "transport.jsonl"), "transport events", allure.attachment_type.TEXT)


def run_and_judge(exp, out_dir: Path, progress=None) -> dict:
    """Run the experiment, then judge its history as `brokerconf chaos run` does (reports/judge.py):
    with the run's checker list planned at the start and written into the history's header, which
    the judge reads back (the checks it applied are the list's)."""
    listed = checker_list_for(exp.model_dump(mode="json"))
    run_experiment(exp, out_dir, progress=progress or (lambda line: None), checkers=listed)
    verdict = judge_run(out_dir)
    plan = plan_checks(read_record(out_dir / "history.jsonl"))
    assert plan.source == "history" and set(plan.options) == {c["name"] for c in listed["checks"]}
    assert set(verdict["checks"]) - set(RECORD_CHECKS) <= set(plan.options), sorted(verdict["checks"])
    return verdict


def _run(request, tmp_path, file_name: str, *, duration: float, target: str | None = None,
         requirement: str | None = None) -> dict:
    exp = with_overrides(load_experiment(EXPERIMENTS / file_name), duration_s=duration, target=target)
    target = resolve(exp.target.name)
    available, why = target.availability()
    if not available:
        skip_or_fail(requirement or target_requirement(target), why)  # only a broker that is not installed here skips
    verdict = run_and_judge(exp, tmp_path, progress=lambda line: None)
    _attach(request, tmp_path, verdict)
    assert verdict["valid"] is True, "\n".join(verdict["summary"])
    page = Path(verdict["report"]).read_text()
    assert "<svg" in page and verdict["run"] in page
    return verdict


@pytest.mark.slow
def test_experiment_1_reference_kill_restart(request, tmp_path):
    # kills at 5 s and 11 s; the second moves by as long as the first restart took (the next
    # kill comes every_s after the heal) and still heals 3 s before the end if that took < 5 s
    # (a CI run's restart took over 2 s, and a 17 s run then struck once)
    verdict = _run(request, tmp_path, "reference-kill-restart.toml", duration=20)
    assert verdict["run_stats"]["faults"] >= 2
    total = verdict["checks"]["total_queue"]
    assert total["enqueued"] > 0 and not total["lost"]
    downtime = verdict["checks"]["failover_downtime"]
    assert downtime["faults"] and all(f["downtime_ms"] for f in downtime["faults"])
    # The failover transports' own view (transport.jsonl beside the history). Every worker
    # connected ("resumed" on its first connect) and connected again after a kill: its client
    # resumed, or the workload replaced a client whose operation was in doubt and the new one
    # connected. The kills interrupted connections that the transports noticed themselves.
    transport = verdict["run_stats"]["transport_events"]
    workers = {"producer-0", "producer-1", "consumer-0", "consumer-1"}
    assert workers <= set(transport) and all(transport[w].get("resumed", 0) >= 2 for w in workers), transport
    assert sum(kinds.get("interrupted", 0) for kinds in transport.values()) >= 1, transport
    lines = [json.loads(line) for line in (tmp_path / "transport.jsonl").read_text().splitlines()]
    assert lines and all(0 < e["time"] and e["worker"] in transport for e in lines), lines[:20]
    assert any(line.startswith("failover transport events") for line in verdict["summary"])
    # one broker: every accepted operation names node A (issue 18; the experiment's address map)
    served = {e["node"] for e in map(json.loads, (tmp_path / "history.jsonl").read_text().splitlines())
              if e["type"] == "ok" and e["f"] in ("send", "receive", "ack")}
    assert served == {"A"}, served


@pytest.mark.slow
@pytest.mark.real_broker
def test_experiment_2_activemq_shared_store_failover(request, tmp_path):
    verdict = _run(request, tmp_path, "activemq-shared-store-failover.toml", duration=20)
    assert verdict["run_stats"]["faults"] >= 1 and verdict["run_stats"]["topology"] == "shared-store"
    assert not verdict["checks"]["total_queue"]["lost"]
    kills = [f for f in verdict["checks"]["failover_downtime"]["faults"] if f["f"] == "kill"]
    # The first fault hits node A, the master the group started with; every client found the
    # new master (no one left in never_recovered).
    assert kills and kills[0]["node"] == "A"
    assert all(f["downtime_ms"] and not f["never_recovered"] for f in kills), "\n".join(verdict["summary"])
    # Issue 18: every accepted operation names the broker that served it, and the failover moved
    # the clients from A to B with one master at a time.
    split = verdict["checks"]["split_brain"]
    assert split["valid"] is True and split["stats"]["unnamed"] == 0, "\n".join(verdict["summary"])
    assert split["stats"]["nodes"] == ["A", "B"] and split["stats"]["handovers"] >= 1, split["stats"]


@pytest.mark.slow
@pytest.mark.parametrize("target", [None, pytest.param("artemis:process", marks=pytest.mark.real_broker)])
def test_experiment_3_client_partition(request, tmp_path, target):
    if target is not None and not resolve(target).availability()[0]:
        from conformance.requirements import skip_or_fail

        skip_or_fail("artemis", resolve(target).availability()[1])
    verdict = _run(request, tmp_path, "client-partition.toml", duration=17, target=target)
    assert verdict["run_stats"]["faults"] == 1
    partition = [f for f in verdict["checks"]["failover_downtime"]["faults"] if f["f"] == "partition"]
    # No send can be confirmed through the cut: every producer's first success came after the
    # ten-second partition was healed. (A consumer may be served from its prefetch meanwhile.)
    sends = {c: ms for c, ms in partition[0]["downtime_ms"].items() if c.startswith("producer-")} if partition else {}
    assert sends and min(sends.values()) >= 10_000 * 0.9, "\n".join(verdict["summary"])


@pytest.mark.slow
@pytest.mark.real_broker
def test_artemis_kill_restart_keeps_every_confirmed_send(request, tmp_path):
    # the first kill at 3 s, the next 3 s after the JVM is back: two kills when a restart takes
    # under about 10 s, at least one on a machine slower than that
    verdict = _run(request, tmp_path, "artemis-kill-restart.toml", duration=20, requirement="artemis")
    assert verdict["run_stats"]["faults"] >= 1
    total = verdict["checks"]["total_queue"]
    assert total["enqueued"] > 0 and not total["lost"], "\n".join(verdict["summary"])
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    # The kills struck the JVM: each SIGKILLed a pid, and the restart that healed it runs another.
    kills = [e["value"] for e in history if e["f"] == "kill" and e["value"].get("phase") == "end"]
    starts = [e["value"] for e in history if e["f"] == "start" and e["value"].get("phase") == "end"]
    assert len(kills) == len(starts) == verdict["run_stats"]["faults"], (kills, starts)
    assert all(k["pid"] != s["pid"] for k, s in zip(kills, starts)), (kills, starts)
    # How many confirmed, unconsumed messages each kill left in the journal is not asserted: the one
    # consumer often keeps up with the three producers, so a kill may find no backlog (CI saw
    # [65, 0] and [0, 0, 0]). No confirmed send lost is the total-queue verdict above; the workload
    # has no consumer rate limit yet to make a backlog certain (noted for the next session).
    # Every client lost its connection at every kill and found the restarted broker at the same
    # address: each worker connected once, then again after each kill (its transport resumed, or
    # the workload replaced a client whose operation was in doubt and the new one connected; the
    # second is the usual case here, so "interrupted" events are not required).
    downtime = verdict["checks"]["failover_downtime"]
    assert all(f["downtime_ms"] and not f["never_recovered"] for f in downtime["faults"]), "\n".join(verdict["summary"])
    transport = verdict["run_stats"]["transport_events"]
    workers = {"producer-0", "producer-1", "producer-2", "consumer-0"}
    assert workers <= set(transport), transport
    assert all(transport[w].get("resumed", 0) >= 1 + len(kills) for w in workers), transport


@pytest.mark.slow
@pytest.mark.parametrize("target", ["reference", pytest.param("activemq", marks=pytest.mark.real_broker)])
def test_experiment_4_slow_subscriber_discards_match_the_broker(request, tmp_path, target):
    verdict = _run(request, tmp_path, "slow-topic-subscriber.toml", duration=10, target=target)
    subscribers = verdict["checks"]["topic_fanout"]["subscribers"]
    assert subscribers["0"]["observed_discards"] > 0  # the slow one (through the proxy) lost messages
    assert all(r["broker_discards"] == r["observed_discards"] for r in subscribers.values())


@pytest.mark.slow
def test_failed_nemesis_step_makes_the_verdict_unknown(tmp_path, monkeypatch):
    from chaos.nemesis.base import NemesisError
    from chaos.nemesis.process import ProcessNemesis

    def refuse(self, f, **params):
        raise NemesisError(f"{f}: refused by the test")

    monkeypatch.setattr(ProcessNemesis, "invoke", refuse)
    exp = with_overrides(load_experiment(EXPERIMENTS / "reference-kill-restart.toml"), duration_s=9)
    verdict = run_and_judge(exp, tmp_path, progress=lambda line: None)
    assert verdict["run_stats"]["faults"] == 0
    assert verdict["checks"]["nemesis_schedule"]["errors"][0].startswith("kill at ")
    assert verdict["valid"] == "unknown"  # the queue itself lost nothing, but the kill never happened
