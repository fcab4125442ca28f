"""The closing audit of a crash campaign (:mod:`ferry_harness.tools.crash`), as invariants.

Pure: each check reads the crash's history. The campaign marks the ops of its final
read-back (one ``inspect()``, or a ``get`` of every task) with a
:class:`ferry_harness.check.annotations.FinalRead` fact,
records ``PRAGMA integrity_check`` as an ``integrity_check`` op (its text as the value),
and its closing ``checkpoint(TRUNCATE)`` with the measured ``-wal`` size as a
:class:`~ferry_harness.check.annotations.WalSample` (on a Postgres target: the final
read-back with the connections then left idle in transaction, ``open_tx_after_step``). A violation that the crash summary counts carries
``detail["tally"]``: the :class:`ferry_harness.tools.crash.Tally` field it adds ``detail.get("count", 1)`` to.

The campaign composes these with the fuzz checks (the model's per-object search
included), so a crash history is judged by the same checker as a fuzz one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ferry_harness.check.annotations import FinalRead, WalSample, fact, has
from ferry_harness.check.history import INFO, OK, Op
from ferry_harness.check.invariant import Invariant, Violation, won_claims
from ferry_harness.check.invariants.crash_rounds import round_invariants
from ferry_harness.check.model import canonical
from ferry_harness.check.runstate import RunState

FINAL_READ = FinalRead.KEY  # the extra key of the final read-back (a FinalRead fact)


def _lost(message: str, ops: list[int] | None = None, tally: str | None = None) -> Violation:
    return Violation("no-lost-task", message, ops or [],
                     detail={"tally": tally} if tally else {})


class EveryTaskCompletedOnce:
    """The final read-back lists every dispatched task once, ``COMPLETED``, with the result
    of its one accepted ``fulfill`` (or, when the only fulfill was cut short by a kill, the
    result that one delivered)."""

    name = "every-task-completed-once"
    ids = ("no-lost-task",)
    needs = ("dispatch", "claim|poll_next", "fulfill", "get")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        finals = [o for o in fresh if has(o, FinalRead)]
        history = run.history
        if not finals or history is None:
            return []
        out: list[Violation] = []
        inspects = [o for o in finals if o.op == "inspect"]
        views: dict[Any, Any]
        if inspects:
            op = inspects[-1]
            views_list = op.value if op.type == OK and isinstance(op.value, list) else []
            if op.type != OK:
                out.append(_lost(f"inspect() failed: {op.error or op.note}", [op.index]))
            counts = Counter(v.get("task_id") for v in views_list)
            for tid, n in counts.items():
                if n > 1:
                    out.append(_lost(f"inspect() lists task {tid} {n} times", [op.index]))
            views = {v.get("task_id"): v for v in views_list}
        else:  # a get per task (crash_rounds.ReadsAnswer reports the gets that failed)
            views = {o.args["task_id"]: o.value for o in finals
                     if o.op == "get" and o.type == OK and isinstance(o.value, dict)}
        tasks: list[Any] = []
        accepted: dict[Any, list[Op]] = {}
        attempted: dict[Any, list[Op]] = {}
        for o in history:
            if o.op == "dispatch" and o.type == OK:
                tasks.append(o.value)
            elif o.op == "fulfill":
                (accepted if o.type == OK else attempted).setdefault(o.args["task_id"], []).append(o)
        for tid in tasks:
            v = views.get(tid)
            if v is None:
                out.append(_lost(f"task {tid} is missing from the store", tally="tasks_lost"))
                continue
            if v.get("status") != "COMPLETED":
                out.append(_lost(f"task {tid} ended {v.get('status')}, not COMPLETED "
                                 f"(claimed_by={v.get('claimed_by')!r}, lease_expires_at="
                                 f"{v.get('lease_expires_at')})", tally="tasks_lost"))
                continue
            oks = accepted.get(tid, [])
            if len(oks) > 1:
                out.append(_lost(f"task {tid} was completed {len(oks)} times",
                                 [o.index for o in oks], tally="duplicate_completions"))
            if not run.cfg.results:  # a store without `results` keeps none to compare
                continue
            result = canonical(v.get("result"))
            if oks:
                if result != canonical(oks[-1].args.get("result")):
                    out.append(_lost(f"task {tid}: accepted result "
                                     f"{canonical(oks[-1].args.get('result'))}, stored {result}",
                                     [o.index for o in oks], tally="changed_results"))
            elif result not in {canonical(o.args.get("result")) for o in attempted.get(tid, [])
                                if o.type == INFO}:
                out.append(_lost(f"task {tid} is COMPLETED with {result}, which no fulfill "
                                 "(accepted or killed) delivered", tally="changed_results"))
        return out


class NoTokenTwice:
    """At the final read-back: no claim token was handed out twice in the whole campaign."""

    name = "no-token-twice"
    ids = ("token-unique",)
    needs = ("dispatch", "claim|poll_next")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        history = run.history
        if history is None or not any(has(o, FinalRead) for o in fresh):
            return []
        tokens = Counter(o.value.get("token") for o in won_claims(history))
        twice = sum(1 for n in tokens.values() if n > 1)
        if not twice:
            return []
        return [Violation("token-unique", f"{twice} claim token(s) issued twice",
                          detail={"tally": "duplicate_tokens", "count": twice})]


class IntegrityOk:
    """``PRAGMA integrity_check`` (an ``integrity_check`` op) says ``ok``."""

    name = "integrity-ok"
    ids = ("integrity",)
    needs = ("wal-file",)
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("integrity", f"PRAGMA integrity_check: {str(o.value)[:400]}",
                          [o.index])
                for o in fresh if o.op == "integrity_check" and o.value != "ok"]


class WalEmptied:
    """The closing ``checkpoint(TRUNCATE)``, with no reader left, succeeds and leaves the
    ``-wal`` at 0 bytes (``WalSample.wal_after``, measured by the campaign)."""

    name = "wal-emptied"
    ids = ("wal-bounded",)
    needs = ("checkpoint", "wal-file")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        left = [(o, w.wal_after) for o in fresh if o.op == "checkpoint"
                and (w := fact(o, WalSample)) is not None and w.wal_after is not None]
        return [Violation("wal-bounded", f"checkpoint(TRUNCATE) -> {o.value or o.error}, "
                          f"-wal left at {n} bytes", [o.index])
                for o, n in left if o.type != OK or n]


class NoTransactionLeftOpen:
    """Postgres (PROTOCOL.md#postgres-targets): when the final read-back is done no
    connection of the target is left idle in transaction (``WalSample.open_tx_after_step``
    on the read-back's last op, measured by the campaign on the server)."""

    name = "no-transaction-left-open"
    ids = ("wal-bounded",)
    needs = ("pg-probes",)
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("wal-bounded", "when the campaign's final read-back was done a "
                          f"connection of the target was left idle in transaction "
                          f"({x.open_tx_after_step}): on Postgres no transaction may outlive "
                          "the call that opened it", [o.index])
                for o in fresh if has(o, FinalRead)
                and (x := fact(o, WalSample)) is not None and x.open_tx_after_step]


# fuzz checks a crash's own say already (each would file the same finding twice): the
# integrity text (integrity-ok; a crash records no probe or zombie), the emptied -wal
# (wal-emptied), tokens issued once (no-token-twice), the final inspect (every task once)
COVERED_BY_CRASH = frozenset({"fault-probes", "wal-rules", "tokens-issued-once",
                              "inspect-shows-all"})


def crash_invariants(shared: Sequence[Invariant] = ()) -> list[Invariant]:
    """Every check of a crash campaign, in the order its findings are reported: the
    in-round judgements (:mod:`ferry_harness.check.invariants.crash_rounds`), the audit, then
    ``shared`` (the fuzz checks: the model's per-object search included), less those the
    crash's own cover (``COVERED_BY_CRASH``)."""
    return [*round_invariants(), EveryTaskCompletedOnce(), NoTokenTwice(), IntegrityOk(),
            WalEmptied(), NoTransactionLeftOpen(), *(i for i in shared if i.name not in COVERED_BY_CRASH)]
