"""The in-round judgements of a crash campaign (:mod:`ferry_harness.tools.crash`), as invariants.

Pure: each check reads the ops the campaign recorded, and the facts it marked on them as
``extra`` (the campaign drives rounds, kills and rescues; these checks decide):

- ``extra[CAMPAIGN_ROUND]`` (the campaign's round number, from 0; not ``Op.round``, which
  numbers the pool's batches of calls): the round's dispatches, its claim (or poll) step,
  its holders' fulfills, and the read-back of every unfinished task after a kill;
- ``extra[KILLED_HOLDER]`` on a read-back ``get`` whose task is ``CLAIMED`` by a worker
  the campaign killed: :class:`KilledHolder` (``granted_at``: the store instant of the round
  in which the dead holder claimed it; ``exec_ttl_ms``: the lease length it dispatched);
- ``extra[RESCUE]`` on the two rescuers' claims (or polls) racing for such an orphan, and on
  the winner's fulfill: :class:`Rescue`, as a dict.

The model's per-object search judges the same history too (the crash's Checker composes
both: :func:`ferry_harness.check.invariants.crash_audit.crash_invariants`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ferry_harness.check.annotations import CampaignRound, KilledHolder, Rescue, fact, has
from ferry_harness.check.history import FAIL, OK, Op
from ferry_harness.check.invariant import Invariant, Violation, won_claims
from ferry_harness.check.runstate import RunState

# the extra keys these checks read (the facts are ferry_harness.check.annotations')
CAMPAIGN_ROUND = CampaignRound.KEY
KILLED_HOLDER = KilledHolder.KEY
RESCUE = Rescue.KEY


def _round_ops(fresh: list[Op], op: str) -> list[Op]:
    return [o for o in fresh if o.op == op and has(o, CampaignRound)]


class DispatchAccepted:
    """Every dispatch of the campaign is accepted: a refused one is a task lost at birth."""

    name = "crash-dispatch-accepted"
    ids = ("no-lost-task",)
    needs = ("dispatch",)
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("no-lost-task", f"dispatch refused: {o.error} {o.message}", [o.index])
                for o in _round_ops(fresh, "dispatch") if o.type != OK]


class OnePollerPerTask:
    """In a round's claim step, each task goes to one claimer at most."""

    name = "crash-one-poller-per-task"
    ids = ("single-winner",)
    needs = ("dispatch", "claim|poll_next")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        rounds: dict[Any, list[Op]] = {}
        for o in won_claims(fresh):
            r = fact(o, CampaignRound)
            if r is not None:
                rounds.setdefault(r.number, []).append(o)
        out = []
        for won in rounds.values():
            for tid, n in Counter(o.value["task_id"] for o in won).items():
                if n > 1:
                    out.append(Violation(
                        "single-winner", f"task {tid} was claimed by {n} pollers in one round",
                        [o.index for o in won if o.value["task_id"] == tid]))
        return out


class HolderFulfillAccepted:
    """A live holder's fulfill of the task it just claimed is accepted (a killed one's is
    indeterminate, never refused)."""

    name = "crash-holder-fulfill-accepted"
    ids = ("holder-guard",)
    needs = ("dispatch", "claim|poll_next", "fulfill")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("holder-guard", f"the holder's fulfill of task {o.args['task_id']} "
                          f"was refused: {o.error} {o.message}", [o.index])
                for o in _round_ops(fresh, "fulfill") if o.type == FAIL]


class ReadsAnswer:
    """Every ``get`` of a task the campaign dispatched answers with the task's view."""

    name = "crash-reads-answer"
    ids = ("no-lost-task",)
    needs = ("dispatch", "get")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("no-lost-task", f"get({o.args['task_id']}) failed: "
                          f"{o.error or o.note} {o.message or ''}", [o.index])
                for o in fresh if o.op == "get"
                and not (o.type == OK and isinstance(o.value, dict))]


class StatesAfterAKill:
    """Read back after a kill, an unfinished task is ``SUBMITTED``, ``COMPLETED``, or
    ``CLAIMED`` by the killed worker (its orphan); never held by a live worker that holds
    no claim on it, never in another state."""

    name = "crash-states-after-a-kill"
    ids = ("no-lost-task",)
    needs = ("dispatch", "get")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in _round_ops(fresh, "get"):
            if o.type != OK or not isinstance(o.value, dict):
                continue  # ReadsAnswer reports it
            v, tid = o.value, o.args["task_id"]
            status = v.get("status")
            if status == "CLAIMED" and not has(o, KilledHolder):
                out.append(Violation("no-lost-task", f"task {tid} is CLAIMED by live worker "
                                     f"{v.get('claimed_by')!r}, which holds no claim on it"))
            elif status not in ("CLAIMED", "COMPLETED", "SUBMITTED"):
                out.append(Violation("no-lost-task", f"task {tid} ended {status} "
                                     f"({v.get('error_reason')}) after a worker was killed"))
        return out


