"""conformance/xdist_groups.py: under ``-n 2 --dist loadgroup`` a module's tests that share a
module-scoped fixture run on one worker (once per value of its parameters), on pytest 9.2 too
(pytest-dev/pytest-xdist#1386), and a group name pytest-xdist could not read is refused."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

#: the hook of tests/conftest.py, for the toy project
CONFTEST = textwrap.dedent("""
    import pytest
    from conformance import xdist_groups

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(config, items):
        if not xdist_groups.in_worker(config):
            return
        for item in items:
            group = xdist_groups.shared_fixture_group(item)
            if group is not None:
                xdist_groups.add_group(item, group)
""")

SHARED = textwrap.dedent("""
    import os, pytest

    @pytest.fixture(scope="module", params=["a", "b"])
    def shared(request):
        with open(os.environ["TOY_SETUP_LOG"], "a") as log:
            log.write(f"{os.environ['PYTEST_XDIST_WORKER']} {request.param}\\n")
        return request.param

    @pytest.mark.parametrize("n", range(4))
    def test_uses_shared(shared, n):
        pass

    @pytest.mark.parametrize("n", range(4))
    def test_alone(n):
        pass
""")


def test_a_module_fixture_is_set_up_once_per_parameter(pytester: pytest.Pytester, monkeypatch) -> None:
    log = pytester.path / "setups.log"
    monkeypatch.setenv("TOY_SETUP_LOG", str(log))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_shared=SHARED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=2 * 4 + 4)
    setups = sorted(line.split()[1] for line in log.read_text().splitlines())
    assert setups == ["a", "b"], log.read_text()  # not once per worker that ran one of its tests
    out = result.stdout.str()
    assert "PASSED test_shared.py::test_uses_shared[a-0]@test_shared.py(shared=a)" in out
    assert "PASSED test_shared.py::test_uses_shared[b-3]@test_shared.py(shared=b)" in out
    assert "test_alone[0]@" not in result.stdout.str()  # no shared fixture: distributed one by one


def test_a_group_name_xdist_cannot_read_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad="import pytest\n\n@pytest.mark.xdist_group('x]y')\ndef test_x():\n    pass\n\n"
                                 "def test_y():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=1, errors=1)
    assert "xdist_group name(s) ['x]y'] contain '@' or ']'" in result.stdout.str()
