"""The conformance matrix: target x spec ID -> passed / failed / known deviation / not applicable.

Each test run (one test on one target, one protocol) is a `TestRecord`; a statement's outcome on a
target merges the records of every test tied to it: *failed* (or *error*: the target could not
start) beats *known deviation* beats *passed* beats *not applicable*, so one failing test is
never hidden by others passing. Per target the summary counts the catalogued statements that
apply to it, how many were checked (ran to a verdict) and how many passed.

A statement about the client (catalogue ``subject = "client"``: a failover option, a load-balancing
policy) says nothing about the broker a test ran it against. Its verdict goes to a column of its
own per client subject, ``client: <subject>`` (the test's ``@pytest.mark.client_subject``), which
merges the records of every target the client ran against (each record keeps its target). A
client column covers the client statements of the documents its tests check (a Java client of
Artemis is not measured against ActiveMQ's failover transport). The broker columns show a client
statement as *not a broker statement* and their summaries leave it out, unless a test declared
that it checks the broker's part of it (``@pytest.mark.broker_part(ID)``: then that test's record
counts for its broker, as a broker statement's would).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

OUTCOMES = ("failed", "error", "known deviation", "passed", "not applicable")
_RANK = {name: rank for rank, name in enumerate(OUTCOMES)}
CHECKED = ("failed", "error", "known deviation", "passed")
#: a client statement in a broker's column, a broker statement in a client's: neither checked nor not
NOT_A_BROKER_STATEMENT = "not a broker statement"
NOT_A_CLIENT_STATEMENT = "not a client statement"
#: the name of a client subject's column
CLIENT_COLUMN = "client: "


@dataclass
class TestRecord:
    nodeid: str
    target: str
    protocol: str
    specs: list[str]
    outcome: str
    reason: str = ""
    seconds: float = 0.0
    #: the client the test exercised (its @pytest.mark.client_subject), for client statements
    client_subject: str = ""
    #: client statements whose broker's part the test checks (@pytest.mark.broker_part)
    broker_part: list[str] = field(default_factory=list)

    def for_client(self, spec: str) -> bool:
        """True when this record's verdict on ``spec`` (a client statement) is its client's."""
        return bool(self.client_subject) and spec in self.specs and spec not in self.broker_part

    @classmethod
    def from_report(cls, nodeid: str, target: str, protocol: str, specs: list[str], report,
                    not_applicable_prefix: str) -> "TestRecord | None":
        """The record for one phase's report, or None when the phase settles nothing new."""
        reason = ""
        if report.when == "setup":
            if report.passed:
                return None
            if report.skipped:
                outcome, reason = _skip_outcome(report, not_applicable_prefix)
            else:
                outcome, reason = "error", _first_line(report)
        elif report.when == "call":
            if hasattr(report, "wasxfail"):
                # strict xfail that failed as expected: the known deviation reproduced
                outcome = "known deviation" if report.skipped else "failed"
                reason = report.wasxfail
            elif report.skipped:
                outcome, reason = _skip_outcome(report, not_applicable_prefix)
            else:
                outcome = report.outcome
                if report.failed:
                    reason = _first_line(report)
        else:  # teardown: only a failure there changes the verdict
            if not report.failed:
                return None
            outcome, reason = "failed", "teardown: " + _first_line(report)
        return cls(nodeid, target, protocol, list(specs), outcome, reason, round(report.duration, 3))


def _skip_outcome(report, prefix: str) -> tuple[str, str]:
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    message = message.removeprefix("Skipped: ")
    # Only skips the plugin (or a suite) gave a reason for count as not applicable; any other
    # skip is reported as not applicable too, but with its raw message so nobody mistakes it.
    return "not applicable", message.removeprefix(prefix)


def _first_line(report) -> str:
    text = getattr(report, "longreprtext", "") or str(report.longrepr)
    # The assertion line (with the spec ID in its message) is the most useful single line.
    for line in text.splitlines():
        if line.startswith("E "):
            return line[1:].strip()[:500]
    return text.strip().splitlines()[-1][:500] if text.strip() else ""


@dataclass
class TargetInfo:
    name: str
    kind: str
    launch: str
    available: bool
    reason: str = ""
    capabilities: list[str] = field(default_factory=list)
    start_error: str = ""


