"""machinery.faultproxy.install: which toxiproxy-server the harness runs, and when the install re-uses it.

Fake binaries (shell scripts answering ``-version``) stand in for the real one, so these run
without Go; the real build is exercised by `brokerconf targets install toxiproxy`."""
import subprocess
from pathlib import Path

import pytest

from machinery.faultproxy import install


def _fake_server(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'toxiproxy-server version {version}'\n")
    path.chmod(0o755)
    return path


def _pins(tmp_path: Path, version: str = "v2.12.0") -> Path:
    pins = tmp_path / "pins.toml"
    pins.write_text(f'[toxiproxy]\nmodule = "github.com/Shopify/toxiproxy/v2/cmd/server"\nversion = "{version}"\n')
    return pins


def test_tools_bin_comes_before_path(tmp_path, monkeypatch):
    on_path = _fake_server(tmp_path / "path" / "toxiproxy-server", "v2.0.0")
    own = _fake_server(tmp_path / "tools" / "toxiproxy-server", "v2.12.0")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert install.find_toxiproxy_server(own.parent) == str(own)
    own.unlink()
    assert install.find_toxiproxy_server(own.parent) == str(on_path)


def test_binary_version_reads_the_version_line(tmp_path):
    assert install.binary_version(_fake_server(tmp_path / "s", "v2.12.0")) == "v2.12.0"
    assert install.binary_version(tmp_path / "absent") is None


def test_present_binary_naming_the_pin_is_reused_without_go(tmp_path):
    tools = tmp_path / "bin"
    _fake_server(tools / "toxiproxy-server", "v2.12.0")

    def run(*a, **k):
        raise AssertionError("go install ran although the pinned binary was present")

    assert install.install_toxiproxy(tools, _pins(tmp_path), progress=lambda m: None, run=run) == tools / "toxiproxy-server"


def test_other_version_is_rebuilt_with_gobin_and_the_version_stamped(tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    _fake_server(tools / "toxiproxy-server", "git")
    monkeypatch.setattr(install.shutil, "which", lambda name: "/usr/bin/go")
    calls = []

    def run(command, env):
        calls.append(command)
        _fake_server(Path(env["GOBIN"]) / "server", "v2.12.0")  # what `go install` leaves in GOBIN
        return subprocess.CompletedProcess(command, 0)

    install.install_toxiproxy(tools, _pins(tmp_path), progress=lambda m: None, run=run)
    assert calls and calls[0][-1] == "github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0"
    assert f"-ldflags=-X {install.VERSION_VARIABLE}=v2.12.0" in calls[0]
    assert install.binary_version(tools / "toxiproxy-server") == "v2.12.0"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("toxiproxy-gobin-")] == []


def test_missing_go_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    with pytest.raises(install.ToxiproxyInstallError, match="`go` not found on PATH.*brokerconf targets install toxiproxy"):
        install.install_toxiproxy(tmp_path / "bin", _pins(tmp_path), progress=lambda m: None)
