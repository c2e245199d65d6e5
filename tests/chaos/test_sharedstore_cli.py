"""Usage errors of the store server and the mount client exit 2 and name the bad option."""

import subprocess
import sys

import pytest


def run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, named", [
    (["--root", "/nonexistent-dir"], "--root"),
    (["--root", "/tmp", "--lease", "0"], "--lease"),
    (["--root", "/tmp", "--lease", "soon"], "--lease"),
    (["--root", "/tmp", "--vers", "2"], "--vers"),
])
def test_server_usage_errors(args, named):
    result = run("machinery.sharedstore.server", *args)
    assert result.returncode == 2 and named in result.stderr, result.stderr


@pytest.mark.parametrize("args, named", [
    (["--server", "127.0.0.1:1", "--client", "A", "-o", "soft,timeo=x", "/tmp"], "timeo"),
    (["--server", "127.0.0.1:1", "--client", "A", "-o", "nolock", "/tmp"], "nolock"),
    (["--server", "localhost", "--client", "A", "/tmp"], "--server"),
    (["--server", "127.0.0.1:1", "--client", "A", "/nonexistent-dir"], "mountpoint"),
])
def test_mount_usage_errors(args, named):
    result = run("machinery.sharedstore.mount", *args)
    assert result.returncode == 2 and named in result.stderr, result.stderr
