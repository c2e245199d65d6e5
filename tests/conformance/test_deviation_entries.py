"""Each known deviation (conformance/known_deviations/*.toml) is checked where the plugin narrows
it and the matrix records it: by a conformance suite test (suites/test_*.py) tied to
the entry's statement with ``@pytest.mark.spec``. An entry naming a test elsewhere (tests/chaos
once held FT-SHARED-1's and FT-JDBC-1's behind hand-written xfails, issue 26) would never be
applied, and the statement would never reach the matrix of `brokerconf suite` or the main job.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conformance.spec.catalogue import load_catalogue
from conformance.spec.deviations import DEFAULT_DEVIATIONS_DIR, load_deviations

SUITES = Path(__file__).resolve().parents[2] / "suites"


def spec_marks(decorators: list[ast.expr]) -> set[str]:
    """Spec IDs of ``@pytest.mark.spec("ID", ...)`` decorators."""
    ids = set()
    for decorator in decorators:
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr == "spec"):
            ids |= {a.value for a in decorator.args if isinstance(a, ast.Constant)}
    return ids


def suite_tests() -> dict[str, set[str]]:
    """Test function name -> the spec IDs it is tied to, over every suite module."""
    tests: dict[str, set[str]] = {}
    for path in sorted(SUITES.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                tests.setdefault(node.name, set()).update(spec_marks(node.decorator_list))
    return tests


def test_every_known_deviation_is_checked_by_a_suite_test_tied_to_its_statement():
    tests = suite_tests()
    specs = set().union(*tests.values())
    problems = []
    for deviation in load_deviations(DEFAULT_DEVIATIONS_DIR, load_catalogue()):
        where = f"{deviation.source}: {deviation.spec} on {deviation.target}"
        if deviation.test is None:
            if deviation.spec not in specs:
                problems.append(f"{where}: no suite test carries @pytest.mark.spec({deviation.spec!r})")
        elif deviation.test not in tests:
            problems.append(f"{where}: test {deviation.test!r} is not a test of suites")
        elif deviation.spec not in tests[deviation.test]:
            problems.append(f"{where}: {deviation.test} is not tied to {deviation.spec} "
                            f"(its spec marks: {sorted(tests[deviation.test])})")
    assert problems == [], "known deviations the plugin would never apply:\n" + "\n".join(problems)
