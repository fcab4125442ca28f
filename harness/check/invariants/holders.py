"""Who holds a task: never two live holders (``single-winner``), and tokens that are issued
once and never shown (``token-unique``)."""

from __future__ import annotations

from typing import Any

from ferry_harness.check.history import OK, Op
from ferry_harness.check.invariant import Violation, concurrent, hashable, lease_covers, won_claims
from ferry_harness.check.runstate import RunState


class TwoLiveHolders:
    """Two concurrent claims of one task that both won, with neither lease over at the
    other's instant and nothing done with either token in between: two live holders,
    whatever order the search would try (``single-winner``, named before the search)."""

    name = "two-live-holders"
    ids = ("single-winner",)
    needs = ("dispatch", "claim|poll_next")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out: list[Violation] = []
        fresh_claims = won_claims(fresh)
        if not fresh_claims:
            return out
        used = run.token_used  # token -> earliest invoke of an op that presented it
        reported: set[Any] = set()
        closed = run.cfg.lease_closed
        for c2 in fresh_claims:
            tid = c2.value.get("task_id")
            if hashable(tid) in reported:
                continue
            for c1 in run.claims_by_task.get(hashable(tid), []):
                if c1.index == c2.index or not concurrent(c1, c2):
                    continue
                if not (lease_covers(c1, c2.now, closed) and lease_covers(c2, c1.now, closed)):
                    continue
                end = max(c1.complete_ns or 0, c2.complete_ns or 0)
                if any(used.get(hashable(c.value.get("token")), end) < end for c in (c1, c2)):
                    continue
                first, second = sorted((c1, c2), key=lambda o: o.index)
                part = run.task_ops.get(hashable(tid), [])
                out.append(Violation(
                    "single-winner",
                    f"task {tid} has two live holders: {first.agent!r} (op #{first.index}, lease "
                    f"until {first.value.get('lease_expires_at')}) and {second.agent!r} (op "
                    f"#{second.index}) both won concurrent claims at t={second.now}. A race on "
                    "one ready task has exactly one winner; likely fix: take the task in one "
                    "atomic statement (UPDATE … WHERE status='SUBMITTED', success iff one row "
                    "changed) or one BEGIN IMMEDIATE transaction, never select-then-update",
                    ops=[first.index, second.index],
                    detail={"object": f"task:{tid}",
                            "partition_ops": list(part),
                            "linearized_prefix": [i for i in part if i < first.index]
                            + [first.index],
                            "model_state": f"task {tid} CLAIMED by {first.agent!r} until "
                                           f"{first.value.get('lease_expires_at')}"}))
                reported.add(hashable(tid))
                break
        return out


class TokensNeverShown:
    """No issued token appears anywhere in a read's value (``token-unique``: views never
    carry a token, PROTOCOL.md#operations), whatever the field is called."""

    name = "tokens-never-shown"
    ids = ("token-unique",)
    needs = ("dispatch", "claim|poll_next", "get|inspect|salvaged")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        reads = [o for o in fresh if o.op in ("get", "inspect", "salvaged") and o.type == OK]
        if not reads or not run.secrets:
            return []
        out = []
        for r in reads:
            hits = run.secrets_in(r.value)
            found = [(run.secrets[t][0], t) for t in hits if run.secrets[t][1].index < r.index]
            if found:
                _, token = min(found)
                claim = run.secrets[token][1]
                out.append(Violation(
                    "token-unique",
                    f"{r.op} returned the claim token {token[:8]}… issued to "
                    f"{claim.agent!r} for task {claim.value.get('task_id')} (op "
                    f"#{claim.index}): read APIs never carry a token, under any field name",
                    ops=[claim.index, r.index]))
        return out


class TokensIssuedOnce:
    """A claim handing out a token an earlier claim was already given (``token-unique``)."""

    name = "tokens-issued-once"
    ids = ("token-unique",)
    needs = ("dispatch", "claim|poll_next")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in won_claims(fresh):
            token = o.value.get("token")
            prev = run.first_claim.get(hashable(token))
            if prev is not None and prev is not o and prev.index != o.index:
                out.append(Violation(
                    "token-unique",
                    f"token {str(token)[:8]}… issued twice: task {prev.value['task_id']} "
                    f"(op #{prev.index}) and task {o.value['task_id']} (op #{o.index})",
                    ops=[prev.index, o.index]))
        return out
