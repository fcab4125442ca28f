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
    d = view if isinstance(view, dict) else asdict(view)
    return {k: v for k, v in d.items() if k in keep}


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


class _Sparse:
    """Any store, its views trimmed to the required fields (``inspect``'s keep task_id)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)  # (a store without get or inspect keeps none)
        if name == "get":
            return lambda task_id: _trim(attr(task_id), REQUIRED)
        if name == "inspect":
            return lambda agent_id=None: [_trim(v, REQUIRED | {"task_id"}) for v in attr(agent_id)]
        return attr


def __getattr__(name: str) -> Any:
    """``sparse_views:over_combo_07``: the configurable store's combo, views trimmed (the
    freedom crossed with every other; not in tests.matrix yet)."""
    if not name.startswith("over_"):
        raise AttributeError(name)
    from tests.variants import configurable

    inner = getattr(configurable, name[len("over_"):])

    def factory(path: str, *, clock: Any) -> Any:
        return _Sparse(inner(path, clock=clock))

    return factory
