"""TLS for the reference broker's listeners: one server-side `ssl.SSLContext` per TLS listener,
built from the certificate, key and (optional) client CA files in its configuration.

Each protocol gets its own TLS port beside the plain one, as ActiveMQ Classic's ``stomp+ssl://``,
``mqtt+ssl://``, ``amqp+ssl://`` and ``https://`` transport connectors do. The handshake runs in
asyncio's SSL transport before the protocol sees the connection, so a client that fails it (a
plaintext client, a certificate the CA did not sign, no certificate where one is required) is
dropped without reaching a session, and never holds the loop: it costs one socket until the
handshake time-out at most.

Every file problem is a `ConfigError` naming the option (``stomp_ssl.tls_key_file``) and the file.
"""

from __future__ import annotations

import ssl

from .config import BrokerConfig, ConfigError, TlsListenerConfig

#: listener option -> the protocol it serves (the order listeners are opened and announced in)
TLS_LISTENERS = {"stomp_ssl": "stomp", "mqtt_ssl": "mqtt", "amqp_ssl": "amqp", "https": "http"}
#: how each TLS listener is named on the broker's "ready" line (ActiveMQ's transport schemes)
READY_NAMES = {"stomp_ssl": "stomp+ssl", "mqtt_ssl": "mqtt+ssl", "amqp_ssl": "amqp+ssl", "https": "https"}


def _check_certificates(path: str, option: str) -> None:
    """Load ``path`` as PEM certificates into a throw-away context: the file alone is to blame."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=path)
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            raise ConfigError(f"'{option}': {path} holds no PEM certificate ({exc.reason or exc})") from None
        raise ConfigError(f"'{option}': cannot read {path}: {exc.strerror or exc}") from None


def server_context(listener: TlsListenerConfig, option: str) -> ssl.SSLContext:
    """The server context for the TLS listener configured under ``option`` (e.g. ``stomp_ssl``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # TLS 1.0 and 1.1 are deprecated (RFC 8996); Java 17 clients (ActiveMQ, Artemis) speak 1.2 and 1.3.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _check_certificates(listener.tls_cert_file, f"{option}.tls_cert_file")
    try:
        context.load_cert_chain(listener.tls_cert_file, listener.tls_key_file)
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            # the certificate loaded above, so the key is unreadable as PEM or belongs to another certificate
            raise ConfigError(f"'{option}.tls_key_file': {listener.tls_key_file} is not the PEM private key of "
                              f"{listener.tls_cert_file} ({exc.reason or exc})") from None
        raise ConfigError(f"'{option}.tls_key_file': cannot read {listener.tls_key_file}: "
                          f"{exc.strerror or exc}") from None
    if listener.tls_ca_file is not None:
        _check_certificates(listener.tls_ca_file, f"{option}.tls_ca_file")
        context.load_verify_locations(cafile=listener.tls_ca_file)
        # Without tls_require_client_cert a client may still present one; it is checked if it does.
        context.verify_mode = ssl.CERT_REQUIRED if listener.tls_require_client_cert else ssl.CERT_OPTIONAL
    return context


def server_contexts(config: BrokerConfig) -> dict[str, ssl.SSLContext]:
    """Listener option -> context for every TLS listener configured; ConfigError names the first bad one."""
    return {option: server_context(listener, option)
            for option in TLS_LISTENERS if (listener := getattr(config, option)) is not None}