class ConformanceResults:
    def __init__(self, catalogue: dict) -> None:
        self.catalogue = catalogue
        self.targets: dict[str, TargetInfo] = {}
        self.records: list[TestRecord] = []
        #: nodeid -> the test's place in the collection: records arrive in that order in a serial
        #: run but interleaved from several pytest-xdist workers; listed in it, the matrix is the
        #: same either way
        self._order: dict[str, int] = {}
        self.started = time.time()

    def add_target(self, name: str, *, kind: str, launch: str, available: bool, reason: str = "",
                   capabilities: list[str] | None = None) -> None:
        self.targets[name] = TargetInfo(name, kind, launch, available, reason, capabilities or [])

    def note_launch(self, name: str, launch: str) -> None:
        if name in self.targets:
            self.targets[name].launch = launch

    def target_failed(self, name: str, error: str) -> None:
        if name in self.targets:
            self.targets[name].start_error = error

    def record(self, record: TestRecord | None, order: int | None = None) -> None:
        """Add one phase's record; ``order`` is the test's index in the collection (when known)."""
        if record is None:
            return
        if order is not None:
            self._order[record.nodeid] = order
        # A later phase (teardown failure) overrides an earlier verdict of the same test.
        for n, existing in enumerate(self.records):
            if existing.nodeid == record.nodeid:
                if _RANK[record.outcome] <= _RANK[existing.outcome]:
                    self.records[n] = record
                return
        self.records.append(record)

    def has_records(self) -> bool:
        return bool(self.records)

    def ordered_records(self) -> list[TestRecord]:
        """The records in collection order (those without a known place last, as they came)."""
        unknown = len(self._order) + len(self.records)
        return sorted(self.records, key=lambda r: self._order.get(r.nodeid, unknown))

    def client_columns(self) -> list[str]:
        """``client: <subject>`` for every client subject some record checked a client statement with."""
        return sorted({CLIENT_COLUMN + r.client_subject for r in self.records
                       if any(self.catalogue[s].about_client and r.for_client(s) for s in r.specs)})

    def columns(self) -> list[str]:
        return [*self.targets, *self.client_columns()]

    def cell(self, target: str, spec: str) -> dict:
        if target not in self.targets and target.startswith(CLIENT_COLUMN):
            return self._client_cell(target.removeprefix(CLIENT_COLUMN), spec)
        about_client = self.catalogue[spec].about_client
        # a client statement's records count for the broker only where a test checks its broker's part
        records = [r for r in self.ordered_records() if r.target == target and spec in r.specs
                   and (not about_client or spec in r.broker_part)]
        if about_client and not records:
            return {"outcome": NOT_A_BROKER_STATEMENT, "reason": self._clients_against(target, spec), "tests": []}
        applies = self._applies(target, spec)
        if not records:
            if applies and self.catalogue[spec].not_observable:
                return {"outcome": "not applicable", "reason": "not observable: " + self.catalogue[spec].not_observable,
                        "tests": []}
            return {"outcome": "not checked" if applies else "not applicable",
                    "reason": "" if applies else self._documented_for(spec), "tests": []}
        if not applies:
            outcome = "not applicable"
            reason = self._documented_for(spec)
        else:
            worst = min(records, key=lambda r: _RANK[r.outcome])
            outcome, reason = worst.outcome, worst.reason
        return {"outcome": outcome, "reason": reason,
                "tests": [{"nodeid": r.nodeid, "protocol": r.protocol, "outcome": r.outcome, "reason": r.reason,
                           "seconds": r.seconds} for r in records]}

    def _clients_against(self, target: str, spec: str) -> str:
        subjects = sorted({r.client_subject for r in self.records if r.target == target and r.for_client(spec)})
        where = ("; checked against this target in " + ", ".join(f"column {CLIENT_COLUMN}{s}" for s in subjects)
                 if subjects else "")
        return "a statement about the client" + where

    def _client_cell(self, subject: str, spec: str) -> dict:
        """The verdict of client ``subject`` on ``spec``, merged over every target it ran against."""
        statement = self.catalogue[spec]
        if not statement.about_client:
            return {"outcome": NOT_A_CLIENT_STATEMENT, "reason": "", "tests": []}
        records = [r for r in self.ordered_records() if r.client_subject == subject and r.for_client(spec)]
        if not records:
            if statement.document not in self._client_documents(subject):
                return {"outcome": "not applicable", "tests": [],
                        "reason": f"no test of this client checks a statement of {statement.document}"}
            if statement.not_observable_by(subject):
                return {"outcome": "not applicable", "reason": "not observable: " + statement.not_observable,
                        "tests": []}
            return {"outcome": "not checked", "reason": "", "tests": []}
        # run against a broker the statement is not documented for, a record says nothing
        counted = [r for r in records if self._applies(r.target, spec)]
        if counted:
            worst = min(counted, key=lambda r: _RANK[r.outcome])
            outcome = worst.outcome
            reason = "against " + ", ".join(dict.fromkeys(r.target for r in counted)) \
                + (f"; {worst.target}: {worst.reason}" if worst.reason else "")
        else:
            outcome, reason = "not applicable", self._documented_for(spec)
        return {"outcome": outcome, "reason": reason,
                "tests": [{"nodeid": r.nodeid, "target": r.target, "protocol": r.protocol, "outcome": r.outcome,
                           "reason": r.reason, "seconds": r.seconds} for r in records]}

    def _client_documents(self, subject: str) -> set[str]:
        """The documents whose client statements a client's tests check: the statements its column covers."""
        return {self.catalogue[s].document for r in self.records if r.client_subject == subject
                for s in r.specs if self.catalogue[s].about_client and r.for_client(s)}

    def _applies(self, target: str, spec: str) -> bool:
        info = self.targets.get(target)
        return info is not None and self.catalogue[spec].applies(info.kind)

    def _documented_for(self, spec: str) -> str:
        return f"documented for {', '.join(sorted(self.catalogue[spec].applies_to))}"

    def summary(self, target: str) -> dict:
        cells = {spec: self.cell(target, spec) for spec in self.catalogue}
        if target not in self.targets:
            return self._client_summary(target.removeprefix(CLIENT_COLUMN), cells)
        # client statements are not the broker's: out of its counts (unless a test checked their broker's part)
        about_client = sum(1 for s in self.catalogue if cells[s]["outcome"] == NOT_A_BROKER_STATEMENT)
        applicable = [s for s in self.catalogue
                      if self._applies(target, s) and cells[s]["outcome"] != NOT_A_BROKER_STATEMENT]
        counts = {o: sum(1 for s in applicable if cells[s]["outcome"] == o)
                  for o in (*OUTCOMES, "not checked")}
        return {
            "listed": len(self.catalogue),
            "applicable": len(applicable),
            "checked": sum(counts[o] for o in CHECKED),
            "passed": counts["passed"],
            "failed": counts["failed"] + counts["error"],
            "known_deviation": counts["known deviation"],
            "not_applicable": len(self.catalogue) - len(applicable) - about_client + counts["not applicable"],
            "not_checked": counts["not checked"],
            "client_statements": about_client,
        }

    def _client_summary(self, subject: str, cells: dict) -> dict:
        """A client column's counts, over the client statements of the documents its tests check."""
        about_client = [s for s, statement in self.catalogue.items() if statement.about_client]
        documents = self._client_documents(subject)
        covered = [s for s in about_client if self.catalogue[s].document in documents]
        counts = {o: sum(1 for s in covered if cells[s]["outcome"] == o) for o in (*OUTCOMES, "not checked")}
        return {
            "listed": len(self.catalogue),
            "applicable": len(covered),
            "checked": sum(counts[o] for o in CHECKED),
            "passed": counts["passed"],
            "failed": counts["failed"] + counts["error"],
            "known_deviation": counts["known deviation"],
            "not_applicable": counts["not applicable"],
            "not_checked": counts["not checked"],
            "broker_statements": len(self.catalogue) - len(about_client),
            "other_documents": len(about_client) - len(covered),
        }

    def to_json(self) -> dict:
        clients = self.client_columns()
        return {
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "targets": {name: asdict(info) for name, info in self.targets.items()},
            #: the client columns: which subject, and the targets its tests reached a verdict against
            "clients": {c: {"subject": c.removeprefix(CLIENT_COLUMN),
                            "targets": list(dict.fromkeys(r.target for r in self.ordered_records()
                                                          if CLIENT_COLUMN + r.client_subject == c
                                                          and r.outcome in CHECKED))}
                        for c in clients},
            "catalogue": {
                s.id: {"document": s.document, "section": s.section, "paraphrase": s.paraphrase,
                       "applies_to": sorted(s.applies_to), "note": s.note, "not_observable": s.not_observable,
                       "subject": s.subject}
                for s in self.catalogue.values()
            },
            "matrix": {t: {spec: self.cell(t, spec) for spec in self.catalogue} for t in [*self.targets, *clients]},
            "summary": {t: self.summary(t) for t in [*self.targets, *clients]},
            "tests": [asdict(r) for r in self.ordered_records()],
        }

    def summary_lines(self) -> list[str]:
        data = self.to_json()
        return [summary_line(name, data) for name in columns(data)]


