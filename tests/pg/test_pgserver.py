"""The throwaway cluster (ferry_harness.runtime.pgserver): it starts, serves on a unix
socket only with durability off, and leaves no process and no directory behind, also when
its start fails."""

from __future__ import annotations

import os
import time

import pytest

from ferry_harness.errors import HarnessError, PgServerError
from ferry_harness.runtime import pgserver


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_cluster_starts_serves_and_leaves_nothing_behind(pg_uri):
    # pg_uri: skip (or fail, in CI) exactly as the other PostgreSQL tests do
    import psycopg

    if pgserver.find_bindir() is None:
        pytest.skip("postgresql not found (FERRY_PG_URI given): no cluster to start")
    with pgserver.PgServer() as server:
        directory = server.directory
        assert os.path.isdir(server.datadir)
        with psycopg.connect(server.uri, autocommit=True) as conn:
            settings = dict(conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                (["fsync", "synchronous_commit", "full_page_writes", "listen_addresses"],)
            ).fetchall())
            pid = conn.execute("SELECT pg_postmaster_start_time() IS NOT NULL").fetchall()
        postmaster = server._postmaster_pid()
        assert settings == {"fsync": "off", "synchronous_commit": "off",
                            "full_page_writes": "off", "listen_addresses": ""}
        assert pid == [(True,)] and postmaster is not None and _alive(postmaster)
        assert 0 < server.startup_s < 60
    assert _gone_within(postmaster), f"postmaster {postmaster} outlived PgServer.stop()"
    assert not os.path.exists(directory)


def _fake_bindir(tmp_path, exit_code: int):
    """initdb / pg_ctl / postgres that only fail: a start that cannot succeed."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.chmod(tmp_path, 0o755)
    for name in ("initdb", "pg_ctl", "postgres"):
        exe = bindir / name
        exe.write_text(f"#!/bin/sh\necho {name} says no >&2\nexit {exit_code}\n")
        exe.chmod(0o755)
    os.chmod(bindir, 0o755)
    return str(bindir)


def test_a_failed_start_raises_a_harness_error_and_removes_its_directory(tmp_path):
    server = pgserver.PgServer(bindir=_fake_bindir(tmp_path, 1))
    with pytest.raises(PgServerError) as info:
        server.start()
    assert isinstance(info.value, HarnessError)
    assert "initdb" in str(info.value)
    assert not os.path.exists(server.directory)
    server.stop()  # a second stop is harmless


def test_no_binaries_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(pgserver, "find_bindir", lambda: None)
    with pytest.raises(PgServerError, match="apt-get install postgresql"):
        pgserver.PgServer()


def test_the_environment_variable_names_an_existing_server(monkeypatch):
    monkeypatch.setenv(pgserver.ENV_URI, "postgresql://someone@db.example/ferry")
    monkeypatch.setattr(pgserver, "PgServer", None)  # starting one would fail loudly
    with pgserver.pg_server() as uri:
        assert uri == "postgresql://someone@db.example/ferry"


def test_schema_uri_adds_the_search_path_option():
    conninfo_to_dict = pytest.importorskip("psycopg.conninfo").conninfo_to_dict

    uri = pgserver.schema_uri("postgresql://postgres@/postgres?host=%2Ftmp%2Fx", "ex_17")
    assert conninfo_to_dict(uri)["options"] == "-c search_path=ex_17"
    assert conninfo_to_dict(uri)["host"] == "/tmp/x"
