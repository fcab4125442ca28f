"""``fuzz --jobs``: the search split over forked controller processes (ferry_harness.run.jobs).

What must hold: every job's examples, coverage and findings reach job 0's report; a safety
finding in any job ends every job's search; a job that raises is a harness error, one that
vanishes or overruns is noted and killed, never waited on for ever; ``auto`` means one job
per core only where one job per core is safe."""

from __future__ import annotations

import os
import time

import pytest

from ferry_core import LeaseStore
from ferry_harness.errors import UsageError
from ferry_harness.run.campaign import Campaign, CampaignConfig, write_report
from ferry_harness.run.jobs import MAX_AUTO_JOBS, Jobs, auto_jobs
from tests.broken_stores import tight_check_then_act

_MAIN_PID = "FERRY_TEST_MAIN_PID"


def broken_in_other_jobs(path: str, *, clock):
    """Correct in job 0's workers, check-then-act in every other job's: what job 0 reports
    can only have come from another job."""
    if os.getppid() == int(os.environ[_MAIN_PID]):
        return LeaseStore(path, clock=clock)
    return tight_check_then_act(path, clock=clock)


# ---------------------------------------------------------------------- Jobs alone
def _index_times_ten(link):
    return link.index * 10


def _raises(link):
    raise ValueError("a bug in the search")


def _vanishes(link):
    os._exit(3)


def _sleeps(link):
    time.sleep(60)


def _counts_until_stopped(link):
    n = 0
    while not link.stopped():
        link.judged_one()
        link.publish(n, 0, 0, 0)
        n += 1
        time.sleep(0.001)
    return n


def test_each_job_returns_its_result_to_job_0():
    jobs = Jobs(3, _index_times_ten)
    done = jobs.collect(until=time.monotonic() + 30)
    assert [(d.index, d.result, d.error) for d in done] == [(1, 10, None), (2, 20, None)]


def test_a_job_that_raises_is_reported_with_its_traceback():
    [done] = Jobs(2, _raises).collect(until=time.monotonic() + 30)
    assert done.raised and done.result is None
    assert "ValueError: a bug in the search" in done.error and "Traceback" in done.error


def test_a_job_that_vanishes_is_noted_not_waited_for():
    [done] = Jobs(2, _vanishes).collect(until=time.monotonic() + 30)
    assert not done.raised and "exit code 3" in done.error


def test_a_job_still_running_at_the_limit_is_killed():
    jobs = Jobs(2, _sleeps)
    procs = [p for _i, p, _c in jobs._procs]
    t = time.monotonic()
    [done] = jobs.collect(until=t + 0.5)
    assert "killed" in done.error and time.monotonic() - t < 20
    assert not any(p.is_alive() for p in procs)


def test_the_stop_flag_ends_every_job_and_the_counters_add_up():
    jobs = Jobs(3, _counts_until_stopped)
    link = jobs.link()
    try:
        deadline = time.monotonic() + 20
        while link.others().examples < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert link.others().examples >= 10  # both jobs published
        link.stop_all()
        done = jobs.collect(until=time.monotonic() + 20)
    finally:
        jobs.close()
    counted = [d.result for d in done]
    assert all(isinstance(n, int) and n > 0 for n in counted), done
    assert link.judged_one() == sum(counted) + 1  # every job's judged examples, and ours


# ---------------------------------------------------------------------- a campaign
def test_two_jobs_share_max_examples_and_report_every_example(tmp_path):
    cfg = CampaignConfig(target="ferry_core:LeaseStore", budget_s=None, max_examples=6,
                         seed=3, workers=2, jobs=2, report_dir=str(tmp_path / "r"))
    outcome = Campaign(cfg).run()
    stats = outcome.report.stats
    assert outcome.verdict == "pass"
    assert (stats.examples, stats.jobs) == (6, 2)
    # the time split and the overlap rows are every job's
    assert stats.setup_s + stats.rounds_s + stats.checking_s + stats.other_s >= stats.seconds
    assert sum(o.rounds for o in stats.race_overlap) == stats.race_rounds


def test_a_finding_in_another_job_ends_the_search_and_reaches_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv(_MAIN_PID, str(os.getpid()))
    cfg = CampaignConfig(target=f"{__name__}:broken_in_other_jobs", budget_s=60.0, seed=1,
                         workers=2, jobs=2, shrink_budget_s=2.0, report_dir=str(tmp_path / "r"))
    outcome = Campaign(cfg).run()
    write_report(outcome)
    rep = outcome.report
    assert rep.verdict == "fail"
    assert [f.invariant for f in rep.invariants_found] == ["single-winner"]
    # job 1 found it and stopped job 0's search long before the 60 s budget
    assert rep.stats.seconds < 30
    assert rep.discovery is not None and rep.discovery.examples_until_found >= 1


def test_a_postgres_target_searches_in_one_job(tmp_path):
    cfg = CampaignConfig(target="ferry_core:PgLeaseStore", jobs=2,
                         report_dir=str(tmp_path / "r"))
    with pytest.raises(UsageError, match="one job"):
        Campaign(cfg)._start_jobs()


def test_auto_is_one_job_per_core_for_a_stress_search_on_sqlite_only():
    cores = len(os.sched_getaffinity(0))
    assert auto_jobs("stress", postgres=False) == min(cores, MAX_AUTO_JOBS)
    assert auto_jobs("schedule", postgres=False) == 1
    assert auto_jobs("stress", postgres=True) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_jobs_must_be_a_whole_number_of_at_least_one(bad):
    with pytest.raises(UsageError, match="jobs"):
        CampaignConfig(jobs=bad)
