"""`python -m reference_broker`: run the reference broker until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys

from .cluster.service import NetworkService
from .config import BrokerConfig, ConfigError, build_config, load_config
from .ha.runner import MasterSlaveRunner
from .server import BrokerServer
from .tls import READY_NAMES, server_contexts


def build_parser(prog: str = "python -m reference_broker") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Run the brokerconf reference broker.")
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file")
    parser.add_argument("--name", help="broker name (default: reference)")
    parser.add_argument("--stomp", metavar="HOST:PORT", help="STOMP listener (default 127.0.0.1:61613; port 0 picks one)")
    parser.add_argument("--amqp", metavar="HOST:PORT", help="AMQP 1.0 listener (off by default; port 0 picks one)")
    parser.add_argument("--mqtt", metavar="HOST:PORT", help="MQTT 3.1.1 / 5.0 listener (off by default; port 0 picks one)")
    parser.add_argument("--http", metavar="HOST:PORT", help="read-only JSON statistics listener")
    for option, scheme in READY_NAMES.items():
        parser.add_argument(f"--{option.replace('_', '-')}", metavar="HOST:PORT", dest=option,
                            help=f"{scheme} listener (TLS; the certificate from the configuration or --tls-cert-file)")
    parser.add_argument("--tls-cert-file", metavar="PEM", help="broker certificate for TLS listeners given as flags")
    parser.add_argument("--tls-key-file", metavar="PEM", help="its private key")
    parser.add_argument("--tls-ca-file", metavar="PEM", help="CAs that sign accepted client certificates")
    parser.add_argument("--tls-require-client-cert", action="store_true",
                        help="refuse TLS clients without a certificate signed by --tls-ca-file")
    parser.add_argument("--data", metavar="DIR", help="data directory; enables the journal store (unless the config names a database store)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    config = load_config(args.config) if args.config else BrokerConfig()
    # Only what the file set, so the flags' configuration knows which options were left out: an
    # option's absence has a meaning of its own in places (advisory_support: on with network
    # connectors, cluster/advisories.py; an address setting supplies only the options it sets,
    # engine/policy.py). A full dump would mark every option as set, to its default value: a
    # broker started from a file with network connectors then published no consumer advisories.
    overrides = config.model_dump(exclude_unset=True)
    if args.name:
        overrides["name"] = args.name
    if args.stomp:
        overrides["stomp"] = args.stomp
    if args.amqp:
        overrides["amqp"] = args.amqp
    if args.mqtt:
        overrides["mqtt"] = args.mqtt
    if args.http:
        overrides["http"] = args.http
    _tls_overrides(args, overrides)
    if args.data:
        overrides["data"] = args.data
        if config.store.kind == "memory":  # a database store keeps its database
            overrides["store"] = {**overrides.get("store", {}), "kind": "journal"}
    return build_config(overrides)


class UsageError(ValueError):
    """Flags that do not fit together (exit status 2, like argparse's own errors)."""


def _tls_overrides(args: argparse.Namespace, overrides: dict) -> None:
    """``--stomp-ssl HOST:PORT`` moves the configured TLS listener, or opens one with the
    ``--tls-*-file`` flags; those flags also replace the files of configured TLS listeners."""
    files = {key: value for key, value in (("tls_cert_file", args.tls_cert_file), ("tls_key_file", args.tls_key_file),
                                           ("tls_ca_file", args.tls_ca_file)) if value}
    if args.tls_require_client_cert:
        files["tls_require_client_cert"] = True
    for option in READY_NAMES:
        address = getattr(args, option, None)
        listener = overrides.get(option)
        if address and listener is None and not ("tls_cert_file" in files and "tls_key_file" in files):
            raise UsageError(f"--{option.replace('_', '-')} needs --tls-cert-file and --tls-key-file "
                             f"(or a [{option}] section in the configuration)")
        if address:
            listener = {**(listener or {}), "address": address}
        if listener is not None:
            overrides[option] = {**listener, **files}


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = config_from_args(args)
        server_contexts(config)  # a missing, unreadable or mismatched TLS file is a configuration error
    except UsageError as exc:
        print(f"reference broker: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"reference broker: bad configuration: {exc}", file=sys.stderr)
        return 2
    # Messages, refs and frames are many small objects that mostly die young, while a backlog
    # keeps many alive: with the default thresholds the collector walks that backlog again and
    # again. Collect the young generation less often (the broker creates no reference cycles
    # on its hot path) and keep start-up objects out of later collections.
    gc.set_threshold(50_000, 20, 50)
    gc.freeze()
    try:
        import uvloop  # optional: faster event loop where available

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(_serve(config))


async def _serve(config: BrokerConfig) -> int:
    """Run the broker until SIGTERM / SIGINT / SIGHUP: as master or slave of its journal's directory
    (reference_broker/ha/runner.py), or at once with the memory store. Launchers wait for the
    ``ready:`` line (and read the bound ports from it when port 0 was given), or for the
    ``slave:`` line of a broker waiting for the store's lock."""
    log = logging.getLogger("reference_broker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too (a closed terminal): Python's default would end the process without closing the
    # listeners and the journal (`brokerconf broker` runs this in the foreground)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)

    async def serve(server: BrokerServer):
        # Network connectors after the listeners: peers must be able to reach this broker's
        # advisories as soon as its bridges announce themselves (reference_broker/cluster).
        network = None
        if config.network_connectors or config.advisory_support:
            network = NetworkService(server.broker, config, stomp_address=server.stomp_address)
            await network.start()
        cluster = None
        if config.cluster_connection is not None:  # Artemis-style clustering (reference_broker/clustering)
            from .clustering.service import ClusterService

            cluster = ClusterService(server.broker, config)
            await cluster.start()
            clusters[server] = cluster

        async def shutdown(graceful: bool) -> None:
            if cluster is not None:
                # scale-down (when configured) on a graceful stop only (artemis-clusters.md, "Scaling Down")
                await cluster.stop(scale_down=None if graceful else False)
            if network is not None:
                await network.stop()
        return shutdown

    clusters: dict = {}

    def on_master(server: BrokerServer) -> None:
        parts = []
        for key in ("stomp", "amqp", "mqtt"):
            address = getattr(server, f"{key}_address")
            if address:
                parts.append(f"{key}=%s:%d" % address)
        if runner.http_address:
            parts.append("http=%s:%d" % runner.http_address)
        for option, bound in server.tls_addresses.items():
            parts.append("%s=%s:%d" % (READY_NAMES[option], *bound))
        if server in clusters:
            parts.append("cluster=%s:%d" % clusters[server].acceptor_address)
        print(f"reference broker {config.name!r} ready: {' '.join(parts)}", file=sys.stderr, flush=True)

    def on_slave() -> None:
        http = " http=%s:%d" % runner.http_address if runner.http_address else ""
        print(f"reference broker {config.name!r} slave: waiting for the store's lock{http}",
              file=sys.stderr, flush=True)

    runner = MasterSlaveRunner(config, serve=serve, on_master=on_master, on_slave=on_slave)
    try:
        await runner.run(stop)
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except Exception as exc:  # store corrupt, etc.: say what, exit non-zero
        log.error("cannot start: %s", exc)
        return 1
    log.info("shut down")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
