"""ferry as a pytest plugin: a correctness gate in one line, and fixtures for your tests.

Enabled automatically once ferry is installed (entry point ``pytest11``). The gate is one
test item per scenario plus one fuzz campaign against a store factory; each fails with the
invariant id (PROTOCOL.md#invariants) and the path of its report directory, so JUnit XML
and CI logs say what broke and where to look. Two ways to ask for it, both collected as
ordinary pytest items (counted in ``collected N items``, selectable with ``-k``, listed by
``--co``, rerun by ``--lf``, distributed by ``-n``):

- ``pytest --ferry-target mypkg.store:make_store``: items ``ferry::fuzz`` and
  ``ferry::scenario/<name>``;
- in a test module, ``test_gate = ferry_gate("mypkg.store:make_store")`` (what
  ``ferry-harness new-target`` writes): items ``test_x.py::test_gate::fuzz`` and so on.

Without either nothing is added, and the fixtures (``ferry_clock``, ``ferry_workers``,
``ferry_race``, ``ferry_history``, ``ferry_check``) are there for your own tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.check.rules import anchor_for
from harness.run import profiles

DEFAULT_REPORT_DIR = "ferry-reports"
DEFAULT_WORKERS = 4


def pytest_addoption(parser: pytest.Parser) -> None:
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.run.example_db import ENV_VAR, SPEC_HELP

    group = parser.getgroup("ferry", "ferry: concurrency gate for SQLite-WAL leasing stores")
    group.addoption("--ferry-target", default=None, metavar="MODULE:FACTORY",
                    help="add ferry's scenarios and a fuzz campaign against this store factory")
    group.addoption("--ferry-budget", type=float, default=None, metavar="SECONDS",
                    help="fuzz campaign budget (default: the gate's, else from the Hypothesis "
                    "profile; ferry-ci 30 s, ferry-dev 10 s, ferry-thorough 600 s)")
    group.addoption("--ferry-workers", type=int, default=None, metavar="N",
                    help=f"worker processes per race (default {DEFAULT_WORKERS})")
    group.addoption("--ferry-mode", choices=("stress", "schedule"), default=None,
                    help="fuzz mode (default stress)")
    group.addoption("--ferry-report-dir", default=None, metavar="DIR",
                    help=f"where reports go (default ./{DEFAULT_REPORT_DIR}); "
                    "DIR/fuzz and DIR/scenario/<name>")
    group.addoption("--ferry-no-scenarios", action="store_true",
                    help="only the fuzz campaign, not the scenario suite")
    group.addoption("--ferry-example-db", default=None, metavar="SPEC",
                    help=f"where failing examples are kept and replayed first: {SPEC_HELP}; "
                    f"also ${ENV_VAR}. redis:// shares them between CI runners")


def _report_root(config: pytest.Config) -> Path:
    return Path(config.getoption("--ferry-report-dir") or config.rootpath / DEFAULT_REPORT_DIR)


# what a failing item can name besides an invariant id: nothing decided, a scenario that
# could not stage its race, a target that does not load
NOT_INVARIANTS = frozenset({"unknown", "could-not-run", "target"})


# target -> the item in which it hung (per process: each xdist worker learns on its own)
_HUNG: dict[str, str] = {}


class FerryViolation(Exception):
    """A ferry item failed: carries the invariant and the report directory."""

    def __init__(self, invariant: str, message: str, report: Path | None) -> None:
        anchor = anchor_for(invariant, message)  # the section of the rule it broke
        if invariant not in NOT_INVARIANTS and anchor not in message:
            message = f"{message} (see {anchor})"
        where = f" — report: {report}" if report else ""
        super().__init__(f"[{invariant}] {message}{where}")
        self.invariant = invariant
        self.report = report


class FerryGate:
    """The gate declared in a test module; pytest collects it as one item per scenario
    plus ``fuzz``. Command-line ``--ferry-*`` options override these arguments."""

    def __init__(self, target: str, *, budget: float | None = None, workers: int | None = None,
                 mode: str | None = None, scenarios: bool = True,
                 report_dir: str | os.PathLike[str] | None = None) -> None:
        self.target = target
        self.budget = budget
        self.workers = workers
        self.mode = mode
        self.scenarios = scenarios
        self.report_dir = report_dir

    def __repr__(self) -> str:
        return f"ferry_gate({self.target!r})"


def ferry_gate(target: str, **options: Any) -> FerryGate:
    """``test_gate = ferry_gate("mypkg.store:make_store")`` in a test module runs the gate
    with plain ``pytest``. Options: ``budget`` (s), ``workers``, ``mode``, ``scenarios``
    (False: fuzz only), ``report_dir``."""
    return FerryGate(target, **options)


class FerryItem(pytest.Item):
    """One scenario or one fuzz campaign of a gate."""

    def __init__(self, *, kind: str, gate: FerryGate, scenario: str | None = None,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.kind = kind
        self.gate = gate
        self.scenario = scenario
        self.user_properties.append(("ferry_kind", kind))

    @property
    def _target(self) -> str:
        return self.gate.target

    def _opt(self, name: str, gate_value: Any, default: Any) -> Any:
        value = self.config.getoption(name)
        if value is not None:
            return value
        return gate_value if gate_value is not None else default

    @property
    def _workers(self) -> int:
        return int(self._opt("--ferry-workers", self.gate.workers, DEFAULT_WORKERS))

    def _dir(self) -> Path:
        """``ROOT/fuzz`` or ``ROOT/scenario/<name>`` (the paths the README names)."""
        root = Path(self.gate.report_dir) if self.gate.report_dir else _report_root(self.config)
        if self.gate.report_dir and hasattr(self.config, "workerinput"):
            root = root / self.config.workerinput.get("workerid", "gw")
        return root.joinpath(*self.name.split("/"))

    def runtest(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from harness.errors import TargetError
        from harness.runtime.target import load_factory

        try:
            load_factory(self._target)
        except TargetError as exc:
            raise FerryViolation("target", str(exc), None) from None
        hung = _HUNG.get(self._target)
        if hung is not None:  # every further run would only wait out the same hang
            raise FerryViolation("liveness", f"not run: the target hung in {hung} (see that "
                                 "item's report); a hanging target fails the whole gate", None)
        try:
            if self.kind == "scenario":
                self._run_scenario()
            else:
                self._run_fuzz()
        except FerryViolation as exc:
            if exc.invariant == "liveness":
                _HUNG[self._target] = self.name
            raise

    def _run_scenario(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from harness.cli.scenario import run_scenarios, write_scenario_report
        from scenarios import SCENARIOS

        scenario = SCENARIOS[self.scenario]
        [result], _secs = run_scenarios([scenario], self._target, self._workers)
        if result.status == "skip":
            pytest.skip(result.explanation)
        if not result.passed:
            d = write_scenario_report(scenario, result, target=self._target,
                                      workers=self._workers, directory=self._dir())
            self.user_properties.append(("ferry_report", str(d)))
            if result.status == "error":  # nothing was decided about the invariant
                raise FerryViolation("could-not-run", f"scenario {self.scenario} could not "
                                     f"run: {result.explanation}", d)
            self.user_properties.append(("ferry_invariant", result.invariant))
            raise FerryViolation(result.invariant, result.explanation, d)

    def _run_fuzz(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from harness.report.story import gate_message
        from harness.run.campaign import Campaign, CampaignConfig, write_report

        defaults = profiles.campaign_defaults()
        budget = self._opt("--ferry-budget", self.gate.budget, defaults["budget_s"])
        seed = self.config.getoption("hypothesis_seed", default=None)
        d = self._dir()
        cfg = CampaignConfig(
            target=self._target, workers=self._workers, budget_s=budget,
            seed=int(seed) if seed is not None else 0, report_dir=str(d),
            mode=self._opt("--ferry-mode", self.gate.mode, "stress"),
            steps_per_example=defaults["steps_per_example"],
            database=_database(self.config, d))
        outcome = Campaign(cfg).run()
        write_report(outcome)
        self.user_properties.append(("ferry_report", str(d)))
        report = outcome.report
        if outcome.verdict == "fail":
            # the top-ranked finding (safety first), its best reproduction, what the
            # example database replayed, then every other distinct invariant found
            invariant, message = gate_message(report)
            self.user_properties.append(("ferry_invariant", invariant))
            raise FerryViolation(invariant, message, d)
        if outcome.verdict == "interrupted":  # stopped before anything was decided
            raise FerryViolation("unknown", "the run was interrupted before it decided "
                                 "anything: not a pass", d)
        if outcome.verdict == "unknown":  # nothing was decided: not a pass
            why = "; ".join((report.unknown or ())[:3]) or \
                "no example completed within the budget"
            raise FerryViolation("unknown", f"the run decided nothing: {why}", d)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, FerryViolation):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"ferry {self.name} against {self._target}"


def _database(config: pytest.Config, report_dir: Path) -> Any:
    """``--ferry-example-db`` / ``$FERRY_EXAMPLE_DB``, else the database of a user's own
    Hypothesis profile, else ``REPORT_DIR/examples``."""
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.errors import ExampleDbError
    from harness.run.example_db import ENV_VAR, open_example_db

    spec = config.getoption("--ferry-example-db") or os.environ.get(ENV_VAR)
    default = str(report_dir / "examples")
    if spec:
        try:
            return open_example_db(spec, default)
        except ExampleDbError as exc:
            raise pytest.UsageError(f"--ferry-example-db: {exc}") from None
    if profiles.current() not in (*profiles.PROFILES, "default", "ci"):
        return settings.default.database
    return DirectoryBasedExampleDatabase(default)


class FerryCollector(pytest.Collector):
    """A gate's items in a fixed order (so xdist workers collect the same list)."""

    def __init__(self, *, gate: FerryGate, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate = gate

    def collect(self) -> list[pytest.Item]:
        items: list[pytest.Item] = []
        if self.gate.scenarios and not self.config.getoption("--ferry-no-scenarios"):
            # lazy: this plugin loads in every pytest session; the harness only when used
            from scenarios import SCENARIOS

            for name in SCENARIOS:
                items.append(FerryItem.from_parent(self, name=f"scenario/{name}",
                                                   kind="scenario", scenario=name,
                                                   gate=self.gate))
        items.append(FerryItem.from_parent(self, name="fuzz", kind="fuzz", gate=self.gate))
        return items


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """``--ferry-target``: the session's collection gains the ``ferry`` collector, so its
    items are collected (and counted, selected, distributed) like any test file's."""
    report = yield
    target = collector.config.getoption("--ferry-target")
    if isinstance(collector, pytest.Session) and target and report.passed:
        report.result.append(FerryCollector.from_parent(
            collector, name="ferry", nodeid="ferry", gate=FerryGate(target)))
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """A :func:`ferry_gate` assigned in a test module becomes that module's gate collector."""
    if isinstance(obj, FerryGate):
        return FerryCollector.from_parent(collector, name=name, gate=obj)
    return None


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def ferry_clock() -> Any:
    """A shared millisecond clock (stop time; set it to a lease's exact boundary)."""
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.runtime.clock import SharedClock

    return SharedClock()


@pytest.fixture
def ferry_history() -> Any:
    """An empty history that ``ferry_race`` appends to and ``ferry_check`` judges."""
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.check.history import History

    return History()


@pytest.fixture
def ferry_workers(request: pytest.FixtureRequest, tmp_path: Path, ferry_clock: Any) -> Iterator[Any]:
    """A pool of worker processes, each with its own store on one temp WAL database.

    The target is ``--ferry-target`` (default ferry_core:LeaseStore), or
    ``@pytest.mark.ferry_target("mod:factory")`` on the test. Every worker is stopped after.
    """
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.runtime.client import WorkerPool
    from harness.runtime.target import DEFAULT_TARGET

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
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.runtime.client import PlannedCall

    def race(op: str, args: list[dict[str, Any]] | dict[str, Any] | None = None, *,
             agents: list[str] | None = None, k: int | None = None) -> list[Any]:
        k = k or (len(agents) if agents else len(args) if isinstance(args, list) else ferry_workers.size)
        if k > ferry_workers.size:
            raise ValueError(f"a race of {k} needs --ferry-workers >= {k}")
        arg_list = args if isinstance(args, list) else [dict(args or {}) for _ in range(k)]
        agent_list = agents or [f"agent-{i}" for i in range(k)]
        calls = [PlannedCall(slot=i, op=op, args=arg_list[i], agent=agent_list[i]) for i in range(k)]
        return ferry_workers.run(calls, ferry_history)

    return race


@pytest.fixture
def ferry_check() -> Callable[..., list[Any]]:
    """``ferry_check(history, strict=True, capabilities=None)``: run every checker on a
    history (a ``History``, or the path of a ``history.jsonl`` — from a report, ``crash``
    or ``harness.tools.recorder``); raise on a violation or an undecided object (``strict``) or
    return the violations. ``capabilities`` holds a partial target to what it has (default:
    a full protocol store)."""
    # lazy: this plugin loads in every pytest session; the harness only when used
    from harness.check.checker import judge_history
    from harness.check.history import History

    def check(history: Any, *, strict: bool = True, capabilities: Any = None) -> list[Any]:
        if isinstance(history, (str, Path)):
            history = History.from_jsonl(Path(history).read_text(encoding="utf-8"))
        found, unknown = judge_history(history, capabilities)
        if strict and (found or unknown):
            raise AssertionError("ferry: " + "; ".join([str(v) for v in found] + list(unknown)))
        return found

    return check


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ferry_target(spec): the store factory for ferry_workers")
    if hasattr(config, "workerinput") and config.getoption("--ferry-report-dir") is None:
        # xdist: every worker writes under its own root, so nothing is shared
        wid = config.workerinput.get("workerid", "gw")
        config.option.ferry_report_dir = str(config.rootpath / DEFAULT_REPORT_DIR / wid)
    os.environ.setdefault("FERRY_PYTEST", "1")
