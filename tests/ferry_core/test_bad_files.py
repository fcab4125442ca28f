"""Bad files: a database cut mid-page, a ``-wal`` with garbage appended, damaged pages, a
read-only database. ``ferry_core.LeaseStore`` raises ``StoreError`` (or recovers where
SQLite can), never a raw ``sqlite3`` exception; the harness reports a bad file as a
finding (exit 1) or, when the target cannot even be opened, as one line (exit 2), never
as its own crash.

Read-only: the suite runs as root, and root writes through ``chmod 0444``. The honest
equivalent is to *be* an unprivileged user (:mod:`tests.unprivileged`: a forked child drops
to ``nobody`` before it opens the store); without root the test chmods and opens in-process. Opening with a ``file:…?mode=ro`` URI is a separate, also honest
case: SQLite's own read-only mode (reads work, every write is a ``StoreError``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ferry_core import LeaseStore, ManualClock, errors
from ferry_harness.cli.main import main
from ferry_harness.run.executor import Executor
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from tests.procs import children_of
from tests.unprivileged import shared_dir as unprivileged_dir
from tests.unprivileged import unprivileged

PAGE = 4096


def _filled(path: str, n: int = 120) -> list[str]:
    """A ferry database with ``n`` tasks, checkpointed into the main file."""
    s = LeaseStore(path, clock=ManualClock(1_000))
    ids = [s.dispatch(None, payload={"i": i, "pad": "x" * 400}, exec_ttl_ms=1_000)
           for i in range(n)]
    s.checkpoint("TRUNCATE")
    s.close()
    return ids


def _every_call(store: LeaseStore, ids: list[str]) -> dict[str, str]:
    """Each API call's outcome: "ok" or the FerryError class; anything else is a bug."""
    calls = {
        "get": lambda: store.get(ids[-1]), "inspect": store.inspect,
        "salvaged": lambda: store.salvaged(ids[0]), "poll_next": lambda: store.poll_next("a"),
        "claim": lambda: store.claim(ids[len(ids) // 2], "b"), "sweep": store.sweep,
        "dispatch": lambda: store.dispatch(None), "acquire_lock": lambda: store.acquire_lock("l", "o", 5),
        "lock_holder": lambda: store.lock_holder("l"), "checkpoint": store.checkpoint,
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "ok"
        except errors.FerryError as exc:
            assert str(exc), f"{name}: a refusal needs a message"
            out[name] = type(exc).__name__
    return out


# ---------------------------------------------------------------------- truncated, damaged
@pytest.mark.parametrize("cut", [PAGE // 2 + 7, PAGE + 1_000, 3 * PAGE + 17, "half"])
def test_database_truncated_mid_page_raises_store_error(tmp_path, cut):
    path = str(tmp_path / "t.db")
    _filled(path)
    size = os.path.getsize(path)
    cut = size // 2 + 123 if cut == "half" else cut
    assert cut % PAGE
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    with pytest.raises(errors.StoreError) as info:
        LeaseStore(path, clock=ManualClock(1_000))
    assert "malformed" in str(info.value) and path in str(info.value)


def test_empty_file_is_a_new_store(tmp_path):
    """Cut to 0 bytes: SQLite treats it as an empty database, so it opens as a new store."""
    path = tmp_path / "t.db"
    path.write_bytes(b"")
    with LeaseStore(str(path), clock=ManualClock(1)) as s:
        assert s.inspect() == [] and s.dispatch(None)


@pytest.mark.parametrize("page", [2, 5, 20])
def test_damaged_pages_give_store_errors_never_raw_sqlite(tmp_path, page):
    path = str(tmp_path / "d.db")
    ids = _filled(path)
    with open(path, "r+b") as fh:
        fh.seek(page * PAGE + 50)
        fh.write(os.urandom(2_000))
    try:
        store = LeaseStore(path, clock=ManualClock(1_000))
    except errors.StoreError:
        return
    with store:
        outcomes = _every_call(store, ids)
    assert set(outcomes.values()) <= {"ok", "StoreError", "NotFound"}, outcomes


# ---------------------------------------------------------------------- -wal with garbage
def _crash_with_wal(path: str, n: int) -> list[str]:
    """A child process writes ``n`` tasks and dies without closing: the -wal keeps them."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        s = LeaseStore(path, clock=ManualClock(1_000))
        ids = [s.dispatch(None, payload={"i": i}) for i in range(n)]
        os.write(w, json.dumps(ids).encode())
        os._exit(0)  # no close(): no checkpoint, the frames stay in the -wal
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.parametrize("keep_shm", [True, False], ids=["shm-kept", "shm-lost"])
def test_wal_with_garbage_appended_recovers(tmp_path, keep_shm):
    path = str(tmp_path / "w.db")
    ids = _crash_with_wal(path, 30)
    wal = Path(path + "-wal")
    frames = wal.stat().st_size
    assert frames > 0
    with open(wal, "ab") as fh:
        fh.write(os.urandom(5_000) + b"garbage" * 100)
    if not keep_shm:
        os.unlink(path + "-shm")  # forces SQLite to rebuild the index from the -wal itself
    with LeaseStore(path, clock=ManualClock(2_000)) as s:
        assert [v.task_id for v in s.inspect()] == ids  # every committed frame survived
        assert s.get(ids[-1]).payload == {"i": 29}
        claim = s.poll_next("a")
        s.fulfill(claim.task_id, "a", claim.token, "done")
        assert s.checkpoint("TRUNCATE")[0] == 0
        assert wal.stat().st_size == 0
    db = __import__("sqlite3").connect(Path(path).as_uri() + "?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()


# ---------------------------------------------------------------------- read-only
@pytest.fixture
def shared_dir():
    """A directory an unprivileged user can enter (pytest's tmp_path is private to root)."""
    with unprivileged_dir() as d:
        yield d


def _open_outcome(path: str):
    def attempt():
        try:
            LeaseStore(path, clock=ManualClock(1)).close()
            return "opened"
        except errors.StoreError as exc:
            return f"StoreError: {exc}"
    return attempt


@pytest.mark.parametrize("case", ["file-0444", "directory-read-only"])
def test_read_only_database_raises_store_error(shared_dir, case):
    path = os.path.join(shared_dir, "ro.db")
    _filled(path, 3)
    if case == "file-0444":
        os.chmod(path, 0o444)
        want = "not readable and writable by this user"
    else:
        os.chmod(path, 0o666)  # the file is writable, but -wal/-shm cannot be created
        os.chmod(shared_dir, 0o555)
        want = "is not writable: WAL mode needs"
    got = unprivileged(_open_outcome(path))
    os.chmod(shared_dir, 0o755)
    assert got.startswith("StoreError") and want in got, got


def test_read_only_uri_reads_and_refuses_writes(tmp_path):
    path = str(tmp_path / "ro.db")
    ids = _filled(path, 5)
    with LeaseStore(f"file:{path}?mode=ro", clock=ManualClock(2_000)) as s:
        assert [v.task_id for v in s.inspect()] == ids
        outcomes = _every_call(s, ids)
    for write in ("poll_next", "claim", "dispatch", "acquire_lock"):
        assert outcomes[write] == "StoreError", outcomes
    for read in ("get", "inspect", "salvaged", "lock_holder", "sweep", "checkpoint"):
        assert outcomes[read] == "ok", outcomes  # an idle sweep and checkpoint write nothing


# ---------------------------------------------------------------------- the harness
def truncated_store(path: str, *, clock) -> LeaseStore:
    """A target whose database is cut mid-page before it is opened: the factory raises."""
    src = path + ".src"
    _filled(src, 60)
    data = Path(src).read_bytes()
    Path(path).write_bytes(data[: 3 * PAGE + 1_234])
    return LeaseStore(path, clock=clock)


class ShrinkingStore(LeaseStore):
    """Opens fine; every checkpoint then loses the tail of the file (a failing disk)."""

    def checkpoint(self, mode: str = "TRUNCATE"):
        out = super().checkpoint(mode)
        size = os.path.getsize(self.path)
        if size > 3 * PAGE:
            with open(self.path, "r+b") as fh:
                fh.truncate(size - 2_000)
        return out


def shrinking_store(path: str, *, clock) -> ShrinkingStore:
    return ShrinkingStore(path, clock=clock)


@pytest.mark.parametrize("command", [["fuzz", "--max-examples", "2"], ["crash", "--rounds", "3"]])
def test_unopenable_target_is_one_line_exit_2(tmp_path, capsys, command):
    rc = main([*command, "--target", "tests.ferry_core.test_bad_files:truncated_store", "--quiet",
               "--report-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err
    assert "raised in a worker: StoreError" in err and "malformed" in err
    assert children_of(os.getpid()) == []


def test_file_damaged_mid_run_is_a_finding(tmp_path, capsys):
    rc = main(["fuzz", "--target", "tests.ferry_core.test_bad_files:shrinking_store", "--budget", "20",
               "--quiet", "--report-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert rc == 1 and "internal error" not in err, err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "fail"
    v = report["violations"][0]  # the closing integrity check, or the store's StoreError
    assert v["invariant"] == "integrity" or "StoreError" in json.dumps(v)
    assert children_of(os.getpid()) == []


def test_integrity_probe_reports_a_damaged_file(tmp_path):
    """The nemesis's integrity check (run in the reader process) turns into a violation."""
    clock = SharedClock()
    with WorkerPool("ferry_core:LeaseStore", clock, 2) as pool:
        ex = Executor(pool, clock, str(tmp_path / "i.db"))
        for i in range(60):
            ex._one(0, "dispatch", "client", target_agent=None, payload={"pad": "x" * 400, "i": i})
        ex._one(0, "checkpoint", "janitor", mode="TRUNCATE")
        assert ex.integrity_check().value == "ok"
        with open(ex.path, "r+b") as fh:
            fh.seek(5 * PAGE)  # a b-tree page header
            fh.write(b"\xff" * 100)
        op = ex.integrity_check()
        found = ex.checker.check(ex.history, [op])
    assert op.value != "ok"
    assert [v.invariant for v in found] == ["integrity"], found
