"""Shared by the fault-proxy tests: every test runs against our server and, when
``toxiproxy-server`` is on PATH, against the real one too (issue 5: the same tests pass on both)."""

import shutil

import pytest

from chaos.proxy import FaultProxyServer, RealToxiproxyServer

REAL = shutil.which("toxiproxy-server")


@pytest.fixture(
    params=[
        pytest.param("ours", id="ours"),
        pytest.param(
            "real", id="toxiproxy-server",
            marks=pytest.mark.skipif(REAL is None, reason="toxiproxy-server not on PATH"),
        ),
    ]
)
def fault_proxy(request):
    handle = FaultProxyServer().start() if request.param == "ours" else RealToxiproxyServer(REAL).start()
    handle.kind = request.param
    try:
        yield handle
    finally:
        handle.stop()
