"""What a ferry_core test reads beside the store's API, on either backend: the rows behind
a store through a separate connection, and whether its connection has a transaction open."""

from __future__ import annotations

import sqlite3
from typing import Any

from ferry_core import PgLeaseStore

_ADMIN: dict[str, Any] = {}


def admin_connection(uri: str) -> Any:
    """One autocommit psycopg connection per server for the test process (a new one per
    read would cost a server process each time); it has no search_path of its own."""
    conn = _ADMIN.get(uri)
    if conn is None or conn.closed:
        import psycopg  # only Postgres variants need it

        conn = _ADMIN[uri] = psycopg.connect(uri, autocommit=True)
        conn.execute("SET lock_timeout = '10s'")  # a store left open fails the test, not the run
    return conn


def raw_rows(store: Any, sql: str, args: tuple = ()) -> list[tuple]:
    """Run one read (``?`` placeholders) on the store's database through a separate
    connection: the SQLite file, or the PgLeaseStore's schema."""
    if isinstance(store, PgLeaseStore):
        conn = admin_connection(store.uri)
        conn.execute(f'SET search_path TO "{store.schema}"')
        return conn.execute(sql.replace("?", "%s"), args).fetchall()
    conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def open_transaction(store: Any) -> bool:
    """True when the store's connection is inside a transaction (it never should be
    between calls)."""
    if isinstance(store, PgLeaseStore):
        return store.in_transaction()
    return store._conn.in_transaction
