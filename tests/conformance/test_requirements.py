"""conformance.requirements: a missing broker or tool skips on a laptop and fails where CI
declared it required (BROKERCONF_REQUIRE), naming it."""

import pytest

from conformance import requirements

pytest_plugins = ["pytester"]

SUITE = """
from conformance.requirements import missing_mark, skip_or_fail

def test_calls_skip_or_fail():
    skip_or_fail("artemis", "the Artemis distribution is not installed")

@missing_mark("toxiproxy", "toxiproxy-server not found")
def test_marked_missing():
    pass

@missing_mark("toxiproxy", None)
def test_marked_present():
    pass
"""


def test_parse_names_and_rejects_a_typo_with_a_hint():
    assert requirements.parse(" activemq, artemis ,") == {"activemq", "artemis"}
    with pytest.raises(requirements.UnknownRequirement, match="did you mean 'artemis'"):
        requirements.parse("activemq,artmis")


def test_missing_things_skip_when_nothing_is_required(pytester, monkeypatch):
    monkeypatch.delenv(requirements.ENV, raising=False)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=2, passed=1)
    result.stdout.fnmatch_lines(["*the Artemis distribution is not installed*"])


def test_missing_required_things_fail_naming_them(pytester, monkeypatch):
    monkeypatch.setenv(requirements.ENV, "artemis,toxiproxy")
    pytester.makepyfile(SUITE)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1, errors=1, passed=1)
    result.stdout.fnmatch_lines(["*toxiproxy is required here*toxiproxy-server not found*"])
    result.stdout.fnmatch_lines(["*artemis is required here*the Artemis distribution is not installed*"])


def test_only_the_required_thing_fails(pytester, monkeypatch):
    monkeypatch.setenv(requirements.ENV, "artemis")
    pytester.makepyfile(SUITE)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1, skipped=1, passed=1)


def test_a_typo_in_the_declared_list_is_a_usage_error(pytester, monkeypatch):
    monkeypatch.setenv(requirements.ENV, "rabbitqm")
    pytester.makepyfile(SUITE)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown requirement 'rabbitqm'*did you mean 'rabbitmq'*"])
