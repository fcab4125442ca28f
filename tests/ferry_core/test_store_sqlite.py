"""SQLite rules (SPEC §6): WAL, checkpoints, idle-no-write, short transactions, open errors."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

import pytest

from ferry_core import (
    SCHEMA_VERSION,
    FerryError,
    LeaseStore,
    StoreError,
)
from tests.unprivileged import shared_dir, unprivileged

#: the SQLite file, its WAL, PRAGMAs and statements: not run against PgLeaseStore
pytestmark = pytest.mark.sqlite_only

T0 = 1_000_000


@pytest.fixture
def observer(db_path, store):
    """Another connection on the same file, held open: sees PRAGMA data_version move."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    yield conn
    conn.close()


def _data_version(conn) -> int:
    return conn.execute("PRAGMA data_version").fetchall()[0][0]


# ----------------------------------------------------------------- pragmas
def test_pragmas(store, db_path):
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    finally:
        conn.close()
    assert store._conn.execute("PRAGMA synchronous").fetchall()[0][0] == 1  # NORMAL
    assert store._conn.execute("PRAGMA foreign_keys").fetchall()[0][0] == 1
    assert os.path.exists(db_path + "-wal")


@pytest.mark.parametrize("policy,expected", [("stock", 1234), ("jitter", 0)])
def test_busy_timeout_per_policy(store_factory, policy, expected):
    s = store_factory(busy_policy=policy, busy_timeout_ms=1234)
    assert s._conn.execute("PRAGMA busy_timeout").fetchall()[0][0] == expected


# ----------------------------------------------------------------- checkpoints / WAL bound
def test_truncate_checkpoint_empties_the_wal(store, wal_size, clock):
    for i in range(20):
        tid = store.dispatch(None, payload={"i": i})
        c = store.poll_next("A")
        store.fulfill(tid, "A", c.token, "x" * 200)
    assert wal_size() > 0
    busy, log, done = store.checkpoint("PASSIVE")
    assert busy == 0 and log == done and log > 0
    store.dispatch(None)
    busy, log, done = store.checkpoint("TRUNCATE")
    assert (busy, log) == (0, done)
    assert wal_size() == 0
    store.dispatch(None)  # the store keeps working after a truncation
    assert wal_size() > 0
    assert store.checkpoint()[0] == 0 and wal_size() == 0


def test_checkpoint_mode_is_case_insensitive(store, wal_size):
    store.dispatch(None)
    assert store.checkpoint("truncate")[0] == 0
    assert wal_size() == 0


def test_wal_stays_bounded_under_steady_traffic(store, wal_size):
    """With no reader pinning a snapshot, the WAL is reused after each auto-checkpoint."""
    sizes = []
    for round_ in range(6):
        for i in range(200):
            tid = store.dispatch(None, payload={"i": i, "pad": "p" * 100})
            c = store.poll_next("A")
            store.fulfill(tid, "A", c.token, round_)
        sizes.append(wal_size())
    assert max(sizes[2:]) <= max(sizes[:2]) * 1.5 + 65_536, sizes


