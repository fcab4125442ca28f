"""ferry_core's store with views that keep only what PROTOCOL.md#taskview-fields requires.

"A field you leave out is not compared, except `status` and `is_logically_expired`, which
every view must have, and `result` for a store with the `results` feature": these views
keep exactly those (``make``: ``inspect`` keeps ``task_id`` too; ``make_without_ids``: not
even there). Neither the configurable store nor the hand-written variants leave fields
out, so this is the corpus's one store taking that freedom.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ferry_core import LeaseStore

REQUIRED = frozenset({"status", "is_logically_expired", "result"})


def _trim(view: Any, keep: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in asdict(view).items() if k in keep}


class SparseViewStore(LeaseStore):
    """Views carry the required fields only (``inspect``'s also ``task_id`` unless
    ``ids_in_inspect`` is off)."""

    ids_in_inspect = True

    def get(self, task_id: str) -> dict[str, Any]:  # type: ignore[override]
        return _trim(super().get(task_id), REQUIRED)

    def inspect(self, agent_id: str | None = None) -> list[dict[str, Any]]:  # type: ignore[override]
        keep = REQUIRED | {"task_id"} if self.ids_in_inspect else REQUIRED
        return [_trim(v, keep) for v in super().inspect(agent_id)]


class _NoIds(SparseViewStore):
    ids_in_inspect = False


def make(path: str, *, clock: Any) -> SparseViewStore:
    return SparseViewStore(path, clock=clock)


def make_without_ids(path: str, *, clock: Any) -> SparseViewStore:
    return _NoIds(path, clock=clock)
