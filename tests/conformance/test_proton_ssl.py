"""proton_ssl: a proton Container made after the AMQP adapter is imported makes no TLS context until
one is used, and then the same kind proton would have made."""

from __future__ import annotations

import proton._reactor as proton_reactor
from proton import SSLDomain
from proton.reactor import Container

import conformance.clients.amqp_client  # noqa: F401  (installs the on-demand config)
from conformance.clients import proton_ssl


def test_a_container_makes_no_tls_context_until_asked(monkeypatch):
    made = []

    class CountingDomain(SSLDomain):
        def __init__(self, mode):
            made.append(mode)
            super().__init__(mode)

    monkeypatch.setattr(proton_ssl, "SSLDomain", CountingDomain)
    container = Container()
    assert isinstance(container.ssl, proton_ssl.OnDemandSSLConfig) and made == []
    client = container.ssl.client
    assert isinstance(client, SSLDomain) and made == [SSLDomain.MODE_CLIENT]
    assert container.ssl.client is client and made == [SSLDomain.MODE_CLIENT]  # made once
    assert isinstance(container.ssl.server, SSLDomain) and made == [SSLDomain.MODE_CLIENT, SSLDomain.MODE_SERVER]


def test_installing_again_changes_nothing():
    proton_ssl.install()
    proton_ssl.install()
    assert proton_reactor.SSLConfig is proton_ssl.OnDemandSSLConfig
    # still a kind of proton's own SSLConfig (not a subclass of itself after a second install)
    base = proton_ssl.OnDemandSSLConfig.__mro__[1]
    assert (base.__module__, base.__name__) == ("proton._reactor", "SSLConfig")
