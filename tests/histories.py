"""Hand-built histories: a deterministic way to pin exactly the fact a check judges."""

from __future__ import annotations

from ferry_harness.check.history import OK, History, Op
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import FEATURES

T0 = 1_000_000_000
TOKEN_A = "d8ea8f0c-8800-4000-8000-000000000001"
TOKEN_B = "d8ea8f0c-8800-4000-8000-000000000002"
SPEC_STORE = ModelConfig().for_capabilities(set(FEATURES))
DECLARED = ModelConfig().for_capabilities(set(FEATURES) | {"holder-binding", "refusal-order"})


class Recorder:
    """Builds a history one op at a time; ops with the same ``at`` run concurrently."""

    def __init__(self) -> None:
        self.history = History()
        self._ns = 0

    def op(self, op: str, agent: str, args: dict, *, now: int = T0, type: str = OK,
           value=None, error: str | None = None, concurrent: bool = False) -> Op:
        if not concurrent:
            self._ns += 100
        o = Op(index=len(self.history), process=len(self.history) % 4, agent=agent, op=op,
               args=args, invoke_ns=self._ns, now=now, complete_ns=self._ns + 50, type=type,
               value=value, error=error)
        return self.history.append(o)

    def dispatch(self, tid: str = "t1", **kw) -> None:
        args = {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": 50,
                "max_attempts": 2, **kw}
        self.op("dispatch", "client", args, value=tid)

    def claim(self, agent: str, token: str, *, tid: str = "t1", now: int = T0,
              attempt: int = 1, concurrent: bool = False) -> None:
        claim = {"task_id": tid, "agent_id": agent, "token": token, "claimed_at": now,
                 "lease_expires_at": now + 50, "attempt": attempt}
        self.op("claim", agent, {"task_id": tid}, now=now, value=claim, concurrent=concurrent)


