"""Third-party queues presented through the store protocol (PROTOCOL.md#operations).

SQLite queues (persist_queue, litequeue, localqueue, huey, simplebroker) and, as Postgres
targets (``ferry_backend = "postgres"``, PROTOCOL.md#postgres-targets: the factory gets a
libpq URI naming the example's schema), procrastinate and pgqueuer, whose SQL reads the
harness clock through :mod:`._pgclock`.

One module per library; each exposes ``make_store(path, *, clock)`` and is a fuzz target::

    ferry-harness fuzz --target ferry_harness.adapters.persist_queue:make_store --budget 60

An adapter maps only what the library really has. Its store declares

- ``ferry_capabilities``: the protocol operations it supports, plus the features of
  :data:`ferry_harness.check.ops.FEATURES` the library implements (lease on the harness clock, queue
  TTL, targeted tasks, stored results, limits, typed refusals) and ``dag`` if it has
  dependencies; the model holds the library to those and nothing else;
- ``ferry_skips``: ``{invariant: why}`` for the checks that cannot be made on it.

See PROTOCOL.md#capability-declarations for both.

The library's own ack handle is passed through as the claim token, unchanged: a message
id that never changes *is* a replayable token, and ferry reports it as such. Refusals
are raised as :mod:`ferry_core.errors` classes, mapped from the library's own signals.

Importing this package imports no library; each module imports its own.
"""

from __future__ import annotations

from ._base import ADAPTERS

__all__ = ["ADAPTERS"]
