"""ferry as a pytest plugin: a correctness gate in one line, and fixtures for your tests.

Enabled automatically once ferry is installed (entry point ``pytest11``). With
``pytest --ferry-target mypkg.store:make`` the session gains one test item per scenario
and one fuzz campaign; each fails with the invariant id (PROTOCOL.md#invariants) and the
path of its report directory, so JUnit XML and CI logs say what broke and where to look.
Without the option nothing is added, and the fixtures (``ferry_clock``, ``ferry_workers``,
``ferry_race``, ``ferry_history``, ``ferry_check``) are there for your own tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import profiles

DEFAULT_REPORT_DIR = "ferry-reports"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ferry", "ferry: concurrency gate for SQLite-WAL leasing stores")
    group.addoption("--ferry-target", default=None, metavar="MODULE:FACTORY",
                    help="add ferry's scenarios and a fuzz campaign against this store factory")
    group.addoption("--ferry-budget", type=float, default=None, metavar="SECONDS",
                    help="fuzz campaign budget (default: from the Hypothesis profile; "
                    "ferry-ci 30 s, ferry-dev 10 s, ferry-thorough 600 s)")
    group.addoption("--ferry-workers", type=int, default=4, metavar="N",
                    help="worker processes per race (default 4)")
    group.addoption("--ferry-mode", choices=("stress", "schedule"), default="stress",
                    help="fuzz mode (default stress)")
    group.addoption("--ferry-report-dir", default=None, metavar="DIR",
                    help=f"where reports go (default ./{DEFAULT_REPORT_DIR}); one directory per item")
    group.addoption("--ferry-no-scenarios", action="store_true",
                    help="only the fuzz campaign, not the scenario suite")


def _report_root(config: pytest.Config) -> Path:
    root = Path(config.getoption("--ferry-report-dir") or config.rootpath / DEFAULT_REPORT_DIR)
    return root


class FerryViolation(Exception):
    """A ferry item failed: carries the invariant and the report directory."""

    def __init__(self, invariant: str, message: str, report: Path | None) -> None:
        where = f" — report: {report}" if report else ""
        super().__init__(f"[{invariant}] {message}{where}")
        self.invariant = invariant
        self.report = report


class FerryItem(pytest.Item):
    """One scenario or one fuzz campaign against ``--ferry-target``."""

    def __init__(self, *, kind: str, scenario: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind
        self.scenario = scenario
        self.user_properties.append(("ferry_kind", kind))

    @property
    def _target(self) -> str:
        return self.config.getoption("--ferry-target")

    def _dir(self) -> Path:
        return _report_root(self.config) / self.name.replace("/", "_")

    def runtest(self) -> None:
        from .target import load_factory

        load_factory(self._target)
        if self.kind == "scenario":
            self._run_scenario()
        else:
            self._run_fuzz()

    def _run_scenario(self) -> None:
        from scenarios import SCENARIOS

        from .scenario_cli import run_scenarios, write_scenario_report

        scenario = SCENARIOS[self.scenario]
        workers = self.config.getoption("--ferry-workers")
        [result], _secs = run_scenarios([scenario], self._target, workers)
        if result.status == "skip":
            pytest.skip(result.explanation)
        if not result.passed:
            d = write_scenario_report(scenario, result, target=self._target, workers=workers,
                                      directory=self._dir())
            self.user_properties.append(("ferry_invariant", result.invariant))
            self.user_properties.append(("ferry_report", str(d)))
            raise FerryViolation(result.invariant, result.explanation, d)

    def _run_fuzz(self) -> None:
        from hypothesis.database import DirectoryBasedExampleDatabase

        from .campaign import Campaign, CampaignConfig, write_report

        defaults = profiles.campaign_defaults()
        budget = self.config.getoption("--ferry-budget") or defaults["budget_s"]
        seed = self.config.getoption("hypothesis_seed", default=None)
        d = self._dir()
        database = _user_database() or DirectoryBasedExampleDatabase(str(d / "examples"))
        cfg = CampaignConfig(
            target=self._target, workers=self.config.getoption("--ferry-workers"),
            budget_s=budget, seed=int(seed) if seed is not None else 0, report_dir=str(d),
            mode=self.config.getoption("--ferry-mode"),
            steps_per_example=defaults["steps_per_example"], database=database)
        outcome = Campaign(cfg).run()
        write_report(outcome)
        self.user_properties.append(("ferry_report", str(d)))
        if outcome.verdict == "fail":
            v = outcome.report["violations"][0]
            self.user_properties.append(("ferry_invariant", v["invariant"]))
            db = outcome.report.get("example_database", {})
            note = " (replayed first from the example database)" if db.get("failure_from_database") else ""
            raise FerryViolation(v["invariant"], f"{v['message']}; reproduced "
                                 f"{v.get('reproduced', '?')}{note}; see "
                                 f"PROTOCOL.md#{v['invariant']}", d)
        if outcome.verdict == "unknown":  # nothing was decided: not a pass
            why = "; ".join(outcome.report.get("unknown", [])[:3]) or \
                "no example completed within the budget"
            raise FerryViolation("unknown", f"the run decided nothing: {why}", d)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, FerryViolation):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return "ferry", 0, f"ferry {self.name}"


def _user_database() -> Any:
    """The example database of a user's own Hypothesis profile, if one is loaded."""
    from hypothesis import settings

    if profiles.current() in (*profiles.PROFILES, "default", "ci"):
        return None
    return settings.default.database


