"""proton's per-container TLS contexts, made when first used instead of with every connection.

python-qpid-proton's ``Container.__init__`` makes an ``SSLConfig``, which makes two OpenSSL
contexts (a client and a server ``SSLDomain``), and ``BlockingConnection`` makes a new ``Container``
for each connection. So every AMQP connection paid for both contexts: about 70 ms of CPU (29 ms for
the client domain and 31 ms for the server one, measured on the test machine, python-qpid-proton 0.40). A
profile of ``suites/test_groups.py`` against the reference broker found 47 % of the test process's
CPU samples in ``SSLDomain.__init__``. On a machine whose main job is CPU-bound, that is wall time.

A connection uses its container's contexts only when it connects to an ``amqps`` URL without an
``ssl_domain`` of its own (or listens on one): the AMQP adapter always passes its own domain for TLS
(amqp_client._ssl_domain). `install` replaces proton's ``SSLConfig`` with `OnDemandSSLConfig`: its
``server`` domain is made on first access, per container; its ``client`` domain is one default
client domain for the whole process, made on first access. Per container would not do:
``Container._connect`` reads ``self.ssl.client`` for every connection, ``amqp://`` included, as the
fallback it keeps for an ``amqps`` URL. The shared default is what each container's own would have
been (a client domain with proton's defaults); changing it (``container.ssl.client.set_...``) would
change it for every container, which nothing in brokerconf does (tested). Installing is
process-wide and idempotent; the AMQP adapter does it when imported.
"""

from __future__ import annotations

import functools

import proton._reactor as proton_reactor
from proton import SSLDomain

__all__ = ["OnDemandSSLConfig", "install"]


@functools.cache
def _default_client_domain() -> SSLDomain:
    return SSLDomain(SSLDomain.MODE_CLIENT)


class OnDemandSSLConfig(proton_reactor.SSLConfig):
    """proton's ``SSLConfig``: ``client`` the process's default client domain, ``server`` this
    container's own; each made when first read (the module docstring says why)."""

    def __init__(self) -> None:  # deliberately not SSLConfig.__init__, which makes both domains
        pass

    @property
    def client(self) -> SSLDomain:
        return _default_client_domain()

    @functools.cached_property
    def server(self) -> SSLDomain:
        return SSLDomain(SSLDomain.MODE_SERVER)


def install() -> None:
    """Make every proton ``Container`` created from now on use `OnDemandSSLConfig`."""
    # Container.__init__ looks the name up in its module when it runs, so this reaches every
    # Container, BlockingConnection's included
    proton_reactor.SSLConfig = OnDemandSSLConfig