class OrphanLeaseExact:
    """A killed holder's lease ends at exactly ``granted_at + exec_ttl_ms`` in the store's
    own view of the task."""

    name = "crash-orphan-lease-exact"
    ids = ("lease-half-open",)
    needs = ("dispatch", "claim|poll_next", "get", "lease")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in fresh:
            k = fact(o, KilledHolder) if o.op == "get" else None
            if k is None:
                continue
            if "lease_expires_at" not in o.value:  # a field left out is not compared
                continue
            expires = k.granted_at + k.exec_ttl_ms
            got = o.value.get("lease_expires_at")
            if got != expires:
                out.append(Violation(
                    "lease-half-open", f"task {o.args['task_id']} was claimed at "
                    f"{k.granted_at} with exec_ttl_ms={k.exec_ttl_ms}, but its lease_expires_at "
                    f"is {got}, not {expires}"))
        return out


def _elsewhere_at_expiry(run: RunState, late: Rescue) -> bool:
    """True when every rescuer of ``late``'s orphan at its ``expires`` race came back
    holding another task: a poll hands out the oldest ready task, and the orphan, queued
    again at its expiry, is the youngest, so that race says nothing about its lease. (The
    races of one orphan may reach the checker in different batches: the whole history.)"""
    history = run.ref()
    group = [o for o in (history.ops if history is not None else ())
             if o.op in ("claim", "poll_next")
             and (r := fact(o, Rescue)) is not None and r.task == late.task
             and r.expires == late.expires and r.at == r.expires]
    return bool(group) and all(
        o.type == OK and isinstance(o.value, dict) and o.value.get("task_id") != late.task
        for o in group)


class RescueAtExpiry:
    """Rescuers racing for an orphan: nobody wins at ``expires - 1``; at ``expires`` exactly
    one wins (two winners of one race break single-winner; a first win later than
    ``expires``, or none even at the campaign's last race, is a lease that did not end,
    unless every poll at ``expires`` was handed an older waiting task)."""

    name = "crash-rescue-at-expiry"
    ids = ("lease-half-open", "single-winner")
    needs = ("dispatch", "claim|poll_next", "fulfill", "lease")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        races: dict[Rescue, list[Op]] = {}
        for o in fresh:
            r = fact(o, Rescue) if o.op in ("claim", "poll_next") else None
            if r is not None and r.expires is not None and r.at is not None:
                races.setdefault(r, []).append(o)
        out = []
        for r, group in races.items():
            assert r.at is not None and r.expires is not None
            # (a rescuer's poll may hand it another task, one still waiting: that is no
            # reclaim of this one)
            won = [o for o in won_claims(group) if o.value["task_id"] == r.task]
            if r.at < r.expires:
                if won:
                    out.append(Violation(
                        "lease-half-open", f"task {r.task} was reclaimed at t={r.at}, before "
                        f"its dead holder's lease ends at {r.expires}", [o.index for o in won]))
                continue
            if len(won) > 1:
                out.append(Violation("single-winner", f"{len(won)} rescuers reclaimed task "
                                     f"{r.task} at t={r.at}", [o.index for o in won]))
            if won and r.at != r.expires and not _elsewhere_at_expiry(run, r):
                out.append(Violation(
                    "lease-half-open", f"task {r.task}: its dead holder's lease ended at "
                    f"{r.expires}, but it could only be reclaimed at {r.at}", [won[0].index]))
            elif not won and r.last:
                out.append(Violation(
                    "lease-half-open", f"task {r.task}: its holder was killed and its lease "
                    f"ended at {r.expires}, but no rescuer could claim it, even at {r.at}: lost"))
        return out


class RescuerFulfillAccepted:
    """The rescuer that reclaimed an orphan fulfills it."""

    name = "crash-rescuer-fulfill-accepted"
    ids = ("holder-guard",)
    needs = ("dispatch", "claim|poll_next", "fulfill")
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation("holder-guard", f"the rescuer's fulfill of task {o.args['task_id']} "
                          f"was refused: {o.error or o.note} {o.message or ''}", [o.index])
                for o in fresh if o.op == "fulfill" and has(o, Rescue) and o.type != OK]


def round_invariants() -> list[Invariant]:
    """The campaign's in-round checks, in the order a round meets them."""
    return [DispatchAccepted(), OnePollerPerTask(), HolderFulfillAccepted(), ReadsAnswer(),
            StatesAfterAKill(), OrphanLeaseExact(), RescueAtExpiry(), RescuerFulfillAccepted()]