class FerryCollector(pytest.Collector):
    """Collects the ferry items (deterministic order, so xdist workers agree)."""

    def collect(self) -> list[pytest.Item]:
        items: list[pytest.Item] = []
        if not self.config.getoption("--ferry-no-scenarios"):
            from scenarios import SCENARIOS

            for name in SCENARIOS:
                items.append(FerryItem.from_parent(self, name=f"scenario/{name}",
                                                   kind="scenario", scenario=name))
        items.append(FerryItem.from_parent(self, name="fuzz", kind="fuzz"))
        return items


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if not config.getoption("--ferry-target"):
        return
    collector = FerryCollector.from_parent(session, name="ferry")
    items.extend(collector.collect())


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def ferry_clock() -> Any:
    """A shared millisecond clock (stop time; set it to a lease's exact boundary)."""
    from .clock import SharedClock

    return SharedClock()


@pytest.fixture
def ferry_history() -> Any:
    """An empty history that ``ferry_race`` appends to and ``ferry_check`` judges."""
    from .history import History

    return History()


@pytest.fixture
def ferry_workers(request: pytest.FixtureRequest, tmp_path: Path, ferry_clock: Any) -> Iterator[Any]:
    """A pool of worker processes, each with its own store on one temp WAL database.

    The target is ``--ferry-target`` (default ferry_core:LeaseStore), or
    ``@pytest.mark.ferry_target("mod:factory")`` on the test. Every worker is stopped after.
    """
    from .client import WorkerPool
    from .target import DEFAULT_TARGET

    marker = request.node.get_closest_marker("ferry_target")
    target = (marker.args[0] if marker else None) or request.config.getoption("--ferry-target") \
        or DEFAULT_TARGET
    pool = WorkerPool(target, ferry_clock, request.config.getoption("--ferry-workers"))
    with pool:
        pool.open(str(tmp_path / "ferry.db"))
        yield pool


@pytest.fixture
def ferry_race(ferry_workers: Any, ferry_history: Any) -> Callable[..., list[Any]]:
    """``ferry_race(op, [args...], agents=[...])``: start k calls at one barrier.

    Returns their ops (``type`` ok/fail/info, ``value``, ``error``), also appended to
    ``ferry_history``.
    """
    from .client import PlannedCall

    def race(op: str, args: list[dict[str, Any]] | dict[str, Any] | None = None, *,
             agents: list[str] | None = None, k: int | None = None) -> list[Any]:
        k = k or (len(agents) if agents else len(args) if isinstance(args, list) else ferry_workers.size)
        if k > ferry_workers.size:
            raise ValueError(f"a race of {k} needs --ferry-workers >= {k}")
        arg_list = args if isinstance(args, list) else [dict(args or {}) for _ in range(k)]
        agent_list = agents or [f"agent-{i}" for i in range(k)]
        calls = [PlannedCall(i, op, arg_list[i], agent_list[i]) for i in range(k)]
        return ferry_workers.run(calls, ferry_history)

    return race


@pytest.fixture
def ferry_check() -> Callable[..., list[Any]]:
    """``ferry_check(history, strict=True)``: run every checker; raise on a violation
    (``strict``) or return the list of violations."""
    from .checker import Checker

    def check(history: Any, *, strict: bool = True) -> list[Any]:
        found = Checker().check(history)
        if found and strict:
            raise AssertionError("ferry: " + "; ".join(str(v) for v in found))
        return found

    return check


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ferry_target(spec): the store factory for ferry_workers")
    if hasattr(config, "workerinput") and config.getoption("--ferry-report-dir") is None:
        # xdist: every worker writes under its own root, so nothing is shared
        wid = config.workerinput.get("workerid", "gw")
        config.option.ferry_report_dir = str(config.rootpath / DEFAULT_REPORT_DIR / wid)
    os.environ.setdefault("FERRY_PYTEST", "1")
