"""Which faults take a client's broker away is declared once, as a trait of the fault kind
(chaos/experiment_file.py `FaultKind.takes_broker_away`), and read by the failover-downtime
checker's rule (which runs it applies to) and by the run record (which nemesis lines of an old
history are faults). Before, the checker kept its own list of kind names (``OUTAGE_FAULTS``) and
the run record a second one beside it (``_OTHER_FAULTS``); old histories, whose nemesis lines carry
the kinds' names, must be judged as before.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chaos.experiment_file import FAULT_KINDS, OUTAGE_FAULTS, takes_broker_away
from chaos.history import HARNESS, HARNESS_EXPERIMENT, NEMESIS
from reports.check_plan import derive_plan
from reports.checkers import failover_downtime
from reports.run_record import record_of, record_of_files

ROOT = Path(__file__).resolve().parents[2]

#: the checker's own list before the trait (reports/checkers/failover_downtime.py), written here once
OLD_OUTAGE_FAULTS = {"kill", "stop", "pause", "partition"}
#: the run record's list of the other faults an old history's nemesis lines name
OLD_OTHER_FAULTS = {"latency", "bandwidth", "reset_peer"}


def test_the_kinds_that_take_the_broker_away_are_the_checkers_old_list():
    assert set(OUTAGE_FAULTS) == OLD_OUTAGE_FAULTS
    assert {kind for kind in FAULT_KINDS if takes_broker_away(kind)} == OLD_OUTAGE_FAULTS
    # a heal step's name, or a name that is no kind, takes nothing away
    assert not any(takes_broker_away(step) for step in ("start", "resume", "heal", "restart", "nonsense"))


def _old_history(*steps: str) -> list[dict]:
    """An old history (no harness records): a send and the nemesis steps ``steps`` (fault, heal)."""
    events = [{"process": 0, "type": "invoke", "f": "send", "value": {"destination": "queue://q", "body": "1"}},
              {"process": 0, "type": "ok", "f": "send", "value": {"destination": "queue://q", "body": "1"}}]
    events += [{"process": NEMESIS, "type": phase, "f": step, "value": None} for step in steps
               for phase in ("invoke", "info")]
    return events


def _new_history(*kinds: str) -> list[dict]:
    """A history whose header carries the experiment (its [[nemesis]] entries of ``kinds``)."""
    experiment = {"name": "x", "nemesis": [{"kind": kind} for kind in kinds], "workload": {"kind": "queue"}}
    return [{"process": HARNESS, "type": "info", "f": HARNESS_EXPERIMENT,
             "value": {"format": 1, "experiment": experiment}}]


def _old_rule_applies(kinds: list[str]) -> bool:
    return any(kind in OLD_OUTAGE_FAULTS for kind in kinds)


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_failover_downtime_applies_after_the_same_faults_as_before(kind):
    heal = FAULT_KINDS[kind].heal
    for record in (record_of(_old_history(kind, heal)), record_of(_new_history(kind)),
                   record_of_files([], run="r", target="t", nemesis_kinds=[kind, heal])):
        applies = failover_downtime.CHECKER.applies(record) is None
        assert applies == _old_rule_applies(record.nemesis_kinds) == (kind in OLD_OUTAGE_FAULTS), (kind, record)
        planned = derive_plan(record)
        assert (failover_downtime.NAME in planned.options) == applies


def test_an_old_historys_nemesis_lines_give_the_faults_they_name_and_no_heal():
    record = record_of(_old_history("latency", "heal", "kill", "start", "pause", "resume", "reset_peer", "heal"))
    assert record.nemesis_kinds == ["kill", "latency", "pause", "reset_peer"]
    # what the two old lists knew is still known
    for kind in OLD_OUTAGE_FAULTS | OLD_OTHER_FAULTS:
        assert record_of(_old_history(kind)).nemesis_kinds == [kind]
    skipped = derive_plan(record_of(_old_history("latency", "heal"))).skipped[failover_downtime.NAME]
    assert skipped.startswith("no fault that takes a client's broker away (kill, pause, stop, partition)")


# --------------------------------------------------------------------------- declared once

#: module-level collections of fault kinds' names that are not a second declaration of a kind's
#: meaning (module -> name -> why)
NOT_A_KIND_LIST = {
    "reports/checkers/group_pinning.py": {
        "PROCESS_STEPS": "the process nemesis's step names, heal steps and restart among them: the "
                         "nemesis's own protocol (chaos/nemesis/), not the experiment's kinds"},
}


def kind_lists(source: str) -> list[str]:
    """Module-level names bound to a tuple, list, set or dict literal holding two or more fault
    kinds' names: a list of kinds declared beside `FAULT_KINDS`."""
    found = []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError):
            continue
        if isinstance(value, (tuple, list, set, frozenset, dict)) \
                and len({v for v in value if isinstance(v, str)} & set(FAULT_KINDS)) >= 2:
            found.append(targets[0].id)
    return found


def test_no_reports_module_keeps_its_own_list_of_fault_kinds():
    wrong = []
    for path in sorted((ROOT / "reports").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        allowed = NOT_A_KIND_LIST.get(where, {})
        wrong += [f"{where}: {name}" for name in kind_lists(path.read_text(encoding="utf-8")) if name not in allowed]
    assert not wrong, ("a list of fault kinds outside chaos/experiment_file.py (declare the trait on FaultKind "
                       "instead):\n" + "\n".join(wrong))


def test_the_scan_finds_a_list_of_kinds():
    source = ('OUTAGE_FAULTS = ("kill", "stop", "pause", "partition")\n_OTHER = {"latency": 1, "bandwidth": 2}\n'
              'STEPS: tuple = ("kill", "start")\nONE = ("kill",)\nNAMES = ["send", "receive"]\n')
    assert kind_lists(source) == ["OUTAGE_FAULTS", "_OTHER"]
