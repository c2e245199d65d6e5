"""A fault-injecting TCP proxy that serves the Toxiproxy HTTP API.

``start_fault_proxy()`` gives the harness a running proxy server: the real ``toxiproxy-server``
when `find_toxiproxy_server()` finds one (.tools/bin, then PATH), else this package's implementation. Both handles expose ``api_url`` and
``stop()``, so any Toxiproxy client (e.g. toxiproxy-python) drives either unchanged.
"""
from __future__ import annotations

import socket
import subprocess
import tempfile
from typing import Protocol

from machinery.process import stop_if_interrupted
from machinery.tether import launch
from machinery.waiting import poll

from .client import ToxiproxyClient, ToxiproxyError
from .install import find_toxiproxy_server
from .server import FaultProxyServer, main, serve

__all__ = [
    "FaultProxyHandle",
    "FaultProxyServer",
    "RealToxiproxyServer",
    "ToxiproxyClient",
    "ToxiproxyError",
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
        self.log = None

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> "RealToxiproxyServer":
        # toxiproxy-server logs every connection, and prints a start-up error (`error: ...`), on
        # stdout (cmd/server/server.go, setupLogger and main). It goes to an unlinked temporary
        # file, not a pipe: a pipe nobody reads would fill (64 KiB) and block the server mid-run.
        self.log = tempfile.TemporaryFile()
        # A session of its own, like the brokers (machinery/managed.py): a signal sent to the
        # harness's process group (brokerconf/children.py passes one to pytest's) must not end the
        # proxy before the harness has stopped what runs through it; a shared store's mounts
        # hung on a proxy that was gone. It is stopped by its handle, or by the tether's watchdog
        # should this process die without stopping it (machinery/tether.py: one was found running
        # 2 h after its pytest had been SIGKILLed).
        self.process = launch(
            [self.binary, "-host", self.host, "-port", str(self.port)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        if stop_if_interrupted(lambda: self._wait_answering(timeout), self.stop):
            return self
        output = self.log_tail()
        self.stop()
        raise RuntimeError(f"{self.binary} did not answer on {self.api_url} within {timeout} s: {output}")

    def _wait_answering(self, timeout: float) -> bool:
        """Whether the API answered within ``timeout`` s; raises when the server exits first."""

        def answering() -> bool:
            if self.process.poll() is not None:
                code = self.process.returncode
                output = self.log_tail()
                self.stop()
                raise RuntimeError(f"{self.binary} exited with code {code} before serving {self.api_url}: {output}")
            try:
                ToxiproxyClient(self.api_url, timeout=1).version()
                return True
            except ToxiproxyError:
                return False

        return poll(answering, timeout=timeout, interval=0.05)

    def log_tail(self, limit: int = 500) -> str:
        if self.log is None:
            return ""
        self.log.seek(0, 2)
        size = self.log.tell()
        self.log.seek(max(0, size - limit))
        return self.log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(5)
            self.process = None
        if self.log is not None:
            self.log.close()
            self.log = None


def start_fault_proxy(host: str = "127.0.0.1", port: int = 0, prefer_real: bool = True) -> FaultProxyHandle:
    """Start a Toxiproxy-API server: the real binary when found (and preferred), else ours."""
    binary = find_toxiproxy_server() if prefer_real else None
    if binary:
        return RealToxiproxyServer(binary, host, port).start()
    return FaultProxyServer(host, port).start()
