"""A frozen (SIGSTOPped) worker stops the others for at most the busy timeout.

ferry_core takes no lock of its own: the only lock a frozen process can hold is SQLite's
write lock, and the others' calls then raise ``StoreError`` once ``busy_timeout_ms`` has
passed (PROTOCOL.md#claim-strategy-and-busy-handling: every call returns or raises). A
frozen process that was only *waiting* for the lock holds nothing at all, so the others
go on at once. The control is a busy policy with a side lock (blocking ``flock``, the
"waiting room" that notes.md describes and rejects): a frozen holder of it stalls every
other writer past the timeout, and the same checks catch it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import threading
import time

import multiprocess as mp
import pytest

from ferry_core import LeaseStore, StoreError
from ferry_core.busy import HybridPolicy

TIMEOUT_MS = 300
SLACK_S = 1.5  # the shared test machine: scheduling delays, not waits in the store
_CTX = mp.get_context("fork")


class _RoomPolicy(HybridPolicy):
    """Broken on purpose: writers queue on a blocking flock of a side file (no timeout)."""

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, room: str) -> None:
        super().__init__(conn, timeout_ms)
        self._fd = os.open(room, os.O_RDWR | os.O_CREAT, 0o600)

    def writing(self):
        policy = self

        class _Room:
            def __enter__(self):
                fcntl.flock(policy._fd, fcntl.LOCK_EX)

            def __exit__(self, *exc):
                fcntl.flock(policy._fd, fcntl.LOCK_UN)

        return _Room()

    def close(self) -> None:
        os.close(self._fd)


def _open(path: str, policy: str) -> LeaseStore:
    if policy == "room":
        probe = sqlite3.connect(path, isolation_level=None)  # the policy needs a connection
        probe.close()
        store = LeaseStore(path, busy_timeout_ms=TIMEOUT_MS, busy_policy="stock")
        store._busy = _RoomPolicy(store._conn, TIMEOUT_MS, path + ".room")
        store._writing = store._busy.writing
        return store
    return LeaseStore(path, busy_timeout_ms=TIMEOUT_MS, busy_policy=policy)


def _freeze_inside_a_write(path: str, policy: str) -> None:
    """Child: freeze itself in the middle of a write (write lock, and any side lock, held)."""
    store = _open(path, policy)
    with store._tx() as conn:
        conn.execute("UPDATE tasks SET title='frozen' WHERE seq=1")
        os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)


def _freeze_while_waiting(path: str, policy: str, ready: object) -> None:
    """Child: wait for the write lock another process holds (it is frozen meanwhile)."""
    store = LeaseStore(path, busy_timeout_ms=60_000, busy_policy=policy) if policy != "room" \
        else _open(path, policy)
    store._busy.timeout_s = 60.0
    ready.set()
    try:
        store.dispatch(None)
    except StoreError:
        pass
    os._exit(0)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "T"


def _wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + 10
    while not _stopped(pid):
        assert time.monotonic() < deadline, "the child never stopped"
        time.sleep(0.01)


def _within(fn, seconds: float) -> tuple[bool, object]:
    """Run ``fn`` in a thread: (finished within ``seconds``, its result or exception)."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:  # a StoreError is an answer too
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return (not t.is_alive()), (out[0] if out else None)


def _write_once(path: str, policy: str) -> object:
    """Open a store and dispatch once (run in the watching thread: one connection per
    thread); the new id, or the exception it raised. A read must answer either way."""
    store = _open(path, policy)
    try:
        try:
            return store.dispatch(None)
        except StoreError as exc:
            assert store.inspect(), "a read was blocked too"
            return exc
    finally:
        store.close()


def _end(proc) -> None:
    if proc.is_alive():
        os.kill(proc.pid, signal.SIGKILL)
    proc.join(5)


@pytest.mark.parametrize("policy", ["spin", "hybrid", "jitter", "stock", "room"])
def test_a_worker_frozen_inside_a_write_blocks_others_for_the_busy_timeout_only(
        tmp_path, policy):
    path = str(tmp_path / "x.db")
    with LeaseStore(path) as setup:
        setup.dispatch(None)
    child = _CTX.Process(target=_freeze_inside_a_write, args=(path, policy), daemon=True)
    child.start()
    try:
        _wait_stopped(child.pid)
        t0 = time.monotonic()
        done, answer = _within(lambda: _write_once(path, policy), TIMEOUT_MS / 1000 + SLACK_S)
        if policy == "room":  # the control: the frozen side-lock holder stalls it
            assert not done, "the broken side-lock policy went unnoticed"
            return
        assert done, f"a call stayed blocked {time.monotonic() - t0:.1f}s behind a frozen worker"
        assert isinstance(answer, StoreError) and "busy_timeout_ms" in str(answer), answer
        _end(child)  # killed: SQLite releases its locks, the frozen write is rolled back
        with LeaseStore(path) as after:
            assert [t.title for t in after.inspect()] == [""]
            assert after.dispatch(None)
    finally:
        _end(child)


@pytest.mark.parametrize("policy", ["spin", "hybrid", "jitter", "stock", "room"])
def test_a_worker_frozen_while_waiting_for_the_lock_blocks_nobody(tmp_path, policy):
    path = str(tmp_path / "x.db")
    with LeaseStore(path) as setup:
        setup.dispatch(None)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    ready = _CTX.Event()
    child = _CTX.Process(target=_freeze_while_waiting, args=(path, policy, ready), daemon=True)
    child.start()
    try:
        assert ready.wait(10)
        time.sleep(0.2)  # the child is in its busy wait now
        os.kill(child.pid, signal.SIGSTOP)
        _wait_stopped(child.pid)
        holder.execute("ROLLBACK")
        holder.close()
        t0 = time.monotonic()
        done, answer = _within(lambda: _write_once(path, policy), TIMEOUT_MS / 1000 + SLACK_S)
        if policy == "room":  # the frozen waiter holds the side lock: everyone stalls
            assert not done, "the broken side-lock policy went unnoticed"
            return
        assert done, f"a call stayed blocked {time.monotonic() - t0:.1f}s behind a frozen waiter"
        assert isinstance(answer, str), answer  # it went through: the frozen waiter holds nothing
    finally:
        _end(child)
