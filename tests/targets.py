"""Extra targets for harness tests (correct stores with unusual properties)."""

from __future__ import annotations

import sqlite3

from ferry_core import LeaseStore


def unscheduled_store(path: str, *, clock) -> LeaseStore:
    """A correct store whose connection bypasses ``sqlite3.connect`` (as apsw or a bundled
    SQLite would): schedule mode reaches no schedule point and must fall back to stress."""
    patched = sqlite3.connect
    sqlite3.connect = sqlite3.dbapi2.connect
    try:
        return LeaseStore(path, clock=clock)
    finally:
        sqlite3.connect = patched
