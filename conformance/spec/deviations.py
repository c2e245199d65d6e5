"""Known deviations: where a real broker does not do what its own documentation says.

One TOML file per area in ``conformance/known_deviations/``::

    [[deviation]]
    target = "activemq"                 # target kind
    spec = "SLOW-EVICT-2"               # catalogue ID the broker breaks
    test = "test_oldest_evicted_first"  # optional: only this test function
    protocol = "amqp"                   # optional: only this protocol's parametrization
    summary = "what the broker does instead, in one line"
    failure = "SLOW-EVICT-2: .*got \\[" # how the failure looks: a regular expression
    evidence = \"\"\"configuration excerpt, observed messages or counters, broker log lines\"\"\"

The plugin marks each matching test a *strict* xfail for that target kind, and only for an
assertion failure: the test must keep failing there, so a broker that starts conforming turns the
run red and the entry is removed. ``failure`` says how the recorded deviation looks: it is searched
(``re.search``) in the message of the test's AssertionError, and must name the spec ID (messages
start with it) without matching an empty message. Anything else (another exception, an
assertion with another message such as a ``setup:`` check, a failure while the fixtures start the
brokers) is a failure of the run, not the known deviation: a broken JMX query or a network that did
not start must never be booked as the broker's documented misbehaviour.

A test outside the suites that pins a known failure (of a client library, of the reference broker
found by a model) goes through the same narrowed path with
``@pytest.mark.known_failure(failure=REGEX, reason=TEXT)`` instead of a hand-written xfail
(`known_failures`): only an AssertionError whose message matches ``failure`` is the expected
failure; tests/conformance/test_xfail_scan.py keeps bare xfails out of the tree.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEVIATIONS_DIR = Path(__file__).resolve().parents[1] / "known_deviations"
KEYS = ("target", "spec", "test", "protocol", "summary", "failure", "evidence")
REQUIRED = ("target", "spec", "summary", "failure", "evidence")


class DeviationError(ValueError):
    pass


@dataclass(frozen=True)
class Deviation:
    target: str
    spec: str
    summary: str
    evidence: str
    failure: str
    test: str | None = None
    source: str = ""
    protocol: str | None = None

    def matches(self, kind: str, specs: list[str], test_name: str, protocol: str | None = None) -> bool:
        return (kind == self.target and self.spec in specs and (self.test is None or self.test == test_name)
                and (self.protocol is None or self.protocol == protocol))

    def explains(self, message: str) -> bool:
        """True when an assertion failure with ``message`` is this deviation reproducing."""
        return re.search(self.failure, message) is not None


def known_failures(marks, test_name: str, where: str) -> list[Deviation]:
    """The ``known_failure(failure=REGEX, reason=TEXT)`` marks of one test as deviations the
    plugin narrows like the TOML entries (any target; ``spec`` names the test). DeviationError for
    a mark without both, a pattern that does not compile or one that matches any message."""
    found = []
    for mark in marks:
        failure, reason = mark.kwargs.get("failure", ""), mark.kwargs.get("reason", "")
        if mark.args or not str(failure).strip() or not str(reason).strip():
            raise DeviationError(f"{where}: @pytest.mark.known_failure takes failure=REGEX (the expected assertion "
                                 f"message) and reason=TEXT, both by name")
        try:
            matches_empty = re.search(failure, "") is not None
        except re.error as exc:
            raise DeviationError(f"{where}: known_failure 'failure' is not a valid regular expression: {exc}") from None
        if matches_empty:
            raise DeviationError(f"{where}: known_failure 'failure' {failure!r} matches any message: describe the "
                                 f"expected assertion message")
        found.append(Deviation("*", f"known failure of {test_name}", reason.strip(), reason.strip(), failure,
                               test_name, where))
    return found


def load_deviations(directory: Path, catalogue: dict) -> list[Deviation]:
    deviations: list[Deviation] = []
    for path in sorted(Path(directory).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise DeviationError(f"{path}: not valid TOML: {exc}") from None
        for n, raw in enumerate(data.get("deviation", []), 1):
            named = f" ({raw['spec']}{', ' + raw['test'] if raw.get('test') else ''})" if raw.get("spec") else ""
            where = f"{path}: deviation #{n}{named}"
            unknown = set(raw) - set(KEYS)
            if unknown:
                raise DeviationError(f"{where}: unknown key(s) {sorted(unknown)} (known: {list(KEYS)})")
            for key in REQUIRED:
                if not str(raw.get(key, "")).strip():
                    why = ("a regular expression matched against the assertion failure's message, so only the "
                           "recorded failure counts as the known deviation" if key == "failure"
                           else "a deviation needs its evidence")
                    raise DeviationError(f"{where}: missing {key!r} ({why})")
            try:
                re.compile(raw["failure"])
            except re.error as exc:
                raise DeviationError(f"{where}: 'failure' is not a valid regular expression: {exc}") from None
            # Assertion messages start with the spec ID (project rule), so the recorded failure names
            # it; a pattern that matches anything (".*", "") would book any assertion as the deviation.
            if raw["spec"] not in raw["failure"] or re.search(raw["failure"], "") is not None:
                raise DeviationError(f"{where}: 'failure' {raw['failure']!r} must name the spec ID {raw['spec']!r} "
                                     f"and describe the recorded assertion message, not match any message")
            if raw["spec"] not in catalogue:
                raise DeviationError(f"{where}: spec {raw['spec']!r} is not in the catalogue")
            deviations.append(Deviation(raw["target"], raw["spec"], raw["summary"].strip(), raw["evidence"].strip(),
                                        raw["failure"], raw.get("test"), path.name, raw.get("protocol")))
    return deviations
