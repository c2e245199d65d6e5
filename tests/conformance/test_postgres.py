"""The private PostgreSQL server the JDBC master/slave experiments use (machinery/postgres.py)."""

from __future__ import annotations

import os

import pytest

from conformance.requirements import skip_or_fail
from machinery import postgres

psycopg = pytest.importorskip("psycopg")

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path):
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    pg = postgres.PostgresServer(tmp_path / "pg")
    try:
        yield pg.start()
    finally:
        pg.stop()


def test_a_client_logs_in_over_tcp_with_the_password_and_keeps_data(server):
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v text)")
        conn.execute("INSERT INTO t VALUES ('kept')")
        assert conn.execute("SELECT v FROM t").fetchall() == [("kept",)]
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    assert server.jdbc_url == f"jdbc:postgresql://127.0.0.1:{server.port}/brokerconf"


def test_a_wrong_password_is_refused(server):
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(server.dsn.replace("password=brokerconf-secret", "password=wrong"))


def test_killed_server_restarts_on_the_same_port_with_its_committed_data(server):
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v int)")
        conn.execute("INSERT INTO t VALUES (1)")
    port, pid = server.port, server.pid
    server.kill()
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.start()
    assert server.port == port and server.pid != pid
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [(1,)]


def test_stop_ends_the_server_by_its_pid_and_removes_its_directory(tmp_path):
    ok, reason = postgres.availability()
    if not ok:
        skip_or_fail("postgresql", reason)
    pg = postgres.PostgresServer(tmp_path / "pg").start()
    pid, root = pg.pid, pg.root
    assert root.is_dir()
    pg.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not root.exists()
    assert "database system is shut down" in (tmp_path / "pg" / "postgres.log").read_text()
