"""ferry_core's own tests run on both backends: every test that takes ``store`` or
``store_factory`` runs on SQLite (both claim strategies) and on PostgreSQL
(``PgLeaseStore``, one schema per test in the session's server, see ``pg_uri``).

Not on PostgreSQL (deselected, not skipped): the ``immediate`` strategy (a SQLite
transaction mode: PgLeaseStore has one claim strategy), tests marked ``sqlite_only`` (the
file, the WAL, PRAGMAs, SQLite's statements), and tests that ask for the SQLite file itself
(``db_path``, ``wal_size``). Of the rest, the default run takes up to three variants of
each parametrized test on Postgres, each showing a parameter value the others do not;
``--ferry-thorough`` runs every combination.

``db_dump`` and ``assert_refused`` read a Postgres store's schema through a separate
connection, as they read a SQLite file through a read-only one.
"""

from __future__ import annotations

import itertools
import os

import pytest

from ferry_core import LeaseStore, PgLeaseStore
from tests.conftest import dump_database
from tests.ferry_core.backend import admin_connection

BACKENDS = ("sqlite", "postgres")
#: fixtures that are the SQLite file itself: a test asking for one runs on SQLite only
SQLITE_FIXTURES = frozenset({"db_path", "wal_size"})
#: the store's tables, dependents before what they reference (the order a reset deletes in)
_TABLES = ("task_deps", "tasks", "claim_tokens", "salvage", "daemon_locks")
_schema_ids = itertools.count()
#: Postgres variants of one parametrized test in the default run (every one: --ferry-thorough)
PG_DEFAULT_VARIANTS = 1


@pytest.fixture(params=BACKENDS)
def store_backend(request) -> str:
    return request.param


@pytest.hookimpl(tryfirst=True)  # before the root conftest's hook skips `thorough` items
def pytest_collection_modifyitems(config, items):
    """Deselect the Postgres variants that cannot apply (see the module docstring), and
    mark ``thorough`` all but the first ``PG_DEFAULT_VARIANTS`` Postgres variants of a
    test that each show a parameter value the earlier ones did not (the suite has a time
    budget); ``--ferry-thorough`` runs them all."""
    keep, drop = [], []
    seen: dict[str, set] = {}
    default_runs: dict[str, int] = {}
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("store_backend") != "postgres":
            keep.append(item)
            continue
        if (params.get("claim_strategy") == "immediate" or item.get_closest_marker("sqlite_only")
                or SQLITE_FIXTURES & _requested(item)):
            drop.append(item)
            continue
        keep.append(item)
        values = {(k, repr(v)) for k, v in params.items()
                  if k not in ("store_backend", "claim_strategy")}
        key = f"{item.path}::{item.originalname}"
        shown = seen.setdefault(key, set())
        kept = default_runs.get(key, 0)
        if kept >= PG_DEFAULT_VARIANTS or (shown and values <= shown):
            item.add_marker(pytest.mark.thorough)
            continue
        default_runs[key] = kept + 1
        shown |= values
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _requested(item) -> set[str]:
    """The fixtures the test function itself names (not those of its fixtures)."""
    info = getattr(item, "_fixtureinfo", None)
    return set(getattr(info, "argnames", ()) or ())


