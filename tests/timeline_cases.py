"""Hand-built counter-examples for the timeline tests: histories and the report dicts that
``ferry_harness.run.campaign`` would write for them (deterministic, no processes).

Each case carries a store string holding ``<script>`` somewhere (an agent name, a payload,
an error message) so the tests can check that it stays inert.
"""

from __future__ import annotations

import random
from typing import Any

from ferry_harness.check.history import FAIL, INFO, OK, Op

T = 1_000_000  # the harness clock's start (ms)
EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
FERRY = {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567"}


def _op(i: int, p: int, agent: str, op: str, args: dict[str, Any], t0_us: float, now: int,
        t1_us: float | None, typ: str = OK, value: Any = None, **kw: Any) -> Op:
    base = 5_000_000_000
    return Op(i, p, agent, op, args, base + int(t0_us * 1000), now,
              None if t1_us is None else base + int(t1_us * 1000), typ, value, **kw)


def _claim_value(task: str, agent: str, token: str, expires: int | None = T + 30_000,
                 claimed_at: int = T) -> dict:
    return {"task_id": task, "agent_id": agent, "token": token, "claimed_at": claimed_at,
            "lease_expires_at": expires, "attempt": 1}


def _dispatch_args(ettl: int = 30_000, attempts: int = 2, **more: Any) -> dict[str, Any]:
    return {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": ettl,
            "max_attempts": attempts, **more}


def _report(violations: list[dict[str, Any]], ops: list[Op], *, mode: str = "stress",
            faults: tuple[str, ...] = (), target: str = "tests.broken_stores:check_then_act",
            ) -> dict[str, Any]:
    involved = {i for v in violations for i in v["ops"] + v["detail"].get("partition_ops", [])}
    for v in violations:
        v.setdefault("history", [o.to_dict() for o in ops if o.index in involved])
        v.setdefault("reproduced", "9/10")
    return {
        "verdict": "fail", "target": target, "mode": mode, "seed": 3, "workers": 3,
        "faults": list(faults), "capabilities": ["claim", "dispatch", "fulfill", "get", "lease"],
        "invariants": {"single-winner": "checked"}, "violations": violations,
        "replay": "ferry-harness replay reports/latest", "ferry": dict(FERRY),
    }


def single_winner() -> tuple[list[Op], dict[str, Any]]:
    """Two claims of task 1 both return ok (check-then-act); the payload holds <script>."""
    ops = [
        _op(0, 0, "client", "dispatch", _dispatch_args(payload={"note": EVIL}),
            0, T, 300, OK, "1", round=1, example=4),
        _op(1, 0, "alice", "claim", {"task_id": "1"}, 1000, T, 3200, OK,
            _claim_value("1", "alice", "a02f9c1e-77aa"), round=2, example=4),
        _op(2, 1, "bob", "claim", {"task_id": "1"}, 1100, T, 3400, OK,
            _claim_value("1", "bob", "b7e1d004-1234"), round=2, example=4),
        _op(3, 2, "carol", "claim", {"task_id": "1"}, 1050, T, 1900, OK, None, note=EVIL,
            round=2, example=4),  # lost the race: no claim
        _op(4, 0, "alice", "get", {"task_id": "1"}, 5000, T, 5200, OK,
            {"task_id": "1", "status": "CLAIMED", "agent_id": "bob"}, round=3, example=4),
    ]
    v = {"invariant": "single-winner",
         "message": "'bob' claimed task 1 at t=1000000 while 'alice' holds it (lease until "
                    "t=1030000)",
         "ops": [2], "detail": {"object": "task:1", "linearized_prefix": [0, 1, 3],
                                "partition_ops": [0, 1, 2, 3, 4]},
         "steps": [{"kind": "dispatch", "target_agent": None, "queue_ttl_ms": 10000, "exec_ttl_ms": 30000,
                    "max_attempts": 2},
                   {"kind": "race_claim", "task": 0, "agents": ["alice", "bob", "carol"]},
                   {"kind": "read", "task": 0}]}
    return ops, _report([v], ops)


def lease_boundary() -> tuple[list[Op], dict[str, Any]]:
    """The clock jumps to the lease's end and the holder's fulfill still returns ok."""
    exp = T + 10
    ops = [
        _op(0, 0, "client", "dispatch", _dispatch_args(10, 1), 0, T, 250, OK, "7",
            round=1, example=2),
        _op(1, 1, "alice", "claim", {"task_id": "7"}, 600, T, 900, OK,
            _claim_value("7", "alice", "c0ffee00-aaaa", exp), round=2, example=2),
        _op(2, 2, "bob", "dispatch", _dispatch_args(), 1500, T + 5, 1700, OK, "8",
            round=3, example=2),
        _op(3, 1, "alice", "fulfill", {"task_id": "7", "token": "c0ffee00-aaaa",
                                       "result": EVIL}, 4000, exp, 4300, OK, None,
            round=4, example=2),
    ]
    v = {"invariant": "lease-half-open",
         "message": f"alice's fulfill of task 7 at t={exp} returned ok, but the lease held on "
                    f"[{T}, {exp}): at t={exp} it has lost",
         "ops": [3], "detail": {"object": "task:7", "linearized_prefix": [0, 1],
                                "partition_ops": [0, 1, 3]},
         "steps": [{"kind": "dispatch", "target_agent": None, "queue_ttl_ms": 10000, "exec_ttl_ms": 10,
                    "max_attempts": 1},
                   {"kind": "race_claim", "task": 0, "agents": ["alice"]},
                   {"kind": "clock", "claim": 0, "offset": 0},
                   {"kind": "holder", "op": "fulfill", "claim": 0, "who": "holder"}]}
    return ops, _report([v], ops, target="tests.broken_stores:closed_lease")


def schedule_mode() -> tuple[list[Op], dict[str, Any]]:
    """Schedule mode: the statements of a two-claim round, with the switch that lets both in."""
    sel = "SELECT 1 FROM tasks WHERE task_id=? AND status='SUBMITTED'"
    upd = "UPDATE tasks SET status='CLAIMED', agent_id=?, token=? WHERE task_id=?"
    ops = [
        _op(0, 0, "client", "dispatch", _dispatch_args(attempts=1), 0, T, 200, OK, "3",
            round=1, example=1),
        _op(1, 0, "alice", "claim", {"task_id": "3"}, 1000, T, 2600, OK,
            _claim_value("3", "alice", "aa11"), round=2, example=1,
            extra={"sql": [[0, sel, False], [2, upd, True]]}),
        _op(2, 1, "bob", "claim", {"task_id": "3"}, 1010, T, 2700, OK,
            _claim_value("3", "bob", "bb22"), round=2, example=1,
            extra={"sql": [[1, sel, True], [3, upd + " -- " + EVIL, True]]}),
    ]
    trace = [{"worker": 0, "sql": sel, "op": 1, "switch": False},
             {"worker": 1, "sql": sel, "op": 2, "switch": True},
             {"worker": 0, "sql": upd, "op": 1, "switch": True},
             {"worker": 1, "sql": upd + " -- " + EVIL, "op": 2, "switch": True}]
    v = {"invariant": "single-winner",
         "message": "'bob' claimed task 3 at t=1000000 while 'alice' holds it",
         "ops": [2], "detail": {"object": "task:3", "linearized_prefix": [0, 1],
                                "partition_ops": [0, 1, 2]},
         "steps": [{"kind": "dispatch", "target_agent": None, "queue_ttl_ms": 10000, "exec_ttl_ms": 30000,
                    "max_attempts": 1},
                   {"kind": "race_claim", "task": 0, "agents": ["alice", "bob"],
                    "schedules": [[0, 1, 0, 1]]}],
         "schedule": "0 1 0 1", "schedule_steps": 4, "schedule_trace": trace}
    return ops, _report([v], ops, mode="schedule")


def fault() -> tuple[list[Op], dict[str, Any]]:
    """SIGSTOP the holder past its lease, bob claims, SIGCONT: alice's late fulfill wins; a
    kill leaves an info op behind."""
    exp = T + 300
    ops = [
        _op(0, 0, "client", "dispatch", _dispatch_args(300), 0, T, 200, OK, "5",
            round=1, example=9),
        _op(1, 0, "alice", "claim", {"task_id": "5"}, 500, T, 800, OK,
            _claim_value("5", "alice", "a1a1a1a1", exp), round=2, example=9),
        _op(2, -1, "nemesis", "nemesis", {"fault": "pause", "slot": 0}, 900, T, 900, OK,
            example=9),
        _op(3, 0, "alice", "fulfill", {"task_id": "5", "token": "a1a1a1a1", "result": "r"},
            950, T, 6200, OK, None, round=3, example=9),
        _op(4, -1, "nemesis", "nemesis", {"fault": "clock", "ms": 400}, 1500, exp + 100, 1500,
            OK, example=9),
        _op(5, 1, "bob", "claim", {"task_id": "5"}, 2000, exp + 100, 2400, OK,
            {**_claim_value("5", "bob", "b2b2b2b2", exp + 400, exp + 100), "attempt": 2},
            round=4, example=9),
        _op(6, -1, "nemesis", "nemesis", {"fault": "resume", "slot": 0}, 6000, exp + 100,
            6000, OK, example=9),
        _op(7, 2, EVIL, "fulfill", {"task_id": "5", "token": "b2b2b2b2"}, 6500, exp + 100,
            None, INFO, error="WorkerKilled", round=5, example=9),
        _op(8, -1, "nemesis", "nemesis", {"fault": "kill", "slot": 2}, 6600, exp + 100, 6600,
            OK, example=9),
    ]
    v = {"invariant": "holder-guard",
         "message": "alice's fulfill of task 5 returned ok after her lease ended at "
                    f"t={exp} and bob claimed it",
         "ops": [3], "detail": {"object": "task:5", "linearized_prefix": [0, 1, 5],
                                "partition_ops": [0, 1, 3, 5, 7]},
         "steps": [{"kind": "dispatch", "target_agent": None, "queue_ttl_ms": 10000, "exec_ttl_ms": 300,
                    "max_attempts": 2},
                   {"kind": "fault", "fault": "pause", "slot": 0},
                   {"kind": "fault", "fault": "clock", "ms": 400},
                   {"kind": "race_claim", "task": 0, "agents": ["bob"]},
                   {"kind": "fault", "fault": "kill", "slot": 2}]}
    return ops, _report([v], ops, faults=("pause", "kill", "clock"))


def big(n: int = 20_000, seed: int = 1) -> tuple[list[Op], dict[str, Any]]:
    """``n`` ops on 8 workers over many tasks, with clock jumps, faults and idle gaps; one
    single-winner violation near the end."""
    rng = random.Random(seed)
    ops: list[Op] = []
    t_us, now, task = 0.0, T, 0
    free = [0.0] * 8
    while len(ops) < n - 3:
        if rng.random() < 0.01:
            t_us += rng.uniform(500, 5000)  # idle between examples
        if rng.random() < 0.02:
            now += rng.choice([1, 10, 1000])
        if rng.random() < 0.003:
            ops.append(_op(len(ops), -1, "nemesis", "nemesis",
                           {"fault": rng.choice(["kill", "pause", "resume"]), "slot": 1},
                           t_us, now, t_us, OK, example=len(ops) // 200))
            continue
        p = rng.randrange(8)
        start = max(t_us, free[p]) + rng.uniform(0, 40)
        dur = rng.uniform(20, 400)
        kind = rng.random()
        if kind < 0.3:
            task += 1
            ops.append(_op(len(ops), p, "client", "dispatch", _dispatch_args(), start,
                           now, start + dur, OK, str(task), example=len(ops) // 200))
        else:
            tid = str(max(1, task - rng.randrange(3)))
            typ = OK if rng.random() < 0.6 else FAIL
            ops.append(_op(len(ops), p, f"agent{p}", "claim", {"task_id": tid}, start, now,
                           start + dur, typ, _claim_value(tid, f"agent{p}", f"tok{len(ops)}", now + 30_000, now)
                           if typ == OK else None, error=None if typ == OK else "AlreadyClaimed",
                           example=len(ops) // 200))
        free[p] = start + dur
        t_us = start + rng.uniform(0, 60)
    i = len(ops)
    t_us = max(free) + 100
    ops += [
        _op(i, 0, "client", "dispatch", _dispatch_args(), t_us, now, t_us + 100, OK,
            "big", example=999),
        _op(i + 1, 1, "alice", "claim", {"task_id": "big"}, t_us + 300, now, t_us + 700, OK,
            _claim_value("big", "alice", "aaaa", now + 30_000, now), example=999),
        _op(i + 2, 2, "bob", "claim", {"task_id": "big"}, t_us + 320, now, t_us + 720, OK,
            _claim_value("big", "bob", "bbbb", now + 30_000, now), example=999),
    ]
    v = {"invariant": "single-winner", "message": "'bob' claimed task big while 'alice' holds it",
         "ops": [i + 2], "detail": {"object": "task:big", "linearized_prefix": [i, i + 1],
                                    "partition_ops": [i, i + 1, i + 2]},
         "steps": [{"kind": "dispatch"}, {"kind": "race_claim", "task": 0,
                                          "agents": ["alice", "bob"]}]}
    return ops, _report([v], ops)


CASES = {"single_winner": single_winner, "lease_boundary": lease_boundary,
         "schedule_mode": schedule_mode, "fault": fault}
