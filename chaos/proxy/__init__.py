"""A fault-injecting TCP proxy that serves the Toxiproxy HTTP API.

``start_fault_proxy()`` gives the harness a running proxy server: the real ``toxiproxy-server``
when `find_toxiproxy_server()` finds one (.tools/bin, then PATH), else this package's implementation. Both handles expose ``api_url`` and
``stop()``, so any Toxiproxy client (e.g. toxiproxy-python) drives either unchanged.
"""
from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from typing import Protocol

from .install import find_toxiproxy_server
from .server import FaultProxyServer, main, serve

__all__ = [
    "FaultProxyHandle",
    "FaultProxyServer",
    "RealToxiproxyServer",
    "find_toxiproxy_server",
    "main",
    "serve",
    "start_fault_proxy",
]


class FaultProxyHandle(Protocol):
    @property
    def api_url(self) -> str: ...

    def stop(self) -> None: ...


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class RealToxiproxyServer:
    """``toxiproxy-server -host H -port P`` as a child process, stopped by its own handle."""

    def __init__(self, binary: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.binary = binary
        self.host = host
        self.port = port or _free_port(host)
        self.process: subprocess.Popen | None = None

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> "RealToxiproxyServer":
        self.process = subprocess.Popen(
            [self.binary, "-host", self.host, "-port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(
                    f"{self.binary} exited with code {self.process.returncode} before serving "
                    f"{self.api_url}: {err.strip()[-500:]}"
                )
            try:
                with urllib.request.urlopen(self.api_url + "/version", timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.binary} did not answer on {self.api_url} within {timeout} s")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None


def start_fault_proxy(host: str = "127.0.0.1", port: int = 0, prefer_real: bool = True) -> FaultProxyHandle:
    """Start a Toxiproxy-API server: the real binary when found (and preferred), else ours."""
    binary = find_toxiproxy_server() if prefer_real else None
    if binary:
        return RealToxiproxyServer(binary, host, port).start()
    return FaultProxyServer(host, port).start()