def test_wal_is_reset_once_the_auto_checkpoint_falls_behind(store_factory, db_path):
    """A reader pins the WAL (as other processes do all the time under contention): once
    the file passes wal_limit_bytes the store turns SQLite's automatic checkpoint off and
    resets the WAL itself whenever its frames pass half the limit; the file is cut back
    to the limit and never passes it again."""
    limit = 2 << 20
    store = store_factory(wal_limit_bytes=limit)

    def lifecycles(n: int) -> None:
        for i in range(n):
            tid = store.dispatch(None, payload={"i": i, "pad": "p" * 100})
            c = store.poll_next("A")
            store.fulfill(tid, "A", c.token, i)

    lifecycles(2)  # far below the limit: SQLite's automatic checkpoint stays on
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchall() == [(4000,)]
    reader = sqlite3.connect(db_path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM tasks").fetchall()  # pins a snapshot
        for _ in range(40):  # until the file passes the limit (1 KiB pages: ~200 lifecycles)
            lifecycles(20)
            if os.path.getsize(db_path + "-wal") > limit:
                break
        lifecycles(20)  # 60 writes: the store looks at the WAL every WAL_CHECK_EVERY (32)
        assert os.path.getsize(db_path + "-wal") > limit
    finally:
        reader.execute("ROLLBACK")
        reader.close()
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchall() == [(0,)]
    sizes, frames = [], []
    for _ in range(10):
        lifecycles(20)
        sizes.append(os.path.getsize(db_path + "-wal"))
        frames.append(store._wal_frames_bytes())
    # checked every WAL_CHECK_EVERY (32) commits: half the limit plus ~0.5 MiB of growth
    assert min(frames) < limit // 2 and max(frames) <= limit, frames
    assert max(sizes) <= limit, sizes
    resets = [b for a, b in zip(frames, frames[1:], strict=False) if b < a]
    assert resets, frames  # the frame count fell: the WAL restarted from its beginning


# ----------------------------------------------------------------- idle-no-write
def _not_ready_world(store, clock):
    """Tasks, but none ready for agent A and nothing due: an idle world."""
    store.dispatch("B")  # for somebody else
    busy = store.dispatch(None, exec_ttl_ms=10_000)
    store.dispatch(None, depends_on=[busy])  # waits on a claimed task
    c = store.claim(busy, "B")
    done = store.dispatch(None)
    d = store.claim(done, "B")
    store.fulfill(done, "B", d.token, "ok")
    store.acquire_lock("L", "B", 10_000)
    clock.advance(100)
    return c


def test_idle_poll_writes_nothing(store, clock, observer, wal_size):
    _not_ready_world(store, clock)
    store.checkpoint("TRUNCATE")
    wal_before, dv_before = wal_size(), _data_version(observer)
    for agent in ("A", "C"):
        assert store.poll_next(agent) is None
    assert store.sweep() == 0
    assert (wal_size(), _data_version(observer)) == (wal_before, dv_before)
    # the positive control: a write is visible to both measurements
    store.dispatch(None)
    assert wal_size() > wal_before
    assert _data_version(observer) != dv_before


def test_idle_poll_without_checkpoint_keeps_wal_size(store, clock, observer, wal_size):
    _not_ready_world(store, clock)
    wal_before, dv_before = wal_size(), _data_version(observer)
    assert wal_before > 0
    for _ in range(50):
        assert store.poll_next("A") is None
    assert (wal_size(), _data_version(observer)) == (wal_before, dv_before)


def test_calls_that_find_nothing_to_do_write_nothing(store, clock, observer, wal_size):
    c = _not_ready_world(store, clock)
    for_b = store.inspect("B")[0].task_id
    wal_before, dv_before = wal_size(), _data_version(observer)
    assert store.claim(for_b, "A") is None  # not for A
    assert store.claim(c.task_id, "A") is None  # already claimed
    assert store.acquire_lock("L", "A", 10) is False
    assert store.release_lock("L", "A") is False
    assert (wal_size(), _data_version(observer)) == (wal_before, dv_before)


def test_reads_never_write_and_never_sweep(store, clock, observer, wal_size):
    tid = store.dispatch(None, exec_ttl_ms=10)
    c = store.poll_next("A")
    store.salvage(tid, "A", c.token, "part")
    late = store.dispatch(None, queue_ttl_ms=5)
    store.acquire_lock("L", "A", 10)
    clock.advance(1_000)  # everything is due now
    wal_before, dv_before = wal_size(), _data_version(observer)
    for _ in range(3):
        v = store.get(tid)
        assert (v.status, v.is_logically_expired) == ("CLAIMED", True)
        assert store.get(late).status == "SUBMITTED"
        assert len(store.inspect()) == 2
        assert store.inspect("A")[0].task_id == tid
        assert len(store.salvaged(tid)) == 1
        assert store.lock_holder("L") is None
    assert (wal_size(), _data_version(observer)) == (wal_before, dv_before)
    assert store.sweep() == 2  # the due work was still there
    assert _data_version(observer) != dv_before


# ----------------------------------------------------------------- no long transactions
def test_no_transaction_or_snapshot_outlives_any_call(store, store_factory, clock, db_path):
    """After every call (refusals too) the connection is in autocommit with nothing open:
    another connection's TRUNCATE checkpoint is not blocked and empties the WAL."""
    other = sqlite3.connect(db_path, isolation_level=None)
    steps = 0

    def call(fn, *args, **kwargs):
        nonlocal steps
        try:
            out = fn(*args, **kwargs)
        except FerryError as exc:
            out = exc
        assert not store._conn.in_transaction, (fn.__name__, out)
        busy, log, done = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
        assert busy == 0, f"{fn.__name__} left a read snapshot or transaction open"
        assert os.path.getsize(db_path + "-wal") == 0
        steps += 1
        return out

    try:
        a = call(store.dispatch, None, exec_ttl_ms=100, max_attempts=2)
        call(store.dispatch, None, depends_on=["ghost"])  # NotFound
        call(store.dispatch, None, exec_ttl_ms=0)  # InvalidArgument
        b = call(store.dispatch, None, depends_on=[a])
        c = call(store.poll_next, "A")
        call(store.poll_next, "A")  # idle
        call(store.claim, "ghost", "A")  # NotFound
        call(store.claim, b, "A")  # not ready
        call(store.extend, a, "A", c.token)
        call(store.salvage, a, "A", c.token, [1])
        call(store.fulfill, a, "A", None, 1)  # TokenRequired
        call(store.fulfill, a, "A", "bad", 1)  # InvalidToken
        call(store.fulfill, a, "B", c.token, 1)  # PermissionDenied
        call(store.fail, a, "A", c.token, "")  # InvalidArgument
        call(store.fulfill, "ghost", "A", c.token, 1)  # NotFound
        call(store.get, a)
        call(store.get, "ghost")
        call(store.inspect)
        call(store.inspect, "A")
        call(store.salvaged, a)
        call(store.acquire_lock, "L", "A", 50)
        call(store.acquire_lock, "L", "B", 50)
        call(store.lock_holder, "L")
        call(store.release_lock, "L", "B")
        call(store.release_lock, "L", "A")
        clock.advance(1_000)
        call(store.fulfill, a, "A", c.token, "late")  # LeaseExpired (+ salvage)
        call(store.sweep)
        c2 = call(store.poll_next, "B")
        call(store.release, a, "B", c2.token)
        c3 = call(store.claim, a, "B")
        call(store.fulfill, a, "B", c3.token, "ok")
        c4 = call(store.poll_next, "B")
        call(store.fail, b, "B", c4.token, "x")
        call(store.fail, b, "B", c4.token, "again")  # WrongState
        call(store.checkpoint, "PASSIVE")
    finally:
        other.close()
    assert steps == 35


@pytest.mark.parametrize("policy", ["stock", "jitter"])
def test_a_long_foreign_transaction_gives_store_error_after_the_timeout(
        store_factory, db_path, policy):
    s = store_factory(busy_policy=policy, busy_timeout_ms=50)
    tid = s.dispatch(None)
    c = s.poll_next("A")
    ready = s.dispatch(None)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        for fn, args in ((s.dispatch, (None,)), (s.poll_next, ("B",)),
                         (s.fulfill, (tid, "A", c.token, 1)), (s.acquire_lock, ("L", "o", 5))):
            with pytest.raises(StoreError) as info:
                fn(*args)
            assert "busy_timeout_ms" in str(info.value)
            assert not s._conn.in_transaction
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    assert s.get(ready).status == "SUBMITTED"
    s.fulfill(tid, "A", c.token, 1)
    assert s.poll_next("B").task_id == ready


# ----------------------------------------------------------------- open errors
def _snapshot(path):
    """Bytes, mtime and the directory listing: 'never modified' means all three equal."""
    d = os.path.dirname(path)
    st = os.stat(path)
    with open(path, "rb") as fh:
        data = fh.read()
    return data, st.st_mtime_ns, st.st_size, sorted(os.listdir(d))


def _make_sqlite(path, *statements):
    conn = sqlite3.connect(path)
    try:
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


BAD_FILES = {
    "not-sqlite": lambda p: open(p, "wb").write(b"just some text, not a database\n" * 100),
    "short-garbage": lambda p: open(p, "wb").write(b"abc"),
    "sqlite-magic-then-garbage": lambda p: open(p, "wb").write(
        b"SQLite format 3\x00" + b"\xff\x13garbage" * 512),
    "newer-schema": lambda p: _make_sqlite(
        p, "CREATE TABLE tasks(x)", f"PRAGMA user_version={SCHEMA_VERSION + 1}"),
    "newer-schema-empty": lambda p: _make_sqlite(p, f"PRAGMA user_version={SCHEMA_VERSION + 7}"),
    "other-application": lambda p: _make_sqlite(
        p, "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO users(name) VALUES ('ada')"),
    "other-application-same-version": lambda p: _make_sqlite(
        p, "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO users(name) VALUES ('ada')", f"PRAGMA user_version={SCHEMA_VERSION}"),
    "other-application-sharing-a-table-name": lambda p: _make_sqlite(
        p, "CREATE TABLE tasks(id INTEGER PRIMARY KEY, what TEXT)",
        "CREATE TABLE notes(id INTEGER PRIMARY KEY)"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_open_refuses_files_that_are_not_our_store_and_never_touches_them(
        tmp_path, clock, kind, claim_strategy):
    path = str(tmp_path / "x.db")
    BAD_FILES[kind](path)
    before = _snapshot(path)
    with pytest.raises(StoreError) as info:
        LeaseStore(path, clock=clock, claim_strategy=claim_strategy)
    assert path in str(info.value) or "x.db" in str(info.value)
    assert _snapshot(path) == before


def test_newer_schema_message_says_what_to_do(tmp_path, clock):
    path = str(tmp_path / "new.db")
    BAD_FILES["newer-schema"](path)
    with pytest.raises(StoreError, match="upgrade"):
        LeaseStore(path, clock=clock)


def test_open_refuses_a_directory(tmp_path, clock):
    d = tmp_path / "adir"
    d.mkdir()
    (d / "keep").write_text("x")
    with pytest.raises(StoreError, match="directory"):
        LeaseStore(str(d), clock=clock)
    assert sorted(os.listdir(d)) == ["keep"]
    assert sorted(os.listdir(tmp_path)) == ["adir"]


def test_open_refuses_a_path_in_a_missing_directory(tmp_path, clock):
    path = tmp_path / "missing" / "deeper" / "x.db"
    with pytest.raises(StoreError, match="does not exist"):
        LeaseStore(str(path), clock=clock)
    assert os.listdir(tmp_path) == []


def _open_outcome(path: str, clock) -> Callable[[], str]:
    """Opening ``path``: "opened", or the StoreError and its message (anything else raised
    comes back as its class and message too, and fails the test)."""
    def attempt() -> str:
        try:
            LeaseStore(path, clock=clock).close()
            return "opened"
        except StoreError as exc:
            return f"StoreError: {exc}"
    return attempt


# Both run as an unprivileged user even when the suite runs as root (CI does): root writes
# through mode bits, and the checks below are what a user without the permission meets.
def test_open_refuses_an_unwritable_directory(clock):
    with shared_dir() as base:
        d = os.path.join(base, "ro")
        os.mkdir(d)
        os.chmod(d, 0o555)  # the database could be created by nobody, the -wal/-shm neither
        got = unprivileged(_open_outcome(os.path.join(d, "x.db"), clock))
        assert got.startswith("StoreError") and "is not writable: WAL mode needs" in got, got
        assert os.listdir(d) == []


def test_open_refuses_an_unreadable_store(clock):
    with shared_dir(0o777) as d:  # the directory is writable: only the file's mode refuses
        path = os.path.join(d, "x.db")
        LeaseStore(path, clock=clock).close()
        os.chmod(path, 0o000)
        got = unprivileged(_open_outcome(path, clock))
        assert got.startswith("StoreError") and "is not readable and writable by this user" in got, got
        assert sorted(os.listdir(d)) == ["x.db"]


def test_open_accepts_an_empty_file_as_a_new_store(tmp_path, clock):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with LeaseStore(str(path), clock=clock) as s:
        tid = s.dispatch(None)
        assert s.get(tid).status == "SUBMITTED"


def test_reopening_an_existing_store_keeps_everything(store, store_factory, db_dump):
    tid = store.dispatch(None, payload={"k": 1})
    store.close()
    before = db_dump()
    again = store_factory()
    assert db_dump() == before
    assert again.get(tid).payload == {"k": 1}


def test_reopening_after_analyze_is_not_mistaken_for_another_application(store, store_factory):
    tid = store.dispatch(None)
    store._conn.execute("ANALYZE")  # creates sqlite_stat1, SQLite's own table
    store.close()
    assert store_factory().get(tid).status == "SUBMITTED"


def test_idle_calls_take_no_write_lock(store_factory, clock, db_path):
    """With another connection holding the write lock, idle polls, sweeps and reads still
    answer at once: they never even begin a write transaction (two-phase sweep)."""
    s = store_factory(busy_timeout_ms=50)
    c = _not_ready_world(s, clock)
    s.salvage(c.task_id, "B", c.token, "part")
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        for _ in range(3):
            assert s.poll_next("A") is None
            assert s.sweep() == 0
            assert s.get(c.task_id).status == "CLAIMED"
            assert len(s.inspect()) == 4 and len(s.salvaged(c.task_id)) == 1
            assert s.lock_holder("L") == "B"
            assert s.release_lock("L", "A") is False
        with pytest.raises(StoreError):  # the control: a real write does wait, then give up
            s.dispatch(None)
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()


# ----------------------------------------------------------------- schema upgrades
def _history(path: str) -> dict[str, str | None]:
    """task_id -> retired_why of its token (one claim per task here)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT task_id, retired_why FROM claim_tokens").fetchall())
    finally:
        conn.close()


def test_a_version_2_file_is_upgraded_on_open_and_keeps_its_history(tmp_path):
    from ferry_core.schema import V2_DDL

    path = str(tmp_path / "v2.db")
    with LeaseStore(path) as store:  # made as version 2 made it: its retiring trigger
        conn = store._conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TRIGGER claim_token_retired")
        store._create(conn, V2_DDL)
        conn.execute("PRAGMA user_version=2")
        conn.execute("COMMIT")
        old = store.dispatch(None)
        c = store.poll_next("A")
        store.fulfill(old, "A", c.token, 1)
    assert _history(path) == {old: "complete"}  # version 2 rewrote the history row

    with LeaseStore(path) as store:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION == 4
        finally:
            conn.close()
        done, released = store.dispatch(None), store.dispatch(None)
        for tid in (done, released):
            c = store.poll_next("A")
            assert c.task_id == tid
            if tid == done:
                store.fulfill(tid, "A", c.token, 2)
            else:
                store.release(tid, "A", c.token)
    # what version 2 wrote stays; a completion is now the row's, a release still the history's
    assert _history(path) == {old: "complete", done: None, released: "release"}


# ----------------------------------------------------------------- version 4: pages, payloads
def _wal_frames(store: LeaseStore) -> int:
    """Frames in the WAL now (a PASSIVE checkpoint's second figure)."""
    return store._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0][1]


def test_a_new_file_has_small_pages_and_checkpoints_after_4_mib(store):
    from ferry_core.schema import PAGE_SIZE
    from ferry_core.store import AUTOCHECKPOINT_BYTES

    assert store._conn.execute("PRAGMA page_size").fetchall()[0][0] == PAGE_SIZE == 1024
    assert (store._conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0] * PAGE_SIZE
            == AUTOCHECKPOINT_BYTES)


def test_a_claim_and_a_fulfill_never_copy_the_payload(store, clock):
    """The payload is written once, by the dispatch: a lifecycle of a task with a 64 KiB
    payload appends about what one of a task without one does (the payload in the task row
    would be copied to the WAL by the claim and again by the fulfill)."""
    def lifecycle_bytes(payload) -> int:
        tid = store.dispatch(None, payload=payload)
        store.checkpoint("TRUNCATE")
        c = store.poll_next("A")
        assert c.task_id == tid
        store.fulfill(tid, "A", c.token, {"ok": True})
        page = store._conn.execute("PRAGMA page_size").fetchall()[0][0]
        return _wal_frames(store) * page

    small = lifecycle_bytes({"n": 1})
    big = lifecycle_bytes({"blob": "x" * 65536})
    assert big <= small + 4096 < 65536, (small, big)
    assert len(store.inspect()[-1].payload["blob"]) == 65536


def test_a_version_3_file_is_upgraded_and_keeps_its_pages_and_payloads(tmp_path):
    """A version-3 file (4 KiB pages, payloads in the task row) opens as version 4 and keeps
    both: a version-3 process that still has it open (a rolling upgrade) reads every
    payload, also those a version-4 process dispatches, in the task row."""
    path = str(tmp_path / "v3.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size=4096")
    conn.execute("PRAGMA journal_mode=WAL")  # the first write fixes the page size
    conn.close()
    with LeaseStore(path) as store:  # then made as version 3 made it: no task_payloads
        old = store.dispatch(None, payload={"v": 3})
        conn = store._conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE tasks SET payload=(SELECT payload FROM task_payloads p"
                     " WHERE p.seq = tasks.seq)")
        conn.execute("DROP TABLE task_payloads")
        conn.execute("PRAGMA user_version=3")
        conn.execute("COMMIT")
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0] == 1000

    with LeaseStore(path) as store:
        assert store._conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
        assert store._conn.execute("PRAGMA page_size").fetchall()[0][0] == 4096
        new = store.dispatch(None, payload={"v": 4})
        assert store.get(old).payload == {"v": 3} and store.get(new).payload == {"v": 4}
        # what a version-3 reader selects
        assert dict(store._conn.execute("SELECT task_id, payload FROM tasks").fetchall()) == {
            old: '{"v":3}', new: '{"v":4}'}
        assert not store._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name='task_payloads'").fetchall()
        for tid in (old, new):
            c = store.poll_next("A")
            assert c.task_id == tid
            store.fulfill(tid, "A", c.token, tid)
        assert [(v.payload, v.result) for v in store.inspect()] == [({"v": 3}, old),
                                                                   ({"v": 4}, new)]


def test_a_new_file_keeps_payloads_apart_and_still_reads_a_row_payload(store):
    """Version 4's own file: payloads in task_payloads, the row's column empty; a row
    payload (written by a store subclass with its own dispatch) is still what a read shows."""
    tid = store.dispatch(None, payload={"apart": True})
    assert store._conn.execute("SELECT payload FROM tasks WHERE task_id=?",
                               (tid,)).fetchall() == [(None,)]
    assert store.get(tid).payload == {"apart": True}
    store._conn.execute("DELETE FROM task_payloads")
    store._conn.execute("UPDATE tasks SET payload='[1]' WHERE task_id=?", (tid,))
    assert store.get(tid).payload == [1]


def test_page_size_is_chosen_for_a_new_file_and_checked(tmp_path):
    from ferry_core.errors import InvalidArgument

    path = str(tmp_path / "big-pages.db")
    with LeaseStore(path, page_size=4096) as store:
        assert store._conn.execute("PRAGMA page_size").fetchall()[0][0] == 4096
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0] == 1000
    with LeaseStore(path, page_size=2048) as store:  # an existing file keeps its own
        assert store._conn.execute("PRAGMA page_size").fetchall()[0][0] == 4096
    for bad in (0, 1000, 3072, 131072, True, "1024", None):
        with pytest.raises(InvalidArgument, match="page_size"):
            LeaseStore(str(tmp_path / "never.db"), page_size=bad)
    assert not (tmp_path / "never.db").exists()  # refused before the file is made