class SchemaPool:
    """The test process's schemas in the session server. A test takes one per database
    it opens and gives them back emptied (one DELETE per table: a few ms, against ~30-70 ms
    for creating a schema's tables and triggers), so a test sees exactly what a fresh
    schema holds: the store's empty tables."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.free: list[str] = []
        self.made: list[str] = []

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = f"ferry_t{os.getpid()}_{next(_schema_ids)}"
        self.made.append(name)
        return name

    def give_back(self, names: list[str]) -> None:
        conn = admin_connection(self.uri)
        for name in names:
            exists = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname=%s",
                                  (name,)).fetchall()[0][0]
            if exists != len(_TABLES) + 1:  # never opened, or not as the store made it
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
                continue
            # one round trip, one implicit transaction
            conn.execute("; ".join(f'DELETE FROM "{name}".{table}' for table in _TABLES))
            self.free.append(name)

    def drop_all(self) -> None:
        conn = admin_connection(self.uri)
        for name in self.made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(scope="session")
def pg_schema_pool(pg_uri):
    pool = SchemaPool(pg_uri)
    yield pool
    pool.drop_all()


class PgSchemas:
    """Schemas of one test: one per distinct ``path`` the test opens (a path is a
    database on SQLite; a schema is one on Postgres), taken from the pool."""

    def __init__(self, pool: SchemaPool) -> None:
        self.pool = pool
        self.uri = pool.uri
        self.names: dict[str, str] = {}

    def schema(self, path: str | None) -> str:
        key = path or ""
        if key not in self.names:
            self.names[key] = self.pool.take()
        return self.names[key]

    def dump(self, schema: str) -> list[str]:
        conn = admin_connection(self.uri)
        lines = []
        for table in _TABLES:
            rows = conn.execute(f'SELECT * FROM "{schema}".{table} ORDER BY 1').fetchall()
            lines += [f"{table} {r!r}" for r in rows]
        return lines

    def release(self) -> None:
        self.pool.give_back(list(self.names.values()))


@pytest.fixture
def pg_schemas(request, store_backend):
    if store_backend != "postgres":
        yield None
        return
    schemas = PgSchemas(request.getfixturevalue("pg_schema_pool"))
    yield schemas
    schemas.release()


@pytest.fixture
def store_factory(request, store_backend, pg_schemas, clock, claim_strategy):
    """``store_factory(path=None, **kw)`` on the test's backend (the root conftest's
    fixture on SQLite); on Postgres ``path`` names a schema of the test's own."""
    made: list = []

    def make(path=None, **kw):
        kw.setdefault("clock", clock)
        if pg_schemas is None:
            kw.setdefault("claim_strategy", claim_strategy)
            db = request.getfixturevalue("db_path") if path is None else os.fspath(path)
            s = LeaseStore(db, **kw)
        else:
            s = PgLeaseStore(pg_schemas.uri, schema=pg_schemas.schema(
                None if path is None else os.fspath(path)), **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.close()
        except Exception:  # already closed by the test
            pass


@pytest.fixture
def db_dump(request, pg_schemas):
    """The store's content, for before/after comparisons: the SQLite file's dump, or the
    rows of the test's Postgres schema (a store or a path picks which one)."""
    def dump(target=None) -> list[str]:
        if pg_schemas is None:
            return dump_database(request.getfixturevalue("db_path") if target is None
                                 else target)
        if isinstance(target, PgLeaseStore):
            return pg_schemas.dump(target.schema)
        return pg_schemas.dump(pg_schemas.schema(None if target is None else os.fspath(target)))

    return dump


@pytest.fixture
def assert_refused(pg_schemas):
    """As the root fixture, on both backends: exactly ``exc``, with a message, no
    transaction left open, and the content unchanged."""
    def check(store, exc: type[BaseException], fn, *args, **kwargs) -> pytest.ExceptionInfo:
        def content() -> list[str]:
            if isinstance(store, PgLeaseStore):
                return pg_schemas.dump(store.schema)
            return dump_database(store)

        before = content()
        with pytest.raises(exc) as info:
            fn(*args, **kwargs)
        assert type(info.value) is exc, f"expected exactly {exc.__name__}, got {info.value!r}"
        assert str(info.value), "a refusal needs a message a person can act on"
        if isinstance(store, PgLeaseStore):
            assert not store.in_transaction(), "a refusal left a transaction open"
        else:
            conn = getattr(store, "_conn", None)
            if conn is not None:
                assert not conn.in_transaction, "a refusal left a transaction open"
        assert content() == before, f"{exc.__name__} refusal changed the database"
        return info

    return check
