"""Issue 28's table, from one run's ``matrix.json`` and ``junit.xml``: the statements about client
libraries against every client the run exercised, and the reconnect waits those clients were
measured to keep, side by side.

(a) `statement_table`: one row per catalogued client statement (``subject = "client"``: the A-MQ
    guide's failover and discovery options, Artemis's client-side load balancing), one column per
    client column of the matrix (``client: <subject>``), each cell the matrix's outcome with its
    reason; the row's title is the statement's section in its document.
(b) `wait_table`: one row per set of reconnect options, the waits those options imply (as the test
    that measured them asserts them) and, per client, the gaps its reconnect attempts left
    (loss -> attempt 1, then attempt k -> k+1, ms) as the tests recorded them in JUnit properties.

A reconnect-wait test records two properties (pytest's ``record_property``): before it measures,
``reconnect_schedule`` (`schedule_property`: which statement, client, target, transport, options and
implied waits), so a test that fails or deviates before measuring still says what it was about;
after, ``reconnect_gaps_ms``. A schedule without gaps is shown as "not measured in this run", never
as a number. Reading the two files is the only I/O here; `render_markdown` turns the tables into
text (notes, CI logs), reports/render/clients_section.py into the run report's HTML.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: the JUnit property holding a test's measured gaps (ms): loss -> attempt 1, then attempt k -> k+1
GAPS_PROPERTY = "reconnect_gaps_ms"
#: the JUnit property saying what those gaps are of (`schedule_property`)
SCHEDULE_PROPERTY = "reconnect_schedule"
#: the matrix's prefix of a client column (conformance/matrix.py CLIENT_COLUMN; literal so that
#: reading a report needs nothing of the harness)
CLIENT_COLUMN = "client: "
#: what a cell says when the run has no measurement for it
NOT_MEASURED = "not measured in this run"
#: the statements whose tests measure reconnect waits: a client column with a test of one of them
#: gets a column in the waits table even when none of its measurements made it into junit.xml
RECONNECT_STATEMENTS = ("FT-FAILOVER-4", "FT-FAILOVER-5", "FT-DISCOVERY-2")


class ClientTableError(ValueError):
    """A matrix or JUnit file that cannot be read as one."""


def option_key(options: str) -> str:
    """``a=1&b=2`` in a form that does not depend on the order the options were written in."""
    return "&".join(sorted(part for part in options.lstrip("?&").split("&") if part))


@dataclass(frozen=True)
class OptionSet:
    """A row of the waits table: a transport and the options given to it (without ``?``/``&``)."""

    name: str
    transport: str
    options: str

    @property
    def key(self) -> tuple[str, str]:
        return self.transport, option_key(self.options)


#: the option sets the suites measure, in the order the table lists them (the A-MQ guide's Table
#: 2.1 for failover, Table 2.3 for discovery); a set measured in a run but missing here gets a row
#: after these, named by its options
OPTION_SETS = (
    OptionSet("defaults", "failover", ""),
    OptionSet("exponent 3, capped at 1000 ms", "failover",
              "initialReconnectDelay=100&reconnectDelayExponent=3&maxReconnectDelay=1000"),
    OptionSet("backOffMultiplier 3, capped at 1000 ms", "failover",
              "initialReconnectDelay=100&backOffMultiplier=3&maxReconnectDelay=1000"),
    OptionSet("no back-off", "failover", "initialReconnectDelay=150&useExponentialBackOff=false"),
    OptionSet("initialReconnectDelay 500 ms", "failover", "initialReconnectDelay=500"),
    OptionSet("discovery defaults", "discovery", ""),
    OptionSet("discovery, maxReconnectAttempts=0 (no limit)", "discovery", "maxReconnectAttempts=0"),
)


def schedule_property(*, statements: list[str], client: str, target: str, transport: str, options: str,
                      waits_ms: list[float], seen_at: str) -> str:
    """The ``reconnect_schedule`` value a test records before it measures (JSON): ``statements`` the
    IDs it checks, ``client`` the matrix's subject of the client, ``options`` what the test put
    after the URI's ``?``, ``waits_ms`` the waits those options imply before attempts 1, 2, ...,
    ``seen_at`` where the attempts were timed (``wire``: SYNs at the port; ``connect call``: the
    client's own connect function)."""
    return json.dumps({"statements": list(statements), "client": client, "target": target, "transport": transport,
                       "options": options.lstrip("?&"), "waits_ms": list(waits_ms), "seen_at": seen_at})


@dataclass(frozen=True)
class Schedule:
    statements: tuple[str, ...]
    client: str
    target: str
    transport: str
    options: str
    waits_ms: tuple[float, ...]
    seen_at: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.transport, option_key(self.options)


@dataclass(frozen=True)
class Measurement:
    """One JUnit test case that recorded a reconnect schedule or gaps."""

    test: str                      # classname::name, as junit.xml names it
    outcome: str                   # passed, failed, error, skipped, known deviation
    message: str
    schedule: Schedule | None
    gaps_ms: tuple[float, ...] | None


@dataclass
class StatementTable:
    columns: list[str]                                   # client subjects, the matrix's column order
    #: (statement ID, title, {subject: (outcome, reason)})
    rows: list[tuple[str, str, dict[str, tuple[str, str]]]]


@dataclass
class WaitRow:
    option_set: OptionSet
    statements: list[str]
    #: the waits the options imply, as the tests of this row assert them (None: no test recorded any)
    waits_ms: tuple[float, ...] | None
    cells: dict[str, list[Measurement]] = field(default_factory=dict)
    #: other waits some test of the row recorded that are not the beginning of ``waits_ms``: two
    #: suites that disagree on what the same options imply (shown, so nobody compares past it)
    other_waits: list[tuple[float, ...]] = field(default_factory=list)


@dataclass
class WaitTable:
    columns: list[str]                                   # client subjects
    rows: list[WaitRow]
    #: test cases that recorded gaps without a schedule (a junit.xml older than the schedule property)
    unplaced: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- reading the two files


def read_matrix(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ClientTableError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ClientTableError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not {"catalogue", "matrix"} <= set(data):
        raise ClientTableError(f"{path} is not a conformance matrix (no 'catalogue' and 'matrix')")
    return data


def _outcome(case: ET.Element) -> tuple[str, str]:
    for kind, outcome in (("failure", "failed"), ("error", "error")):
        found = case.find(kind)
        if found is not None:
            return outcome, found.get("message", "")
    skipped = case.find("skipped")
    if skipped is not None:
        # the plugin books a documented deviation as a strict, narrowed xfail (conformance/plugin.py)
        if skipped.get("type") == "pytest.xfail":
            return "known deviation", skipped.get("message", "")
        return "skipped", skipped.get("message", "")
    return "passed", ""


def _schedule(text: str, test: str) -> Schedule:
    try:
        raw = json.loads(text)
        return Schedule(tuple(raw["statements"]), raw["client"], raw["target"], raw["transport"], raw["options"],
                        tuple(float(w) for w in raw["waits_ms"]), raw.get("seen_at", ""))
    except (ValueError, KeyError, TypeError) as exc:
        raise ClientTableError(f"{test}: {SCHEDULE_PROPERTY} is not a schedule ({exc}): {text[:200]}") from None


def _gaps(text: str, test: str) -> tuple[float, ...]:
    # record_property stores str(list): a list of floats reads as JSON
    try:
        return tuple(float(g) for g in json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ClientTableError(f"{test}: {GAPS_PROPERTY} is not a list of numbers ({exc}): {text[:200]}") from None


def read_junit(path: Path) -> list[Measurement]:
    """Every test case of a JUnit XML file that recorded a reconnect schedule or gaps."""
    try:
        root = ET.parse(path).getroot()
    except OSError as exc:
        raise ClientTableError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ET.ParseError as exc:
        raise ClientTableError(f"{path} is not XML: {exc}") from None
    measurements = []
    for case in root.iter("testcase"):
        properties = {p.get("name"): p.get("value", "") for p in case.iter("property")}
        if GAPS_PROPERTY not in properties and SCHEDULE_PROPERTY not in properties:
            continue
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = _outcome(case)
        schedule = _schedule(properties[SCHEDULE_PROPERTY], test) if SCHEDULE_PROPERTY in properties else None
        gaps = _gaps(properties[GAPS_PROPERTY], test) if GAPS_PROPERTY in properties else None
        measurements.append(Measurement(test, outcome, message, schedule, gaps))
    return measurements


# --------------------------------------------------------------------------- the tables


def client_columns(matrix: dict) -> list[str]:
    """The client subjects of a matrix's client columns, in its order (older matrices have none)."""
    return [column.removeprefix(CLIENT_COLUMN) for column in matrix.get("clients", {})]


def statement_table(matrix: dict) -> StatementTable:
    subjects = client_columns(matrix)
    rows = []
    for spec_id, entry in matrix["catalogue"].items():
        if entry.get("subject") != "client":
            continue
        cells = {}
        for subject in subjects:
            cell = matrix["matrix"].get(CLIENT_COLUMN + subject, {}).get(spec_id)
            cells[subject] = (cell["outcome"], cell.get("reason", "")) if cell else ("not in the matrix", "")
        rows.append((spec_id, entry.get("section", ""), cells))
    return StatementTable(subjects, rows)


def _wait_clients(matrix: dict, measurements: list[Measurement]) -> list[str]:
    """Clients with a reconnect-wait test in the matrix (its order), then any other the junit names."""
    subjects = [s for s in client_columns(matrix)
                if any(matrix["matrix"].get(CLIENT_COLUMN + s, {}).get(spec, {}).get("tests")
                       for spec in RECONNECT_STATEMENTS)]
    for m in measurements:
        if m.schedule and m.schedule.client not in subjects:
            subjects.append(m.schedule.client)
    return subjects


def _implied_waits(schedules: list[Schedule]) -> tuple[tuple[float, ...] | None, list[tuple[float, ...]]]:
    """The longest waits list the row's tests recorded (the same options imply the same schedule,
    and a test lists as many waits as it waits for, so the others are its beginning), and any
    recorded list that is not."""
    longest = max((s.waits_ms for s in schedules), key=len, default=None)
    others = list(dict.fromkeys(s.waits_ms for s in schedules if s.waits_ms != longest[:len(s.waits_ms)]))
    return longest, others


def wait_table(matrix: dict, measurements: list[Measurement]) -> WaitTable:
    subjects = _wait_clients(matrix, measurements)
    rows = {option_set.key: WaitRow(option_set, [], None) for option_set in OPTION_SETS}
    placed = [m for m in measurements if m.schedule is not None]
    for m in placed:
        key = m.schedule.key
        if key not in rows:
            rows[key] = WaitRow(OptionSet(m.schedule.options or "defaults", m.schedule.transport,
                                          m.schedule.options), [], None)
        row = rows[key]
        row.statements += [spec for spec in m.schedule.statements if spec not in row.statements]
        row.cells.setdefault(m.schedule.client, []).append(m)
    for row in rows.values():
        row.statements.sort(key=_spec_order)
        row.waits_ms, row.other_waits = _implied_waits([m.schedule for ms in row.cells.values() for m in ms])
    unplaced = [m.test for m in measurements if m.schedule is None]
    return WaitTable(subjects, list(rows.values()), unplaced)


def _spec_order(spec_id: str) -> tuple[str, int]:
    prefix, _, number = spec_id.rpartition("-")
    return prefix, int(number) if number.isdigit() else 0


# --------------------------------------------------------------------------- cell text


def format_ms(values) -> str:
    """Whole milliseconds, comma-separated (junit.xml keeps the tenths)."""
    return ", ".join(f"{v:.0f}" for v in values)


def measurement_text(m: Measurement, *, with_statements: bool = False, with_target: bool = False,
                     with_seen_at: bool = False) -> str:
    """A measurement as a cell shows it: its gaps, or that it has none; which statements' test it
    came from, the target and where the attempts were timed, each when the cell's series differ in
    it; the outcome when the test did not pass."""
    text = format_ms(m.gaps_ms) if m.gaps_ms else NOT_MEASURED
    notes = [", ".join(m.schedule.statements)] if with_statements and m.schedule else []
    if with_target and m.schedule:
        notes.append(m.schedule.target)
    if with_seen_at and m.schedule and m.schedule.seen_at:
        notes.append(f"at the {m.schedule.seen_at}")
    if m.outcome != "passed":
        notes.append(m.outcome)
    return text + (f" ({', '.join(notes)})" if notes else "")


def wait_cell_texts(row: WaitRow, subject: str) -> list[str]:
    measured = row.cells.get(subject, [])
    if not measured:
        return [NOT_MEASURED]
    def differ(field_of) -> bool:
        return len({field_of(m.schedule) for m in measured}) > 1

    return [measurement_text(m, with_statements=differ(lambda s: s.statements), with_target=differ(lambda s: s.target),
                             with_seen_at=differ(lambda s: s.seen_at)) for m in measured]


def options_text(option_set: OptionSet) -> str:
    return f"{option_set.transport}:?{option_set.options}" if option_set.options else \
        f"{option_set.transport}: (no options)"


def waits_text(row: WaitRow) -> str:
    if not row.waits_ms:
        return "(no test of these options in this run)"
    return format_ms(row.waits_ms) + "".join(f" (another test: {format_ms(w)})" for w in row.other_waits)


# --------------------------------------------------------------------------- Markdown


def _md(text: str) -> str:
    """A table cell's text: one line, no column breaks."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(_md(h) for h in head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(_md(c) for c in row) + " |" for row in rows)]


def statement_markdown(table: StatementTable) -> list[str]:
    if not table.columns:
        return ["The matrix has no client columns (no test exercised a client library in this run)."]
    notes: dict[str, int] = {}
    body = []
    for spec_id, title, cells in table.rows:
        row = [spec_id, title]
        for subject in table.columns:
            outcome, reason = cells[subject]
            if reason and outcome != "passed":
                number = notes.setdefault(reason, len(notes) + 1)
                row.append(f"{outcome} [{number}]")
            else:
                row.append(outcome)
        body.append(row)
    lines = _md_table(["statement", "section", *table.columns], body)
    if notes:
        lines += ["", *(f"[{n}] {_md(reason)}" for reason, n in notes.items())]
    return lines


def wait_markdown(table: WaitTable) -> list[str]:
    head = ["option set", "options", "statements", "waits the options imply (ms)",
            *(f"{subject}: measured gaps (ms)" for subject in table.columns)]
    body = []
    for row in table.rows:
        body.append([row.option_set.name, options_text(row.option_set), ", ".join(row.statements) or "-",
                     waits_text(row),
                     *(" / ".join(wait_cell_texts(row, subject)) for subject in table.columns)])
    lines = _md_table(head, body)
    if table.unplaced:
        lines += ["", f"{len(table.unplaced)} test case(s) recorded {GAPS_PROPERTY} without {SCHEDULE_PROPERTY} "
                      f"(a run older than that property), not placed: {', '.join(table.unplaced)}"]
    return lines


def render_markdown(statements: StatementTable, waits: WaitTable) -> str:
    return "\n".join([
        "## Client statements x clients", "",
        "The matrix's outcome per client column; reasons of the cells that did not pass are numbered below.", "",
        *statement_markdown(statements), "",
        "## Reconnect waits side by side", "",
        "Gaps between a client's reconnect attempts after it lost its broker (loss -> attempt 1, then attempt k -> "
        "k+1), as the reconnect-wait tests recorded them in junit.xml (whole ms); one series per test, in brackets "
        "the statements, target and where the attempts were timed where a client's series differ in those, and "
        "the outcome where the test did not pass.", "",
        *wait_markdown(waits), ""])
