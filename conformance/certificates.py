"""Certificates made at run time for TLS tests and TLS launches: a private CA, a broker
certificate for the loopback addresses, a client certificate, and a client certificate from a
second CA the broker does not trust (the "bad client certificate" case).

Everything is written as PEM (what Python, paho-mqtt, stomp.py and proton read) and as PKCS12
(what the JVM brokers read: Java 17's keystore type ``PKCS12`` loads a file made here, as
ActiveMQ's ``<sslContext keyStore=...>`` and Artemis's ``keyStorePath`` need). Keys are EC P-256:
quick to make and accepted by every TLS stack here. Certificates are valid from an hour ago (clock
skew between processes) for two days; nothing here is meant to outlive a test run.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: names the broker certificate is valid for (clients check the address they dial against these)
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class Pki:
    """Paths of one run's certificates (all under ``directory``) and the keystores' password."""

    directory: Path
    ca_cert: Path  # the CA that signed the broker's and the good client's certificates (PEM)
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path  # signed by a CA the broker does not trust
    rogue_client_key: Path
    server_keystore: Path  # PKCS12: the broker's key and certificate chain (alias "broker")
    truststore: Path  # PKCS12: the CA certificate only (what a JVM broker checks client certificates with)
    password: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "brokerconf test"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2)))


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    cert = (_builder(common_name, _name(common_name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(common_name: str, ca_key, ca_cert: x509.Certificate, *, server: bool) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_builder(common_name, ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if server:
        names = [x509.DNSName(n) for n in SERVER_NAMES] + [x509.IPAddress(ipaddress.ip_address(a))
                                                           for a in SERVER_ADDRESSES]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write_pem(path: Path, *items) -> Path:
    chunks = []
    for item in items:
        if isinstance(item, x509.Certificate):
            chunks.append(item.public_bytes(serialization.Encoding.PEM))
        else:
            chunks.append(item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    path.write_bytes(b"".join(chunks))
    return path


def make_pki(directory: Path) -> Pki:
    """A fresh CA, broker and client certificates under ``directory`` (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("brokerconf test CA")
    server_key, server_cert = _leaf("localhost", ca_key, ca_cert, server=True)
    client_key, client_cert = _leaf("brokerconf-client", ca_key, ca_cert, server=False)
    rogue_ca_key, rogue_ca_cert = _ca("brokerconf untrusted CA")
    rogue_key, rogue_cert = _leaf("brokerconf-rogue-client", rogue_ca_key, rogue_ca_cert, server=False)
    password = secrets.token_hex(8)
    # Java's PKCS12 reader wants the legacy-free PBES2/AES encryption the default builder gives.
    encryption = serialization.BestAvailableEncryption(password.encode())
    keystore = directory / "broker-keystore.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(b"broker", server_key, server_cert, [ca_cert],
                                                                 encryption))
    truststore = directory / "truststore.p12"
    truststore.write_bytes(pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca_cert, b"brokerconf-ca")],
                                                            encryption))
    return Pki(
        directory=directory,
        ca_cert=_write_pem(directory / "ca.pem", ca_cert),
        server_cert=_write_pem(directory / "broker.pem", server_cert),
        server_key=_write_pem(directory / "broker-key.pem", server_key),
        client_cert=_write_pem(directory / "client.pem", client_cert),
        client_key=_write_pem(directory / "client-key.pem", client_key),
        rogue_client_cert=_write_pem(directory / "rogue-client.pem", rogue_cert),
        rogue_client_key=_write_pem(directory / "rogue-client-key.pem", rogue_key),
        server_keystore=keystore,
        truststore=truststore,
        password=password,
    )
