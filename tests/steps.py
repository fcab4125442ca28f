"""Plain-data steps for hand-written step lists (what the generator draws and replays run)."""

from __future__ import annotations

D = {"kind": "dispatch", "target": None, "qttl": 10_000, "ettl": 50, "attempts": 1, "deps": []}


def poll(*agents: str) -> dict:
    return {"kind": "race_poll", "agents": list(agents)}


def claim(*agents: str) -> dict:
    return {"kind": "race_claim", "task": 0, "agents": list(agents)}


def holder(op: str, claim: int = 0, who: str = "holder", race: int = 1) -> dict:
    return {"kind": "holder", "claim": claim, "op": op, "who": who, "race": race}
