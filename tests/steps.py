"""Steps for hand-written step lists (what the generator draws and replays run)."""

from __future__ import annotations

import json

from ferry_harness.run.steps import (
    Dispatch,
    Holder,
    RaceClaim,
    RacePoll,
    Step,
    step_from_json,
    step_to_json,
)

D = Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=1)


def poll(*agents: str) -> RacePoll:
    return RacePoll(agents=agents)


def claim(*agents: str) -> RaceClaim:
    return RaceClaim(task=0, agents=agents)


def holder(op: str, claim: int = 0, who: str = "holder", race: int = 1) -> Holder:
    return Holder(claim=claim, op=op, who=who, race=race)


def via_json(steps: list[Step]) -> list[Step]:
    """The steps after a trip through JSON text, as a report or a saved example stores them."""
    return [step_from_json(json.loads(json.dumps(step_to_json(s)))) for s in steps]
