"""What the fault runner's probes found (the ``Probe``, ``Zombie`` and ``Integrity`` facts
of :mod:`ferry_harness.check.annotations` that :mod:`ferry_harness.run.faults` leaves on ops)."""

from __future__ import annotations

from ferry_harness.check.annotations import Integrity, Probe, Zombie, fact
from ferry_harness.check.history import OK, Op
from ferry_harness.check.invariant import Violation
from ferry_harness.check.runstate import RunState


class FaultProbes:
    """``probe``: rescuers racing for a task whose holder was killed or frozen while its
    lease was still on (a ``get`` said so after the fault): none may win at
    ``expires - 1``; at ``expires`` exactly one must (attempts left), if all rescuers got a
    clean answer. ``zombie``: the frozen holder's fulfill, accepted after a rescuer
    reclaimed the task. ``integrity``: ``PRAGMA integrity_check`` not "ok"."""

    name = "fault-probes"
    ids = ("integrity", "lease-half-open", "single-winner")
    needs = ()  # the nemesis annotates only what it could probe on this target
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        closed = run.cfg.lease_closed
        out: list[Violation] = []
        probes: dict[tuple[int, str], list[tuple[Op, Probe]]] = {}
        for o in fresh:
            integrity = fact(o, Integrity)
            if integrity is not None and integrity.text != "ok":
                out.append(Violation(
                    "integrity", f"PRAGMA integrity_check after faults: {str(integrity.text)[:400]}",
                    ops=[o.index]))
            p = fact(o, Probe)
            if p is not None:
                probes.setdefault((p.holder_op, p.at), []).append((o, p))
            z = fact(o, Zombie)
            if z and o.op == "fulfill" and o.type == OK and z.rescued_by is not None:
                out.append(Violation(
                    "lease-half-open",
                    f"the frozen holder's fulfill of task {z.task} was accepted after its "
                    f"lease ended at {z.expires} and a rescuer reclaimed the task (op "
                    f"#{z.rescued_by}): a zombie's result must be refused",
                    ops=[o.index, z.rescued_by]))
        for (holder, at), marked in probes.items():
            group = [o for o, _ in marked]
            p = marked[0][1]
            if closed and at == "expires":  # the declared closed lease still holds: no winner
                at = "expires-1"
            won = [o for o in group if o.type == OK and o.value]
            who = "killed" if p.cause == "killed" else "frozen (SIGSTOP)"
            ids = [o.index for o in group]
            if at == "expires-1" and won:
                out.append(Violation(
                    "lease-half-open",
                    f"task {p.task} was reclaimed at t={won[0].now}, while the lease of its "
                    f"{who} holder (op #{holder}) still held (it ends at {p.expires}"
                    f"{', inclusive: declared lease-closed' if closed else ''})",
                    ops=ids))
            elif at != "expires-1" and len(won) > 1:
                out.append(Violation(
                    "single-winner",
                    f"{len(won)} rescuers reclaimed task {p.task} at t={won[0].now}; exactly "
                    "one may", ops=ids))
            elif (at != "expires-1" and not won and p.attempts_left
                  and all(o.type == OK for o in group)
                  and not (p.server_side and self._accepted(run, fresh, holder))):
                out.append(Violation(
                    "lease-half-open",
                    f"the holder of task {p.task} was {who} (op #{holder}) and left it "
                    f"CLAIMED with a lease ending at {p.expires}; at t={group[0].now} "
                    f"({at}) none of {len(group)} rescuers could claim it: a dead holder's "
                    "lease must end at lease_expires_at, not later",
                    ops=[holder, *ids]))
        return out

    @staticmethod
    def _accepted(run: RunState, fresh: list[Op], index: int) -> bool:
        """Was op ``index`` (the frozen holder's call) accepted? On a Postgres target its
        statement may have finished the task in the server while the client was stopped,
        so rescuers finding nothing at ``expires`` is no late lease (PROTOCOL.md#postgres-targets)."""
        op = next((o for o in fresh if o.index == index), None)
        if op is None:
            history = run.ref()
            op = next((o for o in history.ops if o.index == index), None) if history else None
        return op is not None and op.type == OK
