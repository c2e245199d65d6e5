"""Which catalogued statements no suite test checks, per target, without running anything.

    .venv/bin/python scripts/not_checked.py [--prefix FT-] [--target reference --target activemq ...]

Collects conformance/suites for the targets (as `brokerconf suite` would run them) and lists, per
target, the statements that apply to its kind, carry no not_observable reason, and are named by
no collected test's @pytest.mark.spec for that target: what the matrix would show "not checked"
even if every test ran. (A run's matrix adds the tests that did not get to a verdict.)

Statements about a client (catalogue ``subject = "client"``) are not a broker's: they are listed
per client subject (the tests' @pytest.mark.client_subject), over the documents that client's
tests check, and once more for those no test checks with any client.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.plugin import STATE, _marker_args, client_subject  # noqa: E402


class _Collected:
    def __init__(self) -> None:
        self.checked: set[tuple[str, str]] = set()
        #: (client subject, spec) of the client statements tests check with that client
        self.client_checked: set[tuple[str, str]] = set()
        self.state = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state = session.config.stash[STATE]
        for item in session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if isinstance(params.get("target_name"), str):
                broker_part = _marker_args(item, "broker_part")
                for spec in _marker_args(item, "spec"):
                    if self.state.catalogue[spec].about_client and spec not in broker_part:
                        self.client_checked.add((client_subject(item), spec))
                    else:
                        self.checked.add((params["target_name"], spec))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", default="", help="only statements whose ID starts with this (e.g. FT-)")
    parser.add_argument("--target", action="append", dest="targets", metavar="NAME",
                        help="a target to list (repeatable; default reference, activemq, artemis)")
    args = parser.parse_args(argv)
    targets = args.targets or ["reference", "activemq", "artemis"]
    collected = _Collected()
    command = [str(ROOT / "conformance" / "suites"), "--collect-only", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", "--allow-unavailable", f"--rootdir={ROOT}"]
    for target in targets:
        command += ["--target", target]
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = pytest.main(command, plugins=[collected])
    if collected.state is None or status not in (0, 5):
        print(output.getvalue()[-3000:], file=sys.stderr)
        print(f"not_checked: collecting the suites failed (pytest exit {status})", file=sys.stderr)
        return 2 if status == 4 else 1
    state = collected.state
    for target in targets:
        kind = state.targets[target].kind
        missing = [spec for spec, statement in state.catalogue.items()
                   if spec.startswith(args.prefix) and statement.applies(kind) and not statement.not_observable
                   and not statement.about_client and (target, spec) not in collected.checked]
        print(f"{target}: {len(missing)} not checked" + (": " + " ".join(missing) if missing else ""))
    about_client = {spec: s for spec, s in state.catalogue.items()
                    if s.about_client and spec.startswith(args.prefix) and not s.not_observable}
    for subject in sorted({subject for subject, _ in collected.client_checked}):
        documents = {state.catalogue[spec].document for who, spec in collected.client_checked if who == subject}
        missing = [spec for spec, s in about_client.items()
                   if s.document in documents and (subject, spec) not in collected.client_checked]
        print(f"client: {subject}: {len(missing)} not checked" + (": " + " ".join(missing) if missing else ""))
    unchecked = [spec for spec in about_client if not any(s == spec for _, s in collected.client_checked)]
    print(f"clients: {len(unchecked)} client statements no test checks with any client"
          + (": " + " ".join(unchecked) if unchecked else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