def columns(data: dict) -> list[str]:
    """A matrix JSON's columns: its targets, then its client subjects (older matrices have none)."""
    return [*data["targets"], *data.get("clients", {})]


def summary_line(name: str, data: dict) -> str:
    """One line per target (or client column) from a matrix JSON: what could be checked and how it went."""
    if name in data.get("clients", {}):
        s = data["summary"][name]
        return (f"{name} (client, against {', '.join(data['clients'][name]['targets']) or 'no broker'}): "
                f"{s['checked']}/{s['applicable']} client statements of its documents checked, {s['passed']} passed, "
                f"{s['failed']} failed, {s['known_deviation']} known deviations, {s['not_checked']} not checked, "
                f"{s['not_applicable']} not applicable")
    info, s = data["targets"][name], data["summary"][name]
    if not info["available"]:
        return f"{name}: not available: {info['reason']}"
    line = (f"{name} ({info['kind']}, {info['launch']}): {s['checked']}/{s['applicable']} applicable statements "
            f"checked, {s['passed']} passed, {s['failed']} failed, {s['known_deviation']} known deviations, "
            f"{s['not_checked']} not checked; {s['not_applicable']} of {s['listed']} not applicable")
    if s.get("client_statements"):
        line += f"; {s['client_statements']} about clients (not a broker's, see the client columns)"
    if info.get("start_error"):
        line += f"\n  could not start: {info['start_error'].splitlines()[0]}"
    return line
