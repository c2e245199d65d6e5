"""What a launcher needs for ``Scenario(tls=True)``, the same for every target: the run's
certificates (conformance/certificates.py, made in the broker's work directory) and the client
options that make the `client` fixture speak TLS to the handle's ports.

A TLS handle keeps its plain listeners open beside the TLS ones (as a broker with ``stomp://`` and
``stomp+ssl://`` connectors does): ``handle.ports`` are the TLS ports, ``handle.plain_ports`` the
plain ones, ``handle.tls`` this object (certificates for tests that present a bad one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.certificates import SERVER_NAMES, Pki, make_pki
from conformance.clients.tls import ClientTls


@dataclass(frozen=True)
class TlsSetup:
    pki: Pki

    def client_tls(self) -> ClientTls:
        """Trusts the run's CA, presents the good client certificate, checks the broker's name
        (``localhost``: proton checks DNS names only, see conformance/clients/tls.py)."""
        return ClientTls(self.pki.ca_cert, self.pki.client_cert, self.pki.client_key, server_name=SERVER_NAMES[0])

    def client_options(self, base: dict[str, dict] | None = None) -> dict[str, dict]:
        """``base`` (a handle's per-protocol client options) with ``tls`` added for every protocol."""
        options = {protocol: dict(values) for protocol, values in (base or {}).items()}
        for protocol in ("stomp", "mqtt", "amqp"):
            options.setdefault(protocol, {})["tls"] = self.client_tls()
        return options


def prepare(scenario, workdir: Path) -> TlsSetup | None:
    """Certificates under ``workdir/tls`` when the scenario asks for TLS, else None."""
    if not getattr(scenario, "tls", False):
        return None
    return TlsSetup(make_pki(Path(workdir) / "tls"))
