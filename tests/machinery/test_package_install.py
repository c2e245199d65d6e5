"""The set-up's package install (machinery/package_install.py): pip's configuration handed to uv,
and pip taking over whenever uv cannot follow it or fails."""

from __future__ import annotations

import subprocess

import pytest

from machinery import package_install
from machinery.package_install import Untranslatable, parse_pip_config, uv_environment

LISTING = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.index-url='file:///srv/mirror/simple'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels /srv/more-wheels'
"""


def test_pip_s_listing_is_read_as_names_and_values():
    assert parse_pip_config(LISTING + "not a setting\n") == [
        ("cert", "/etc/ssl/certs/ca-certificates.crt"), ("index-url", "file:///srv/mirror/simple"),
        ("default-timeout", "180"), ("disable-pip-version-check", "1"), ("find-links", "/opt/wheels /srv/more-wheels")]


def test_the_mirror_certificate_wheel_folders_and_timeout_reach_uv():
    assert uv_environment(parse_pip_config(LISTING)) == {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_DEFAULT_INDEX": "file:///srv/mirror/simple",
        "UV_HTTP_TIMEOUT": "180", "UV_FIND_LINKS": "/opt/wheels,/srv/more-wheels"}


def test_extra_indexes_are_searched_for_the_best_version_as_pip_does():
    env = uv_environment([("extra-index-url", "file:///srv/a/simple file:///srv/b/simple"),
                          ("trusted-host", "127.0.0.2 127.0.0.3")])
    assert env == {"UV_INDEX": "file:///srv/a/simple file:///srv/b/simple",
                   "UV_INDEX_STRATEGY": "unsafe-best-match", "UV_INSECURE_HOST": "127.0.0.2 127.0.0.3"}


def test_the_environment_s_setting_wins_over_the_file_s():
    """pip lists its files before its environment, which overrides them."""
    env = uv_environment([("index-url", "file:///srv/file/simple"), ("index-url", "file:///srv/env/simple")])
    assert env == {"UV_DEFAULT_INDEX": "file:///srv/env/simple"}


def test_no_index_is_followed_only_when_set():
    assert uv_environment([("no-index", "true")]) == {"UV_NO_INDEX": "1"}
    assert uv_environment([("no-index", "false")]) == {}


def test_a_setting_uv_cannot_follow_is_named():
    with pytest.raises(Untranslatable, match="client-cert"):
        uv_environment([("cert", "/ca.pem"), ("client-cert", "/me.pem")])


class FakeRun:
    """subprocess.run as the installer calls it: the exit code of the first (words, code) whose
    words are in the command; records each call."""

    def __init__(self, answers: list[tuple[str, int]], listing: str = LISTING) -> None:
        self.answers, self.listing, self.calls = answers, listing, []

    def __call__(self, command, **kwargs):
        self.calls.append((list(command), kwargs))
        words = " ".join(command)
        for key, code in self.answers:
            if key in words:
                out = self.listing if key == "config list" else ""
                return subprocess.CompletedProcess(command, code, out, "refused" if code else "")
        raise AssertionError(f"unexpected command {command}")


@pytest.fixture
def venv_bin(tmp_path):
    """A venv's bin folder with an executable uv in it, as pip leaves it."""
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    return tmp_path


def test_uv_installs_with_pip_s_settings(monkeypatch, venv_bin):
    run = FakeRun([("config list", 0), ("pip install", 0)])
    monkeypatch.setattr(package_install.subprocess, "run", run)
    assert package_install.install(["-e", ".[test]"], python=str(venv_bin / "python")) == 0
    commands = [" ".join(c) for c, _ in run.calls]
    assert commands[1].endswith(f"pip install {' '.join(package_install.PIP_QUIET)} {package_install.UV_REQUIREMENT}")
    uv_command, uv_kwargs = run.calls[2]
    assert uv_command[:3] == [str(venv_bin / "uv"), "pip", "install"] and uv_command[-2:] == ["-e", ".[test]"]
    assert uv_kwargs["env"]["UV_DEFAULT_INDEX"] == "file:///srv/mirror/simple"
    assert len(run.calls) == 3, "pip ran after uv had installed everything"


@pytest.mark.parametrize("failing", ["uv pip install", "-q uv>="])
def test_pip_installs_when_uv_fails_or_cannot_be_had(monkeypatch, venv_bin, failing, capsys):
    run = FakeRun([("config list", 0), (failing, 1), ("pip install", 0)])
    monkeypatch.setattr(package_install.subprocess, "run", run)
    assert package_install.install(["-e", ".[test]"], python=str(venv_bin / "python")) == 0
    last, _ = run.calls[-1]
    assert last[1:3] == ["-m", "pip"] and last[-2:] == ["-e", ".[test]"]
    assert "installing with pip" in capsys.readouterr().err


def test_pip_installs_when_a_setting_cannot_be_followed_and_says_which(monkeypatch, venv_bin, capsys):
    run = FakeRun([("config list", 0), ("pip install", 7)], listing=LISTING + "global.client-cert='/me.pem'\n")
    monkeypatch.setattr(package_install.subprocess, "run", run)
    assert package_install.install(["-e", ".[test]"], python=str(venv_bin / "python")) == 7, "pip's exit code"
    assert len(run.calls) == 2 and "uv" not in " ".join(run.calls[1][0])
    assert "client-cert" in capsys.readouterr().err


def test_without_arguments_it_is_a_usage_error(capsys):
    assert package_install.main([]) == 2
    assert "usage" in capsys.readouterr().err
