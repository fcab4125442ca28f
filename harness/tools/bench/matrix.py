"""The run matrix: every worker count x target variant (x strategy x busy policy for
ferry_core), ``repeat`` times interleaved between ceiling samples, and issue 19's goal
check over the runs. Returns the whole result as plain data (``bench.json``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext

from ferry_harness.runtime.backend import POSTGRES, opened_backend
from ferry_harness.runtime.target import DEFAULT_TARGET
from ferry_harness.tools.bench.ceiling import (
    CEILING_SAMPLES,
    CEILING_STATEMENT,
    CEILING_UPDATES,
    capture_lifecycle_sql,
    measure_ceiling,
    measure_same_sql,
    measure_store_claim_update,
)
from ferry_harness.tools.bench.machine import machine_info
from ferry_harness.tools.bench.records import BenchResult, GoalRow, RunRecord, SameSqlRun
from ferry_harness.tools.bench.runner import Progress, run_one
from ferry_harness.tools.bench.targets import (
    AS_IS,
    Target,
    resolve_target,
    split_targets,
    variant_label,
)

DEFAULT_WORKERS = (1, 2, 4, 8, 16)
DEFAULT_TASKS = 20_000
DEFAULT_POLICIES = ("spin", "hybrid", "jitter", "stock")


def run_bench(target: str | Sequence[str] = DEFAULT_TARGET,
              workers: Sequence[int] = DEFAULT_WORKERS,
              strategies: Sequence[str] = ("cas", "immediate"),
              policies: Sequence[str] = DEFAULT_POLICIES, tasks: int = DEFAULT_TASKS, *,
              repeat: int = 1, timeout_s: float = 600.0, ceiling_updates: int = CEILING_UPDATES,
              ceiling_samples: int = CEILING_SAMPLES,
              progress: Progress | None = None,
              db_dir: str | None = None, pg_uri: str | None = None) -> BenchResult:
    """Run the whole matrix ``repeat`` times (interleaved); returns
    ``{"runs", "ceiling", "machine", "goal", ...}`` as plain data.

    Several targets (``"A,B"``) are compared in one interleaved run: every repetition runs,
    for each worker count, every target (and, for ferry_core, every strategy x policy) in
    the same order, on the same tasks, between the same ceiling samples.
    """
    specs = split_targets(target)
    multi = len(specs) > 1
    notes: list[str] = []
    variants: list[tuple[Target, str, str]] = []
    for spec in specs:
        tgt = resolve_target(spec)
        t_strategies, t_policies = list(strategies), list(policies)
        if tgt.ferry_core and tgt.fixed_strategy:
            if t_strategies != [tgt.fixed_strategy]:
                notes.append(f"{spec} fixes claim_strategy={tgt.fixed_strategy!r}; "
                             "--strategy is ignored")
            t_strategies = [tgt.fixed_strategy]
        elif tgt.backend == "postgres":
            notes.append(f"{spec} is a Postgres target: each run in a fresh schema of one "
                         "server (a throwaway cluster, or $FERRY_PG_URI); measured as it is "
                         "(strategy/busy_policy 'as-is'), with no -wal and no ratio to the "
                         "SQLite ceilings; CPU used counts the workers, not the server")
            t_strategies, t_policies = [AS_IS], [AS_IS]
        elif not tgt.ferry_core:
            notes.append(f"{spec} is not ferry_core: --strategy and --busy-policy do not apply; "
                         "the store is measured as it is (strategy/busy_policy 'as-is')")
            t_strategies, t_policies = [AS_IS], [AS_IS]
        variants += [(tgt, s, p) for s in t_strategies for p in t_policies]
    all_strategies = list(dict.fromkeys(s for _, s, _ in variants))
    all_policies = list(dict.fromkeys(p for _, _, p in variants))
    base = tempfile.mkdtemp(prefix="ferry-bench-", dir=db_dir)
    # a Postgres target: the harness's Postgres backend for the whole bench (``pg_uri``,
    # else $FERRY_PG_URI, else a throwaway cluster; a database of its own, dropped at the
    # end), each of its runs in a fresh schema
    server = (opened_backend(POSTGRES, directory=base, pg_uri=pg_uri, cluster_parent=db_dir)
              if any(t.backend == POSTGRES for t, _, _ in variants) else nullcontext(None))
    try:
        with server as pg:
            machine = machine_info(base)
            samples: list[float] = []

            def ceiling_sample(phase: str) -> list[float]:
                got = []
                for _ in range(ceiling_samples):
                    if progress:
                        progress({"phase": "ceiling", "label": phase, "done": 0, "tasks": 0})
                    got.append(measure_ceiling(base, ceiling_updates))
                samples.extend(got)
                return got

            before = ceiling_sample("before")
            any_core = any(t.ferry_core for t, _, _ in variants)
            claim_update = measure_store_claim_update(base, ceiling_updates) if any_core else None
            # the same-SQL ceiling: ferry_core's own lifecycle statements, replayed bare at every
            # worker count, right before that count's runs in every repetition
            lifecycle_sql = capture_lifecycle_sql(base) if any_core else None
            same_sql_runs: list[SameSqlRun] = []
            runs: list[RunRecord] = []
            combos = [(w, v) for w in workers for v in variants]
            total = len(combos) * repeat
            for rep in range(repeat):
                rep_runs = []
                rep_same: dict[int, SameSqlRun] = {}
                for i, (w, (tgt, s, p)) in enumerate(combos):
                    index = rep * len(combos) + i
                    if lifecycle_sql is not None and w not in rep_same:
                        if progress:
                            progress({"phase": "ceiling", "label": f"same SQL, {w}w", "done": 0,
                                      "tasks": 0})
                        same = measure_same_sql(base, w, tasks, lifecycle_sql, timeout_s=timeout_s)
                        same["rep"] = rep + 1
                        same_sql_runs.append(same)
                        rep_same[w] = same
                    label = variant_label(tgt.spec, s, p, multi)
                    if progress:
                        progress({"phase": "run", "label": f"{w}w {label}", "index": index,
                                  "total": total, "done": 0, "tasks": tasks})
                    record = run_one(tgt, w, s, p, tasks, base, timeout_s=timeout_s,
                                     progress=progress, pg=pg)
                    record["rep"] = rep + 1
                    record["label"] = label
                    rep_runs.append(record)
                    if progress:
                        progress({"phase": "result", "record": record, "index": index,
                                  "total": total})
                after = ceiling_sample("after" if rep == repeat - 1 else f"after run {rep + 1}")
                rep_ceiling = max(before + after)  # the samples right before and after it
                for r in rep_runs:
                    solo = next((q for q in rep_runs if q["workers"] == 1
                                 and q["label"] == r["label"]), None)
                    if solo and solo["lifecycles_per_s"]:  # scaling within this repetition
                        r["vs_1_worker"] = r["lifecycles_per_s"] / solo["lifecycles_per_s"]
                    if r.get("backend") == "postgres":
                        continue  # the ceilings are SQLite writes: no ratio to them
                    r["ceiling"] = rep_ceiling
                    r["ceiling_ratio"] = r["claims_per_s"] / rep_ceiling if rep_ceiling else 0.0
                    r["raw_half"] = rep_ceiling / 2  # a lifecycle is at least two such writes
                    r["lifecycle_ratio"] = (r["lifecycles_per_s"] / r["raw_half"]
                                            if rep_ceiling else 0.0)
                    bare = rep_same.get(r["workers"])
                    if bare and bare["lifecycles_per_s"] and _is_ferry_core(r):
                        r["same_sql_per_s"] = bare["lifecycles_per_s"]
                        r["same_sql_ratio"] = r["lifecycles_per_s"] / bare["lifecycles_per_s"]
                        r["same_sql_p99_ms"] = bare["claim_latency_ms"]["p99"]
                        r["same_sql_p999_ms"] = bare["claim_latency_ms"]["p999"]
                runs.extend(rep_runs)
                before = after
            best = max(samples)
            machine["loadavg_end"] = list(os.getloadavg())
            ceiling = {
                "updates_per_s": best,
                "raw_half_per_s": best / 2,
                "samples_per_s": samples,
                "statement": CEILING_STATEMENT,
                "method": (f"single process, autocommit (one statement per transaction), WAL + "
                           f"synchronous=NORMAL, {ceiling_updates} distinct rows per sample, "
                           f"{ceiling_samples} samples before the matrix and after each repetition; "
                           "a run is compared with the best sample taken right before or after "
                           "its repetition, this field is the best of all; raw/2 is the lifecycle "
                           "ceiling (a claim and a fulfill are at least two such writes)"),
            }
            if lifecycle_sql is not None:
                by_w: dict[str, list[float]] = {}
                for q in same_sql_runs:
                    by_w.setdefault(str(q["workers"]), []).append(q["lifecycles_per_s"])
                ceiling["same_sql"] = {
                    "by_workers": by_w, "runs": same_sql_runs,
                    "poll": list(lifecycle_sql.poll), "fulfill": list(lifecycle_sql.fulfill),
                    "trace_events": list(lifecycle_sql.events),
                    "settings": dict(lifecycle_sql.settings),
                    "method": ("ferry_core's own SQL: the statements of a busy poll_next (the "
                               "claiming UPDATE; its trigger writes the token history) and of "
                               "the fulfill, traced from the store and replayed by W bare "
                               "processes (sqlite3 only: SQLite's own busy handler with "
                               "busy_timeout=5000 ms, the store's connection settings and SQL "
                               "function, SQLite's automatic checkpoint) from one barrier on "
                               "the same tasks, right before the runs at W workers in every "
                               "repetition; same_sql_ratio = a run's lifecycles/s over that "
                               "repetition's sample at its worker count, same_sql_p99_ms / "
                               "same_sql_p999_ms = that sample's claim tail (the poll's "
                               "statements, as a run's latency_ms times poll_next)"),
                }
            if claim_update is not None:
                ceiling["ferry_core_claim_update_per_s"] = claim_update
                ceiling["ferry_core_claim_update_note"] = (
                    "ferry_core's own claiming UPDATE (token-history trigger, partial indexes) in "
                    "the same single-process autocommit loop, without pick or sweep")
            return {
                "target": ",".join(specs), "targets": specs, "ferry_core": any_core,
                "tasks": tasks, "repeat": repeat,
                "workers": list(workers), "strategies": all_strategies,
                "busy_policies": all_policies, "runs": runs, "ceiling": ceiling,
                "machine": machine, "goal": goal_check(runs), "notes": notes,
            }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _is_ferry_core(run: RunRecord) -> bool:
    """A ferry_core run (its strategy and policy are ferry_core's, not ``as-is``)."""
    return run.get("strategy") != AS_IS


# Issue 19's acceptance, per worker count: lifecycles/s as a fraction of the same run's
# raw/2, and the claim-latency tail, fairness and lost-race ratio.
GOAL_BY_WORKERS: dict[int, dict[str, float]] = {
    1: {"lifecycle_ratio": 0.6},
    8: {"lifecycle_ratio": 0.5, "p99_ms": 2.0, "p999_ms": 10.0, "max_ms": 50.0, "jain": 0.99,
        "cas_miss": 0.01},
    16: {"p99_ms": 2.0, "p999_ms": 20.0, "max_ms": 50.0, "jain": 0.99, "cas_miss": 0.01},
}


def goal_check(runs: list[RunRecord]) -> list[GoalRow]:
    """Issue 19's acceptance, evaluated for every run at 1, 8 or 16 workers."""
    out = []
    for r in runs:
        goal = GOAL_BY_WORKERS.get(r["workers"])
        if goal is None or r.get("error") or r.get("backend") == "postgres":
            continue
        lat = r["latency_ms"]
        value = {"lifecycle_ratio": r.get("lifecycle_ratio", 0.0), "p99_ms": lat["p99"],
                 "p999_ms": lat["p999"], "max_ms": lat["max"], "jain": r["jain_fairness"],
                 "cas_miss": r["cas_miss_ratio"]}
        checks = {k: (value[k] >= want if k in ("lifecycle_ratio", "jain") else value[k] <= want)
                  for k, want in goal.items()}
        checks["verified"] = bool(r.get("verified", {}).get("ok"))
        out.append({"rep": r.get("rep", 1), "workers": r["workers"],
                    "label": r.get("label", f"{r['strategy']}/{r['busy_policy']}"),
                    "target": r.get("target", ""), "strategy": r["strategy"],
                    "busy_policy": r["busy_policy"], "tasks": r["tasks"],
                    "lifecycles_per_s": r["lifecycles_per_s"], "raw_half": r.get("raw_half", 0),
                    **value, "checks": checks, "met": all(checks.values())})
    return out
