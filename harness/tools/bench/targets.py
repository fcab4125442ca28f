"""Which stores a bench measures and how each worker opens one: ``--target`` specs, their
labels in tables and plots, and the bench's usage error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ferry_core import LeaseStore, PgLeaseStore, SystemClock, cas_store, immediate_store
from ferry_harness.errors import BenchUsageError
from ferry_harness.runtime.backend import backend_of
from ferry_harness.runtime.target import load_factory
from ferry_harness.tools.bench.records import BenchResult

#: strategy and busy policy of a store that is not ferry_core: measured as it is
AS_IS = "as-is"


@dataclass(frozen=True, kw_only=True)
class Target:
    """One ``--target`` store, resolved."""

    #: the ``module:factory`` spec as given
    spec: str
    #: the factory, called as ``factory(path, clock=...)`` (for stores that are not ferry_core)
    factory: Callable[..., Any]
    #: True for ferry_core's LeaseStore (and its factories): strategy, busy policy and the
    #: store's own claim counters apply
    ferry_core: bool
    #: the claim strategy a ferry_core factory fixes (``cas_store``, ``immediate_store``)
    fixed_strategy: str | None = None
    #: "sqlite" (a database file per run) or "postgres" (a schema per run on a server,
    #: the factory called with its libpq URI): a factory says so with
    #: ``ferry_backend = "postgres"`` (PROTOCOL.md#postgres-targets)
    backend: str = "sqlite"
    #: the store counts its claim attempts (``claim_stats()``, as ferry_core's two stores do)
    counts_claims: bool = False

    def make(self, path: str, strategy: str, policy: str) -> Any:
        """Open the store on ``path`` (ferry_core: with this strategy and busy policy)."""
        clock = SystemClock()
        if not self.ferry_core:
            return self.factory(path, clock=clock)
        return LeaseStore(path, clock=clock, claim_strategy=self.fixed_strategy or strategy,
                          busy_policy=policy)


def resolve_target(spec: str) -> Target:
    """Import ``module:factory``; a bad spec raises TargetError (one line, exit 2)."""
    factory = load_factory(spec)
    if factory is LeaseStore:
        return Target(spec=spec, factory=factory, ferry_core=True, counts_claims=True)
    fixed = {cas_store: "cas", immediate_store: "immediate"}.get(factory)
    if fixed is not None:
        return Target(spec=spec, factory=factory, ferry_core=True, fixed_strategy=fixed,
                      counts_claims=True)
    return Target(spec=spec, factory=factory, ferry_core=False, backend=backend_of(factory),
                  counts_claims=factory is PgLeaseStore)


def split_targets(target: str | Sequence[str]) -> list[str]:
    """``"A,B"`` (or a list) -> target specs in order, without repeats."""
    parts = target.split(",") if isinstance(target, str) else list(target)
    out = list(dict.fromkeys(p.strip() for p in parts if p.strip()))
    if not out:
        raise BenchUsageError("--target needs at least one module:factory")
    return out


def short_name(spec: str) -> str:
    """A table label: ``ferry_core`` for the reference store, else the module's last part."""
    module, _, attr = spec.partition(":")
    if module == "ferry_core":
        return "ferry_core" if attr == "LeaseStore" else f"ferry_core:{attr}"
    return module.rsplit(".", 1)[-1] if attr == "make_store" else f"{module.rsplit('.', 1)[-1]}:{attr}"


def variant_label(spec: str, strategy: str, policy: str, multi: bool) -> str:
    """How a run is named in tables and plots."""
    core = f"{strategy}/{policy}"
    if not multi:
        return "as measured" if strategy == AS_IS else core
    name = short_name(spec)
    return name if strategy == AS_IS else f"{name} {core}"


def ferry_core_only(result: BenchResult) -> bool:
    """Whether a bench result measured only ferry_core on SQLite: the project's own benchmark,
    the one its goal (issue 19) and goal lines are about (their ceilings are SQLite writes).
    Another store's bench, or one with a Postgres run, stays quiet on them."""
    specs = result.get("targets") or [result.get("target", "")]
    return all(short_name(str(s)).startswith("ferry_core") for s in specs) and not any(
        r.get("backend") == "postgres" for r in result.get("runs", ()))
