"""The Java driver's harness side without a JVM or a broker (issue 28): what a missing build says,
how the libraries' addresses are read, and the pins' shape."""

from __future__ import annotations

import pytest

from conformance.clients import java_build
from conformance.clients.java_driver import port_of


@pytest.mark.parametrize("address, port", [
    ("tcp://127.0.0.1:61616", 61616),                        # ActiveMQ's connected transport URI
    ("tcp://localhost/127.0.0.1:61616@53412", 61616),        # ActiveMQ's remote address (local port after @)
    ("/127.0.0.1:41230", 41230),                              # Artemis's remote address
    ("tcp://127.0.0.1:5000?wireFormat.maxInactivityDuration=4000", 5000),
    (None, None),
    ("", None),
])
def test_port_of_reads_every_library_s_address_form(address, port):
    assert port_of(address) == port


def test_every_pinned_client_names_its_flavour_and_jms_package():
    clients = java_build.pinned_clients()
    assert set(clients) == {"activemq-5", "activemq-6", "artemis"}
    assert {c.flavour for c in clients.values()} == {"activemq", "artemis"}
    assert clients["activemq-6"].jms == "jakarta.jms" and clients["activemq-5"].jms == "javax.jms"
    assert all(len(c.sha512) == 128 for c in clients.values())


def test_a_missing_build_is_reported_with_what_to_run(tmp_path):
    client = java_build.pinned_clients()["activemq-5"]
    ok, reason = java_build.installed(client, tools_dir=tmp_path)
    assert not ok
    if "not on PATH" not in reason:  # a machine without a JDK says that instead
        assert "activemq-client 5.17.2" in reason and "python -m conformance.clients.java_build" in reason


def test_the_build_stamp_follows_the_driver_sources():
    # the classes are re-used only while the sources they came from are unchanged
    a5, a6 = (java_build.pinned_clients()[name] for name in ("activemq-5", "activemq-6"))
    assert java_build.sources_digest(a5) == java_build.sources_digest(a5)
    assert java_build.sources_digest(a5) != java_build.sources_digest(a6)  # another client, another JMS package
