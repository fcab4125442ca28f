"""Where the store's own WAL reset holds the write lock, and for how long (counted in
statements and settings, not timed).

A RESTART checkpoint holds the write lock while it copies and while it waits for readers:
every other writer waits behind it. So the store copies first with a PASSIVE checkpoint
(no write lock), lets the RESTART wait at most ``WAL_RESET_WAIT_MS``, and retries a reset
that found the lock busy a few writes later.
"""

from __future__ import annotations

import os
import sqlite3

from ferry_core import store as store_mod


def _checkpoint_statements(store, fn) -> list[str]:
    seen: list[str] = []
    store.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        store.set_trace_callback(None)
    return [s for s in seen if "checkpoint" in s or "busy_timeout" in s]


def _lifecycles(store, n: int) -> None:
    for i in range(n):
        tid = store.dispatch(None, payload={"i": i, "pad": "p" * 200})
        c = store.poll_next("A")
        store.fulfill(tid, "A", c.token, i)


def _over_the_limit(store_factory, db_path):
    """A store whose WAL a reader pinned past the limit: its own checkpoints are on."""
    store = store_factory(wal_limit_bytes=1 << 20)
    reader = sqlite3.connect(db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM tasks").fetchall()
    for _ in range(40):  # ~1.5 MiB of frames at most: 1 KiB pages write little per lifecycle
        _lifecycles(store, 10)
        if store._own_checkpoints:
            break
    assert store._own_checkpoints
    return store, reader


def _let_go(store_factory, db_path):
    """``_over_the_limit``, then the reader lets go: the next reset can complete."""
    store, reader = _over_the_limit(store_factory, db_path)
    reader.execute("ROLLBACK")
    reader.close()
    return store


def test_the_reset_copies_without_the_write_lock_first_and_waits_briefly(store_factory,
                                                                          db_path):
    store = _let_go(store_factory, db_path)
    stmts = _checkpoint_statements(store, lambda: store._bound_wal(retry=False))
    passive = stmts.index("PRAGMA wal_checkpoint(PASSIVE)")
    restart = stmts.index("PRAGMA wal_checkpoint(RESTART)")
    assert passive < restart, stmts
    wait = f"PRAGMA busy_timeout={store_mod.WAL_RESET_WAIT_MS}"
    assert stmts.index(wait) < restart, stmts  # the write lock is held this long at most
    assert store_mod.WAL_RESET_WAIT_MS <= 5
    assert not store._reset_pending


def test_a_busy_reset_is_retried_soon_without_copying_again(store_factory, db_path):
    store, reader = _over_the_limit(store_factory, db_path)
    try:
        stmts = _checkpoint_statements(store, lambda: store._bound_wal(retry=False))
        assert "PRAGMA wal_checkpoint(RESTART)" in stmts
        assert store._reset_pending  # the reader still pins the WAL: the RESTART gave up
        retried = _checkpoint_statements(store, lambda: _lifecycles(store, 2))  # 6 writes
        assert retried.count("PRAGMA wal_checkpoint(RESTART)") >= 1, retried
        assert "PRAGMA wal_checkpoint(PASSIVE)" not in retried, retried
    finally:
        reader.execute("ROLLBACK")
        reader.close()
    _lifecycles(store, 4)
    assert not store._reset_pending


def test_the_reset_restarts_and_reads_the_frame_count_from_the_shm_header(store_factory,
                                                                          db_path):
    store = _let_go(store_factory, db_path)
    stmts = _checkpoint_statements(store, lambda: store._bound_wal(retry=False))
    assert "PRAGMA wal_checkpoint(RESTART)" in stmts, stmts
    before = store._wal_frames_bytes()
    _lifecycles(store, 1)  # the next writer starts the WAL over: a few frames, file kept
    assert 0 < store._wal_frames_bytes() < 64 * 1024 < before, before
    assert 64 * 1024 < os.path.getsize(db_path + "-wal") <= store.wal_limit_bytes  # cut back


def test_without_a_readable_shm_header_the_reset_truncates(store_factory, db_path,
                                                          monkeypatch):
    store = _let_go(store_factory, db_path)
    monkeypatch.setattr(store, "_shm_readable", lambda: False)
    assert store._wal_frames_bytes() is None
    stmts = _checkpoint_statements(store, lambda: store._bound_wal(retry=False))
    assert "PRAGMA wal_checkpoint(TRUNCATE)" in stmts, stmts
    assert os.path.getsize(db_path + "-wal") == 0  # the file size stays a true measure
