"""TLS settings for the client adapters: which CA the broker's certificate must chain to, and the
client's own certificate when the broker asks for one. ``connect(..., tls=ClientTls(...))``.

The broker's certificate is always verified, name included (``server_name`` when given, else the
address dialled, must be in its subject alternative names; stomp.py checks the address as well):
a TLS test that accepted any certificate would not notice a broker serving the wrong one."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ClientTls:
    ca_file: Path | str  # PEM: the CA(s) the broker's certificate chains to
    cert_file: Path | str | None = None  # PEM client certificate, for brokers that require one
    key_file: Path | str | None = None  # its private key (unencrypted PEM)
    # The name the broker's certificate must carry, when not the address dialled. Proton (AMQP)
    # checks DNS names only, never IP addresses, so dialling 127.0.0.1 over AMQP needs one
    # ("localhost", which conformance/certificates.py puts in the broker's certificate).
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("ClientTls: give cert_file and key_file together, or neither")

    def context(self) -> ssl.SSLContext:
        """A client context: TLS 1.2 or newer, the broker verified against ``ca_file`` and its
        name against ``server_name`` (when given) or else the address the library dials."""
        # PROTOCOL_TLS_CLIENT: CERT_REQUIRED and check_hostname on
        context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT) if self.server_name else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.server_name:
            context.server_name = self.server_name
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_verify_locations(cafile=str(self.ca_file))
        if self.cert_file is not None:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context

    def check_certificate(self, certificate: dict, dialled: str) -> tuple[bool, str]:
        """For libraries that check the dialled address themselves (stomp.py's ``cert_validator``):
        with a ``server_name``, that name must also be one of the certificate's DNS names."""
        if not self.server_name:
            return True, ""
        names = [value for kind, value in certificate.get("subjectAltName", ()) if kind == "DNS"]
        if self.server_name.lower() in (n.lower() for n in names):
            return True, ""
        return False, f"the broker's certificate is for {names}, not {self.server_name!r}"

    def describe(self) -> str:
        """For exchange logs: what was presented, never key material."""
        mine = f" client-cert={Path(self.cert_file).name}" if self.cert_file else ""
        return f"tls ca={Path(self.ca_file).name}{mine}"


class _NamedContext(ssl.SSLContext):
    """Checks the broker's certificate against ``server_name`` whatever host the library passes
    (paho-mqtt gives the address it dials)."""

    server_name: str

    def wrap_socket(self, sock, *args, server_hostname=None, **kwargs):
        return super().wrap_socket(sock, *args, server_hostname=self.server_name, **kwargs)
