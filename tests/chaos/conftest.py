"""Shared by the fault-proxy tests: every test runs against our server and against the real
``toxiproxy-server`` (issue 5: the same tests pass on both), the one `find_toxiproxy_server()` finds
(.tools/bin, where `brokerconf targets install toxiproxy` builds it, then PATH). Where it is missing
the real-server runs are skipped with that reason, or fail where BROKERCONF_REQUIRE names toxiproxy.
With ``BROKERCONF_TOXIPROXY=container`` they also run against the Toxiproxy container
(docker/toxiproxy, or the official image BROKERCONF_TOXIPROXY_IMAGE names; issue 8,
`machinery.faultproxy.container`, on the host's network so proxies
reach the tests' loopback upstreams); where its image is missing that run is skipped with
docker_env's reason, and the embedded proxy ("ours") covers the tests."""

import os

import pytest

from machinery.faultproxy import FaultProxyServer, RealToxiproxyServer, find_toxiproxy_server
from conformance.requirements import missing_mark, skip_or_fail

REAL = find_toxiproxy_server()
REAL_MISSING = None if REAL else ("toxiproxy-server not found in .tools/bin or on PATH "
                                  "(brokerconf targets install toxiproxy builds it)")
CONTAINER = os.environ.get("BROKERCONF_TOXIPROXY") == "container"


def _start_container():
    from machinery.docker_env import image_available
    from machinery.faultproxy.container import TOXIPROXY_IMAGE, ToxiproxyContainer

    ok, reason = image_available(TOXIPROXY_IMAGE)
    if not ok:
        skip_or_fail("docker", f"Toxiproxy container not available, the embedded proxy runs instead: {reason}")
    handle = ToxiproxyContainer(host_network=True)
    handle.start()
    return handle


@pytest.fixture(
    params=[
        pytest.param("ours", id="ours"),
        pytest.param(
            "real", id="toxiproxy-server",
            marks=missing_mark("toxiproxy", REAL_MISSING),
        ),
    ]
    # opt-in: only then is there a third run to report (no skip line per test otherwise)
    + ([pytest.param("container", id="toxiproxy-container", marks=pytest.mark.container)] if CONTAINER else [])
)
def fault_proxy(request):
    if request.param == "container":
        handle = _start_container()
    elif request.param == "ours":
        handle = FaultProxyServer().start()
    else:
        handle = RealToxiproxyServer(REAL).start()
    handle.kind = request.param
    try:
        yield handle
    finally:
        handle.stop()
