"""Issue 28's recall on the Postgres base: every broken store of tests/broken_stores.py
whose bug applies to PgLeaseStore has a twin in tests/pg/broken_pg_stores.py, and a
bounded fuzz of each (thorough) names the twin's own invariant first."""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import Campaign, CampaignConfig
from tests import broken_stores
from tests.pg import broken_pg_stores as pg

BUDGET_S = 20  # the acceptance bound: a store not caught in it is reported, not tuned for
# Measured at seed 0 every store is caught well inside it. Not a guarantee for every seed:
# PgDroppedLateResultStore (a late fulfill from the token's own holder, then salvaged())
# went uncaught in 20 s at seeds 1 and 2 (43 examples), caught at 0.9 s (seed 0) and 9.5 s
# (seed 3); its SQLite twin needed 17.9 s (82 examples) at seed 1.
STORES = sorted(pg.PG_BROKEN) + sorted(pg.PG_FAULT_BROKEN)


def test_every_sqlite_broken_store_has_a_postgres_twin_or_a_reason():
    """Cheap (no server): the mapping is complete and each twin trips the same invariant
    as its SQLite original; a new entry of tests/broken_stores.py fails here until it is
    placed."""
    sqlite = {**{k: v[0] for k, v in broken_stores.BROKEN.items()},
              **{k: v[1] for k, v in broken_stores.FAULT_BROKEN.items()}}
    assert set(pg.TWIN) | set(pg.NOT_APPLICABLE) == set(sqlite)
    assert not set(pg.TWIN) & set(pg.NOT_APPLICABLE)
    assert sorted(pg.TWIN.values()) == sorted(STORES)
    for name, twin in pg.TWIN.items():
        theirs = pg.PG_BROKEN[twin][0] if twin in pg.PG_BROKEN else pg.PG_FAULT_BROKEN[twin][1]
        assert theirs == sqlite[name], (name, twin)
    for name, why in pg.NOT_APPLICABLE.items():
        assert name in pg.__doc__ and why  # the module doc says why, one line each
    assert {k: v[0] for k, v in pg.PG_BROKEN.items() if k in pg.BROKEN_PG} == pg.BROKEN_PG


@pytest.mark.thorough
@pytest.mark.parametrize("target", STORES)
def test_a_bounded_fuzz_names_each_twins_own_invariant(pg_uri, tmp_path, target):
    faults, invariant = ((), pg.PG_BROKEN[target][0]) if target in pg.PG_BROKEN \
        else pg.PG_FAULT_BROKEN[target][:2]
    cfg = CampaignConfig(target=f"tests.pg.broken_pg_stores:{target}", budget_s=BUDGET_S,
                         seed=0, faults=faults, shrink_budget_s=10,
                         report_dir=str(tmp_path), pg_uri=pg_uri)
    out = Campaign(cfg).run()
    rep = out.report
    first = rep.violations[0] if rep.violations else None
    print(f"\nRECALL {target}: verdict={out.verdict}"
          f" invariant={first.invariant if first else None}"
          f" detect_s={rep.discovery.seconds_to_detect if rep.discovery else None}"
          f" reproduced={first.reproduction if first else None}"
          f" message={first.message if first else None!r}")
    assert out.verdict == "fail", f"{target} not caught in {BUDGET_S} s"
    assert first.invariant == invariant, first.message
