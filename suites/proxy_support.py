"""The fault proxy as a module-scoped fixture, for the suites that put gates between a client and
its brokers (test_failover_pairs.py, test_failover_real_clients.py, test_java_clients.py).

Not a suite (no ``test_`` prefix). A suite uses it by importing it::

    from suites.proxy_support import fault_proxy  # noqa: F401 - the fixture
"""

from __future__ import annotations

import pytest

from machinery.faultproxy import ToxiproxyClient, start_fault_proxy


@pytest.fixture(scope="module")
def fault_proxy():
    """One proxy server (the real toxiproxy-server where installed) for the module, stopped by
    its handle; yields its API client."""
    proxy = start_fault_proxy()
    try:
        yield ToxiproxyClient(proxy.api_url)
    finally:
        proxy.stop()
