"""No expected failure outside the plugin's narrowed path (issue 26, "Deviations that bypass the
narrowing"): a hand-written xfail accepts whatever fails, so a harness fault (a process left
behind, a nemesis error) or a broken client would be booked as the known failure.

The tree's Python source is read with `ast`; every use of ``xfail`` outside conformance/plugin.py
(which adds the narrowed strict xfails of the known deviations and ``known_failure`` marks) must be
a call with ``raises=`` naming something narrower than any assertion or any error, and a
``reason=``. A bare ``pytest.mark.xfail``, ``pytest.xfail(...)`` (imperative: nothing narrows it)
or ``raises=AssertionError`` is refused; the way to pin a known failure is
``@pytest.mark.known_failure(failure=REGEX, reason=TEXT)`` (conformance/spec/deviations.py) or a
known-deviation entry for a suite test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the one place that may add xfails: narrowed by message in its pytest_runtest_makereport
PLUGIN = Path("conformance") / "plugin.py"
#: exception classes every assertion or every error is: naming one narrows nothing
BROAD = {"AssertionError", "Exception", "BaseException"}


def python_files(root: Path):
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if any(part.startswith(".") or part in ("__pycache__", "build", "dist") for part in relative.parts):
            continue
        yield relative


def _names(node: ast.expr) -> set[str]:
    """Class names an exception expression names (``X``, ``mod.X``, a tuple of them)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Name):
        return {node.id}
    return {ast.unparse(node)}


def xfail_problems(source: str, where: str) -> list[str]:
    """One line per use of ``xfail`` in ``source`` that does not narrow what it accepts."""
    tree = ast.parse(source)
    calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
    problems = []
    for node in ast.walk(tree):
        named = (isinstance(node, ast.Attribute) and node.attr == "xfail") or \
                (isinstance(node, ast.Name) and node.id == "xfail")
        if not named:
            continue
        at = f"{where}:{node.lineno}"
        call = calls.get(id(node))
        if call is None:
            problems.append(f"{at}: xfail used without arguments (no raises=, no reason=)")
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pytest":
            problems.append(f"{at}: pytest.xfail(...) marks the test xfailed whatever happens")
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        reason = keywords.get("reason", call.args[0] if call.args else None)
        if reason is None or (isinstance(reason, ast.Constant) and not str(reason.value).strip()):
            problems.append(f"{at}: xfail without a reason")
        if "raises" not in keywords:
            problems.append(f"{at}: xfail without raises=: any failure would be accepted")
        elif _names(keywords["raises"]) & BROAD:
            problems.append(f"{at}: xfail(raises={ast.unparse(keywords['raises'])}) accepts any assertion or error: "
                            f"use @pytest.mark.known_failure(failure=REGEX, reason=...) or a known deviation")
    return problems


def tree_problems(root: Path) -> list[str]:
    problems = []
    for relative in python_files(root):
        if relative == PLUGIN:
            continue
        source = (root / relative).read_text(encoding="utf-8")
        if "xfail" in source:
            problems += xfail_problems(source, str(relative))
    return problems


def test_no_xfail_outside_the_plugin_accepts_any_failure():
    problems = tree_problems(ROOT)
    assert problems == [], "expected failures that bypass the plugin's narrowing:\n" + "\n".join(problems)


def test_the_scan_finds_each_unnarrowed_form():
    # the toy module is a text file, not Python, so that the tree's own xfails are only the real ones
    source = (Path(__file__).parent / "data" / "unnarrowed_xfails.txt").read_text(encoding="utf-8")
    problems = xfail_problems(source, "toy.py")
    lines = sorted(int(p.split(":")[1]) for p in problems)
    assert lines == [8, 11, 14, 17, 20, 24], problems
    assert any("without raises=" in p for p in problems) and any("without a reason" in p for p in problems)
    assert not any(":27:" in p for p in problems), "a narrowed xfail with a reason is allowed"
