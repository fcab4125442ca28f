"""The history: every operation as one record of its invoke and its outcome (Jepsen-style).

``type`` is ``ok`` (returned), ``fail`` (a typed refusal, PROTOCOL.md#error-classes:
nothing changed) or ``info`` (indeterminate: the worker crashed or timed out, so it may or
may not have taken effect). Records are plain data, written as JSON lines, and read back
by every checker.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ferry_harness.check.ops import CallArgs, JSONObject

OK, FAIL, INFO = "ok", "fail", "info"

# Operations that act on exactly one task given in args["task_id"].
TASK_OPS = frozenset({"claim", "fulfill", "fail", "release", "extend", "salvage", "get", "salvaged"})
# The holder operations (token-guarded), in the order a scenario may try them all on one
# lease: the ones that keep the task claimed first, the ones that end the claim last.
HOLDER_OPS: tuple[str, ...] = ("extend", "salvage", "release", "fail", "fulfill")
LOCK_OPS = frozenset({"acquire_lock", "release_lock", "lock_holder"})


@dataclass
class Op:
    """One operation of one worker: what was asked, when, and what came back."""

    index: int
    process: int
    agent: str
    op: str
    args: CallArgs
    invoke_ns: int
    now: int
    complete_ns: int | None = None
    type: str = INFO
    value: Any = None
    error: str | None = None
    message: str | None = None
    round: int | None = None
    example: int | None = None
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ret_ns(self) -> float:
        """Completion time for ordering; an ``info`` op may take effect until the end."""
        if self.type == INFO or self.complete_ns is None:
            return math.inf
        return self.complete_ns

    @property
    def task_id(self) -> str | None:
        """The task this op is about: its argument, or the task a poll/dispatch returned."""
        if self.op in TASK_OPS:
            return self.args.get("task_id")
        if self.op == "dispatch" and self.type == OK:
            return self.value
        if self.op == "poll_next" and self.type == OK and self.value:
            return self.value["task_id"]
        return None

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        if not d["extra"]:
            del d["extra"]
        d["args"] = {k: _encode_arg(v) for k, v in self.args.items()}
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: JSONObject) -> Op:
        if isinstance(d.get("args"), dict):
            d = {**d, "args": {k: _decode_arg(v) for k, v in d["args"].items()}}
        return cls(**d)

    def describe(self) -> str:
        """One line a person can read: ``w2 alice fulfill(t1, tok=…) -> fail InvalidToken``."""
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.args.items())
        if self.type == OK:
            out = f"ok {_short(self.value)}"
        elif self.type == FAIL:
            out = f"fail {self.error}"
        else:
            out = f"info {self.error or self.note or 'indeterminate'}"
        return f"#{self.index} w{self.process} {self.agent} {self.op}({args}) @t={self.now} -> {out}"


#: how an argument that is not JSON (a hostile step's set, say) is written in history.jsonl
NOT_JSON_KEY = "ferry:not-json"


@dataclass(frozen=True)
class NotJson:
    """An argument that was not JSON, read back from history.jsonl: still not JSON, so a
    history checked offline judges it as the live run did (a late result that was no
    JSON need not be kept, PROTOCOL.md#late-results)."""

    #: ``repr()`` of the value the harness sent
    text: str

    def __str__(self) -> str:
        return self.text


def _encode_arg(v: Any) -> Any:
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return {NOT_JSON_KEY: str(v)}
    return v


def _decode_arg(v: Any) -> Any:
    if isinstance(v, dict) and len(v) == 1 and NOT_JSON_KEY in v:
        return NotJson(str(v[NOT_JSON_KEY]))
    return v


def _short(v: Any) -> str:
    if isinstance(v, str) and len(v) > 12:
        return v[:8] + "…"
    if isinstance(v, dict) and "token" in v:
        return "{" + ", ".join(f"{k}={_short(x)}" for k, x in v.items() if k in ("task_id", "token", "attempt", "lease_expires_at")) + "}"
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "…"


class History:
    """An append-only list of ops with JSON-lines I/O."""

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self.ops: list[Op] = list(ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def next_index(self) -> int:
        return len(self.ops)

    def to_jsonl(self) -> str:
        """The history as JSON lines, one op per line (what ``history.jsonl`` holds).

        >>> History.from_jsonl(History().to_jsonl()).ops
        []
        """
        return "".join(json.dumps(op.to_dict(), default=str) + "\n" for op in self.ops)

    @classmethod
    def from_jsonl(cls, text: str) -> History:
        """Read :meth:`to_jsonl`'s text back (blank lines are skipped)."""
        return cls(Op.from_dict(json.loads(line)) for line in text.splitlines() if line.strip())
