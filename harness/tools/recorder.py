"""Record a history from your own integration test, then check it with ferry.

Wrap each store the test uses; every protocol call (``dispatch``, ``poll_next``, ``claim``,
``fulfill`` … see :data:`ferry_harness.check.ops.PROTOCOL`) is recorded with its invoke and return
instants, the store clock and its outcome, exactly as ``ferry-harness fuzz`` records them.
Calls from several threads on their own wrapped stores interleave correctly::

    from ferry_harness.tools.recorder import Recorder

    rec = Recorder()
    store = rec.wrap(LeaseStore(path, clock=clock), agent="worker-1", clock=clock)
    ...                                  # the test runs as usual
    rec.write("history.jsonl")
    assert not rec.check()                # or: ferry-harness check history.jsonl

A refusal (a ``ferry_core.errors`` class) is re-raised to the caller after recording, so
the test's own control flow is unchanged.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ferry_core.errors import FerryError
from ferry_harness.check.checker import judge_history
from ferry_harness.check.history import FAIL, INFO, OK, History, Op
from ferry_harness.check.ops import PROTOCOL, CallArgs, plain


class Recorder:
    """A thread-safe history shared by every store it wraps."""

    def __init__(self, history: History | None = None) -> None:
        self.history = history or History()
        self._lock = threading.Lock()
        self._processes = itertools.count(1)

    def wrap(self, store: Any, *, agent: str = "client",
             clock: Callable[[], int] | None = None) -> RecordedStore:
        """``store`` as seen by one process or thread; ``agent`` is passed where the
        protocol wants an agent id (``poll_next``, holder ops), ``clock`` (the store's
        injected clock) stamps ``now`` for the model's lease arithmetic."""
        return RecordedStore(self, store, agent, clock, next(self._processes))

    def _begin(self, op: Op) -> Op:
        with self._lock:
            op.index = self.history.next_index()
            self.history.append(op)
        return op

    def check(self, capabilities: Any = None) -> list[Any]:
        """The violations in what was recorded (``capabilities``: the target's, as
        ``ferry_harness.runtime.calls.capabilities(store)`` gives them; default a full protocol store)."""
        return judge_history(self.history, capabilities)[0]

    def write(self, path: str | Path) -> Path:
        """Write the history as JSON lines (the input of ``ferry-harness check``)."""
        Path(path).write_text(self.history.to_jsonl(), encoding="utf-8")
        return Path(path)


class RecordedStore:
    """Forwards protocol calls to the wrapped store and records each one."""

    def __init__(self, recorder: Recorder, store: Any, agent: str,
                 clock: Callable[[], int] | None, process: int) -> None:
        self._recorder = recorder
        self._store = store
        self._agent = agent
        self._clock = clock or getattr(store, "clock", None)
        self._process = process

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in PROTOCOL or not callable(attr):
            return attr

        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, attr, args, kwargs)
        return recorded

    def _now(self) -> int:
        clock = self._clock
        if clock is None:
            return int(time.time() * 1000)
        return int(clock() if callable(clock) else clock.now())

    def _call(self, name: str, method: Any, args: tuple[Any, ...],
              kwargs: CallArgs) -> Any:
        names = PROTOCOL[name]
        named: CallArgs = dict(zip(names, args, strict=False))
        named.update(kwargs)
        agent = named.pop("agent", None) or self._agent
        if name in ("acquire_lock", "release_lock"):
            agent = named.get("owner", agent)
        op = self._recorder._begin(Op(index=-1, process=self._process, agent=agent, op=name,
                                      args=plain(named), invoke_ns=time.monotonic_ns(),
                                      now=self._now()))
        try:
            value = method(*args, **kwargs)
        except FerryError as exc:
            op.complete_ns, op.type = time.monotonic_ns(), FAIL
            op.error, op.message = type(exc).__name__, str(exc)
            raise
        except BaseException as exc:
            op.complete_ns, op.type = time.monotonic_ns(), INFO
            op.error, op.message = type(exc).__name__, str(exc)
            raise
        op.complete_ns, op.type, op.value = time.monotonic_ns(), OK, plain(value)
        return value
