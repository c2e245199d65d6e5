"""A broker from a targets file whose ports are TLS listeners (``[target.NAME.tls]``): the clients
speak TLS to it with the CA the file names, and bad tables are refused naming the key."""

from __future__ import annotations

import shutil

import pytest

from conformance.clients import connect
from conformance.scenario import Scenario
from conformance.targets.base import UnknownTarget
from conformance.targets.external import load_targets_file
from conformance.targets.reference.target import ReferenceTarget


@pytest.fixture(scope="module")
def tls_reference(tmp_path_factory):
    handle = ReferenceTarget().launch(Scenario("external-tls", protocols=("stomp", "amqp"), tls=True),
                                      tmp_path_factory.mktemp("external-tls"))
    yield handle
    handle.stop()


def test_targets_file_tls_table_makes_the_clients_speak_tls(tls_reference, tmp_path):
    shutil.copy(tls_reference.tls.pki.ca_cert, tmp_path / "ca.pem")
    (tmp_path / "targets.toml").write_text(
        f'[target.staging]\nkind = "reference"\nstomp = {tls_reference.ports["stomp"]}\n'
        f'amqp = {tls_reference.ports["amqp"]}\ntls = {{ ca_file = "ca.pem", server_name = "localhost" }}\n')
    target = load_targets_file(tmp_path / "targets.toml")["staging"]
    assert "tls" in target.capabilities()
    handle = target.launch(Scenario("s"), tmp_path)
    for protocol in ("stomp", "amqp"):
        client = connect(handle.host, handle.ports[protocol], protocol, **handle.client_options[protocol])
        try:
            subscription = client.subscribe(f"queue://ext.tls.{protocol}")
            client.send(f"queue://ext.tls.{protocol}", b"via targets file")
            got = subscription.receive(5)
            assert got is not None and got.body == b"via targets file"
        finally:
            client.close()


@pytest.mark.parametrize("table, message", [
    ('{ server_name = "localhost" }', "tls needs ca_file"),
    ('{ ca_file = "missing.pem" }', "tls.ca_file: no such file"),
    ('{ ca_fil = "ca.pem" }', "unknown key tls.ca_fil; did you mean 'ca_file'"),
    ('"ca.pem"', "tls must be a table"),
])
def test_bad_tls_table_is_refused_naming_the_key(tmp_path, table, message):
    (tmp_path / "targets.toml").write_text(f"[target.staging]\nstomp = 61612\ntls = {table}\n")
    with pytest.raises(UnknownTarget, match=rf"\[target\.staging\].*{message}"):
        load_targets_file(tmp_path / "targets.toml")
