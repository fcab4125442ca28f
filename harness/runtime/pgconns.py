"""What a worker knows of its own psycopg 3 connections, without asking the server.

After every step on a Postgres target ferry must know that no connection of the target
is left ``idle in transaction`` (PROTOCOL.md#postgres-targets). Asking the server
(``pg_stat_activity``) is a round trip per step: measured 0.3–0.7 ms, about a tenth of a
Postgres example's time. A psycopg connection knows its own state: libpq tracks the
transaction status from every reply, so reading it sends nothing. A worker of a Postgres
target therefore registers every psycopg connection made in its process (the
constructors of ``psycopg.Connection`` and ``psycopg.AsyncConnection`` are wrapped, so a
connection counts however it was made: ``psycopg.connect``, a pool, a subclass) and
reports with each call's answer whether one of them is inside a transaction, and the
server pids of its open connections whenever that set changed.

The controller still asks the server whenever a worker reports an open transaction, after
a fault, at each example's end, and after every step while the server lists a connection
of the run's database that no worker reported (a driver other than psycopg 3: asyncpg,
psycopg2). Only a target all of whose connections are psycopg 3's is judged from these
reports alone between those looks.
"""

from __future__ import annotations

import weakref
from typing import Any

_conns: weakref.WeakSet[Any] = weakref.WeakSet()
_idle: list[Any] = []  # psycopg.pq.TransactionStatus.IDLE, once installed
_last_pids: list[tuple[int, ...] | None] = [None]  # what the last report said


def install() -> bool:
    """Register every psycopg 3 connection this process makes from now on. False when
    psycopg is not installed (nothing to register). Call before the target connects."""
    if _idle:
        return True
    try:
        import psycopg
    except ImportError:
        return False
    _idle.append(psycopg.pq.TransactionStatus.IDLE)
    for cls in (psycopg.Connection, psycopg.AsyncConnection):
        _wrap_init(cls)
    return True


def _wrap_init(cls: type) -> None:
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _conns.add(self)

    cls.__init__ = __init__  # type: ignore[misc]


def report(*, force: bool = False) -> tuple[bool, tuple[int, ...] | None]:
    """(is one of this process' open connections inside a transaction — or running a
    statement —, the server pids of its open connections if they changed since the last
    report or ``force``, else None). Reads only client-side state."""
    if not _idle:
        return False, None
    in_tx = False
    pids: list[int] = []
    for c in list(_conns):
        try:
            if c.closed:
                continue
            info = c.info
            pids.append(int(info.backend_pid))
            in_tx = in_tx or info.transaction_status != _idle[0]
        except Exception:  # a connection torn down under us: the server look decides
            in_tx = True
    now = tuple(sorted(pids))
    if now == _last_pids[0] and not force:
        return in_tx, None
    _last_pids[0] = now
    return in_tx, now
