"""Fixtures of the PostgreSQL tests: ``pg_schema``, a fresh schema name in the session
server (``pg_uri``, tests/conftest.py), dropped after the test."""

from __future__ import annotations

import itertools
import os

import pytest

_ids = itertools.count()


@pytest.fixture
def pg_admin(pg_uri):
    import psycopg  # the pg_uri fixture skipped already when it is missing

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pg_schema(pg_admin) -> str:
    name = f"ferry_pg{os.getpid()}_{next(_ids)}"
    yield name
    pg_admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
