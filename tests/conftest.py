"""Shared fixtures for the ferry test-suite.

Kept generic on purpose: every test file (store tests, harness tests, benchmarks) may use
them.

- ``clock``: a ``ManualClock`` at 1_000_000 ms; move it with ``set`` / ``advance``.
- ``claim_strategy``: parametrized over ``"cas"`` and ``"immediate"``.
- ``db_path``: a fresh database path in ``tmp_path`` (not created yet).
- ``store_factory(path=None, **kw)``: opens a ``LeaseStore`` on ``db_path`` (or ``path``)
  with the test's clock and claim strategy unless overridden; closes them all at teardown.
- ``store``: ``store_factory()``, so every test that uses it runs for both strategies.
- ``db_dump(target=None)``: the database content (``iterdump`` + ``user_version``) read
  through a separate read-only connection, for byte-for-byte before/after comparisons.
- ``wal_size(path=None)``: size in bytes of the ``-wal`` file (0 when absent).
- ``assert_refused(store, exc, fn, *args, **kw)``: the call raises exactly ``exc``, the
  database content is unchanged and (for ``LeaseStore``) no transaction is left open.
- ``pg_uri`` (session): a libpq URI of a PostgreSQL server: ``$FERRY_PG_URI``, else a
  throwaway cluster (``ferry_harness.runtime.pgserver``) started once per test process and
  removed at the end. Without PostgreSQL it skips, naming what to install; with ``CI`` set
  it fails instead (CI never skips the Postgres tests).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ferry_core import LeaseStore, ManualClock

CLOCK_START_MS = 1_000_000
CLAIM_STRATEGIES = ("cas", "immediate")


def _db_file(target) -> str:
    """A store (anything with ``.path``) or a path -> the database path."""
    return os.fspath(getattr(target, "path", target))


def dump_database(path) -> list[str]:
    """Everything in the database, as SQL text, via a fresh read-only connection."""
    uri = Path(_db_file(path)).absolute().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        lines = list(conn.iterdump())
        lines.append(f"-- user_version={conn.execute('PRAGMA user_version').fetchall()[0][0]}")
    finally:
        conn.close()
    return lines


def wal_file_size(path) -> int:
    wal = _db_file(path) + "-wal"
    return os.path.getsize(wal) if os.path.exists(wal) else 0


@pytest.fixture(scope="session")
def pg_uri():
    from ferry_harness.runtime import pgserver  # only sessions that use Postgres pay for it

    uri = os.environ.get(pgserver.ENV_URI)
    if uri:
        yield uri
        return
    missing = None
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing = "psycopg not importable (pip install -e '.[test,adapters]')"
    if missing is None and pgserver.find_bindir() is None:
        missing = ("postgresql not found: no initdb/pg_ctl (apt-get install postgresql, or "
                   f"set {pgserver.ENV_URI} to a server)")
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the PostgreSQL tests: {missing}", pytrace=False)
        pytest.skip(missing)
    with pgserver.PgServer() as server:
        yield server.uri


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START_MS)


@pytest.fixture(params=CLAIM_STRATEGIES)
def claim_strategy(request) -> str:
    return request.param


@pytest.fixture
def db_path(tmp_path) -> str:
    return str(tmp_path / "ferry.db")


@pytest.fixture
def store_factory(db_path, clock, claim_strategy):
    made: list[LeaseStore] = []

    def make(path=None, **kw) -> LeaseStore:
        kw.setdefault("clock", clock)
        kw.setdefault("claim_strategy", claim_strategy)
        s = LeaseStore(db_path if path is None else os.fspath(path), **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.close()
        except Exception:  # already closed by the test
            pass


@pytest.fixture
def store(store_factory) -> LeaseStore:
    return store_factory()


@pytest.fixture
def db_dump(db_path):
    def dump(target=None) -> list[str]:
        return dump_database(db_path if target is None else target)

    return dump


@pytest.fixture
def wal_size(db_path):
    def size(target=None) -> int:
        return wal_file_size(db_path if target is None else target)

    return size


@pytest.fixture
def assert_refused():
    def check(store, exc: type[BaseException], fn, *args, **kwargs) -> pytest.ExceptionInfo:
        before = dump_database(store)
        with pytest.raises(exc) as info:
            fn(*args, **kwargs)
        assert type(info.value) is exc, f"expected exactly {exc.__name__}, got {info.value!r}"
        assert str(info.value), "a refusal needs a message a person can act on"
        conn = getattr(store, "_conn", None)
        if conn is not None:
            assert not conn.in_transaction, "a refusal left a transaction open"
        assert dump_database(store) == before, f"{exc.__name__} refusal changed the database"
        return info

    return check


# ---------------------------------------------------------------------- search jobs
# The suite already runs its files in parallel (pytest -n auto): a fuzz the tests start
# searches in one job unless the test asks for more (tests/harness/run/test_jobs.py does).
os.environ.setdefault("FERRY_JOBS", "1")


# ---------------------------------------------------------------------- fuzz budgets
def pytest_addoption(parser):
    parser.addoption("--ferry-thorough", action="store_true", default=False,
                     help="multiply fuzz budgets by 10 and use the ferry-thorough Hypothesis profile")


def pytest_configure(config):
    if config.getoption("--ferry-thorough"):
        from hypothesis import settings

        import ferry_harness.run.profiles  # noqa: F401  (registers the ferry-* profiles)

        settings.load_profile("ferry-thorough")


def pytest_collection_modifyitems(config, items):
    """``thorough`` cases (a second strategy, seed or signal of a case the default run
    already covers) run only with --ferry-thorough: the default suite has a time budget."""
    if config.getoption("--ferry-thorough"):
        return
    skip = pytest.mark.skip(reason="a further variant of a covered case: --ferry-thorough runs it")
    for item in items:
        if item.get_closest_marker("thorough"):
            item.add_marker(skip)


@pytest.fixture
def ferry_budget(request) -> float:
    """Multiplier for time budgets: 1 by default, 10 with --ferry-thorough."""
    return 10.0 if request.config.getoption("--ferry-thorough") else 1.0


# ------------------------------------------------------------- what the run did not cover
#: a skip reason naming one of these -> what the run could not check, and how to get it
SYSTEM_NEEDS = {
    "chromium": ("the timeline's browser tests", "apt-get install chromium"),
    "redis-server": ("the shared Redis example database test", "apt-get install redis-server"),
    "postgresql": ("the PostgreSQL store tests", "apt-get install postgresql"),
}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Name the coverage a missing system program cost, at the end of the run: without
    chromium or redis-server those tests skip, and a skip count alone hides it."""
    missing: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        for program in SYSTEM_NEEDS:
            if f"{program} not found" in reason:
                missing[program] = missing.get(program, 0) + 1
    if not missing:
        return
    terminalreporter.section("not covered", yellow=True)
    for program, count in missing.items():
        what, fix = SYSTEM_NEEDS[program]
        terminalreporter.write_line(f"{count} test(s) skipped, {what}: {program} not found "
                                    f"({fix}; .ci/run installs it)", yellow=True)


def one_mode_each(names) -> list:
    """``(name, mode)`` cases: each name in one mode by default, alternating so each mode
    gets half the names; the other mode is a ``thorough`` case (--ferry-thorough runs both)."""
    cases = []
    for i, name in enumerate(sorted(names)):
        for j, mode in enumerate(("stress", "schedule")):
            marks = () if (i + j) % 2 == 0 else (pytest.mark.thorough,)
            cases.append(pytest.param(name, mode, marks=marks, id=f"{name}-{mode}"))
    return cases
