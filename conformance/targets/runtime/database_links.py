"""A JDBC group's database links through the fault proxy (issue 18, section 5: "cut the master's
database link"): a fault proxy of its own with one proxy per node in front of the group's
PostgreSQL server, so each broker dials the database through ITS proxy and a lock-loss nemesis
built on these links by chaos (chaos/nemesis/lock.py lock_loss_nemesis, host names = node names)
can partition, slow or reset one broker's link while the others keep theirs. The same shape as the NFS store's `NfsStore` (runtime/nfs_store.py),
one proxy per host, which is what lets the lock-loss experiments treat both stores alike.

The group's cluster keeps it as ``rig`` and closes it after stopping its nodes and the database
(`close`: heal, delete the proxies, stop the fault proxy).
"""

from __future__ import annotations

import os

from machinery.postgres import PostgresServer

__all__ = ["DatabaseLinks"]


class DatabaseLinks:
    """``hosts``' links to ``database`` (a started `PostgresServer`): ``address(host)`` is where
    that host's broker dials the database, ``jdbc_url(host)`` / ``dsn(host)`` the same as a JDBC
    URL or a libpq connection string."""

    def __init__(self, database: PostgresServer, hosts: tuple[str, ...]) -> None:
        from machinery.faultproxy import start_fault_proxy
        from machinery.faultproxy.client import ToxiproxyClient, split_address

        if database.port is None:
            raise ValueError("the database must be started before its links are proxied (it has no port yet)")
        self.database = database
        self.proxy = start_fault_proxy()
        self._client = ToxiproxyClient(self.proxy.api_url)
        self._listen: dict[str, tuple[str, int]] = {}
        self.links: dict[str, str] = {}  # host -> its proxy's name
        try:
            upstream = f"{database.host}:{database.port}"
            for host in hosts:
                name = f"database-{host}-{os.getpid()}-{id(self) & 0xffff:x}"
                self._listen[host] = split_address(self._client.create_proxy(name, upstream=upstream)["listen"])
                self.links[host] = name
        except BaseException:
            self.close()
            raise

    def address(self, host: str) -> tuple[str, int]:
        return self._listen[host]

    def jdbc_url(self, host: str) -> str:
        address, port = self._listen[host]
        return f"jdbc:postgresql://{address}:{port}/{self.database.credentials.database}"

    def dsn(self, host: str) -> str:
        address, port = self._listen[host]
        c = self.database.credentials
        return f"host={address} port={port} user={c.user} password={c.password} dbname={c.database}"

    # what chaos needs to fault the links (chaos.nemesis.lock.lock_loss_nemesis)
    @property
    def proxy_api(self) -> str:
        return self.proxy.api_url

    #: no lease server of ours to expire a host at: the lease rows are the brokers' own
    store_address = None

    def heal(self) -> None:
        """Every host's link as it was made, whoever cut it."""
        for name in self.links.values():
            self._client.restore(name)

    def close(self) -> None:
        """Heal, delete the proxies, stop the fault proxy; a second call does nothing."""
        if self.proxy is None:
            return
        try:
            self.heal()
        finally:
            for name in self.links.values():
                try:
                    self._client.delete_proxy(name)
                except Exception:  # noqa: BLE001 - the proxy server goes next anyway
                    pass
            self.proxy.stop()
            self.proxy = None
