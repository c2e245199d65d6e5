"""proton_ssl: a proton Container made after the AMQP adapter is imported makes no TLS context until
one is used, and then the same kind proton would have made."""

from __future__ import annotations

import functools
import re
from pathlib import Path

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
    monkeypatch.setattr(proton_ssl, "_default_client_domain",
                        functools.cache(lambda: CountingDomain(SSLDomain.MODE_CLIENT)))
    first, second = Container(), Container()
    assert isinstance(first.ssl, proton_ssl.OnDemandSSLConfig) and made == []
    # the client domain: one default for every container, made when first read
    client = first.ssl.client
    assert isinstance(client, SSLDomain) and made == [SSLDomain.MODE_CLIENT]
    assert second.ssl.client is client and made == [SSLDomain.MODE_CLIENT]
    # the server domain: each container's own, made when first read
    server = first.ssl.server
    assert isinstance(server, SSLDomain) and made == [SSLDomain.MODE_CLIENT, SSLDomain.MODE_SERVER]
    assert first.ssl.server is server and second.ssl.server is not server


def test_nothing_in_brokerconf_changes_a_containers_default_domains():
    """The client domain is shared by every container (proton_ssl.py): nothing may configure it."""
    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"\.ssl\.(client|server)\b|SSLConfig\.set_")
    found = [f"{p.relative_to(root)}:{n}" for package in ("conformance", "chaos", "machinery", "reference_broker",
                                                          "reports", "brokerconf", "suites", "fuzz")
             for p in (root / package).rglob("*.py") if p.name != "proton_ssl.py"  # its docstring names them
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == [], found


def test_installing_again_changes_nothing():
    proton_ssl.install()
    proton_ssl.install()
    assert proton_reactor.SSLConfig is proton_ssl.OnDemandSSLConfig
    # still a kind of proton's own SSLConfig (not a subclass of itself after a second install)
    base = proton_ssl.OnDemandSSLConfig.__mro__[1]
    assert (base.__module__, base.__name__) == ("proton._reactor", "SSLConfig")
