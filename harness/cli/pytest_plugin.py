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

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ferry_harness.check.ops import CallArgs
from ferry_harness.check.rules import anchor_for
from ferry_harness.errors import FerryViolation
from ferry_harness.run import profiles

if TYPE_CHECKING:  # the campaign (Hypothesis) loads only for the commands that run it
    from ferry_harness.run.campaign import Progress, Snapshot

DEFAULT_REPORT_DIR = "ferry-reports"
DEFAULT_WORKERS = 4
#: seconds between progress lines of a running fuzz item on the terminal
PROGRESS_EVERY_S = 5.0

#: every setting: (command-line flag, ini name, help); the command line overrides the ini
#: file (``[tool.pytest.ini_options] ferry_target = "mypkg.store:make_store"``)
_OPTIONS: dict[str, tuple[str, str]] = {
    "target": ("--ferry-target", "add ferry's scenarios and a fuzz campaign against this store "
               "factory MODULE:FACTORY (also the target of the ferry_workers fixture)"),
    "budget": ("--ferry-budget", "fuzz campaign budget in seconds, finite and > 0 (default: the "
               "gate's, else from the Hypothesis profile; ferry-ci 30 s, ferry-dev 10 s, "
               "ferry-thorough 600 s)"),
    "workers": ("--ferry-workers", f"worker processes per race, at least 2 (default "
                f"{DEFAULT_WORKERS})"),
    "mode": ("--ferry-mode", "fuzz mode: stress (default) or schedule"),
    "seed": ("--ferry-seed", "fuzz seed, a whole number >= 0 (default: --hypothesis-seed, else "
             "a fresh random seed per session, printed in the header and the summary)"),
    "report_dir": ("--ferry-report-dir", f"write reports exactly here: DIR/fuzz and "
                   f"DIR/scenario/<name> (default: ./{DEFAULT_REPORT_DIR}/run-<UTC time>-"
                   f"seed<N>/ per session, ./{DEFAULT_REPORT_DIR}/latest linked to it)"),
    "example_db": ("--ferry-example-db", "where failing examples are kept and replayed first"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.run.example_db import ENV_VAR, SPEC_HELP

    group = parser.getgroup("ferry", "ferry: concurrency gate for SQLite-WAL leasing stores")
    metavars = {"target": "MODULE:FACTORY", "budget": "SECONDS", "workers": "N",
                "mode": "stress|schedule", "seed": "N", "report_dir": "DIR",
                "example_db": "SPEC"}
    for name, (flag, text) in _OPTIONS.items():
        if name == "example_db":
            text = (f"{text}: {SPEC_HELP}; also ${ENV_VAR}. redis:// shares them between CI "
                    f"runners (default: ./{DEFAULT_REPORT_DIR}/examples)")
        # values are checked in pytest_configure, the same way for the command line and
        # the ini file: a bad one is a usage error (exit 4, one line)
        group.addoption(flag, default=None, metavar=metavars[name], dest=f"ferry_{name}",
                        help=text)
        parser.addini(f"ferry_{name}", f"{text} (the {flag} option overrides it)", default=None)
    group.addoption("--ferry-no-scenarios", action="store_true", default=None,
                    dest="ferry_no_scenarios",
                    help="only the fuzz campaign, not the scenario suite")
    parser.addini("ferry_no_scenarios", "only the fuzz campaign (the --ferry-no-scenarios "
                  "option overrides it)", type="bool", default=False)


@dataclass(frozen=True)
class Settings:
    """The session's ferry settings, checked once (command line over ini file)."""

    target: str | None = None
    budget: float | None = None
    workers: int | None = None
    mode: str | None = None
    seed: int = 0
    seed_is_random: bool = False
    report_dir: str | None = None  # explicit: reports go exactly there
    example_db: str | None = None
    no_scenarios: bool = False


_SETTINGS = pytest.StashKey[Settings]()


def settings_of(config: pytest.Config) -> Settings:
    """The checked settings (parsed at configure time; defaults if ferry was not configured)."""
    return config.stash.get(_SETTINGS, None) or Settings()


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    """A setting's text and where it came from (the flag, or the ini name)."""
    flag = _OPTIONS[name][0]
    value = config.getoption(f"ferry_{name}", default=None)
    if value is not None:
        return value, flag
    value = config.getini(f"ferry_{name}")
    return (value.strip() or None if isinstance(value, str) else value), f"ferry_{name} (ini)"


def _parse_settings(config: pytest.Config) -> Settings:
    """Every ferry setting, checked: a bad one raises :class:`pytest.UsageError` (exit 4)."""
    import argparse

    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.cli.args import positive_int, positive_seconds, random_seed, seed

    def conv(name: str, fn: Callable[[str], Any]) -> Any:
        text, where = _raw(config, name)
        if text is None:
            return None
        try:
            return fn(str(text))
        except argparse.ArgumentTypeError as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None

    budget = conv("budget", positive_seconds)
    workers = conv("workers", positive_int)
    if workers is not None and workers < 2:
        raise pytest.UsageError(f"{_raw(config, 'workers')[1]}: a race needs at least 2 "
                                f"workers, got {workers}")
    mode = conv("mode", str)
    if mode is not None and mode not in ("stress", "schedule"):
        raise pytest.UsageError(f"{_raw(config, 'mode')[1]}: expected stress or schedule, "
                                f"got {mode!r}")
    fixed = conv("seed", seed)
    if _raw(config, "seed")[1] != "--ferry-seed":  # the ini's seed yields to Hypothesis's flag
        hyp = config.getoption("hypothesis_seed", default=None)
        if hyp is not None:
            try:
                fixed = seed(str(hyp))
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(f"--hypothesis-seed: {exc}") from None
    workerinput = getattr(config, "workerinput", None)
    if fixed is None and workerinput and "ferry_seed" in workerinput:
        fixed, is_random = int(workerinput["ferry_seed"]), bool(workerinput["ferry_seed_random"])
    else:
        is_random = fixed is None
    run_seed = random_seed() if fixed is None else fixed
    target = conv("target", str)
    if target is not None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from ferry_harness.errors import TargetError
        from ferry_harness.runtime.target import load_factory

        try:
            load_factory(target)
        except TargetError as exc:
            raise pytest.UsageError(f"{_raw(config, 'target')[1]}: {exc}") from None
    no_scen = config.getoption("ferry_no_scenarios", default=None)
    return Settings(target=target, budget=budget, workers=workers, mode=mode, seed=run_seed,
                    seed_is_random=is_random, report_dir=conv("report_dir", str),
                    example_db=conv("example_db", str),
                    no_scenarios=bool(config.getini("ferry_no_scenarios")
                                      if no_scen is None else no_scen))


_RUN_NAME = pytest.StashKey[str]()


def _run_name(config: pytest.Config) -> str:
    """This session's run directory name, fixed at first use (xdist workers are given the
    controller's)."""
    if _RUN_NAME not in config.stash:
        given = getattr(config, "workerinput", {}).get("ferry_run_name")
        if not given:
            # lazy: this plugin loads in every pytest session; the harness only when used
            from ferry_harness.report.paths import run_dir_name

            given = run_dir_name(settings_of(config).seed)
        config.stash[_RUN_NAME] = given
    return config.stash[_RUN_NAME]


def _report_root(config: pytest.Config) -> Path:
    """Where this session's reports go: the explicit directory, else this run's own
    ``ferry-reports/run-<UTC>-seed<N>/`` (created, with ``latest`` pointed at it, by the
    first item that writes)."""
    st = settings_of(config)
    if st.report_dir:
        return Path(st.report_dir)
    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.report.paths import make_run_dir

    root = make_run_dir(config.rootpath / DEFAULT_REPORT_DIR, _run_name(config))
    if hasattr(config, "workerinput"):  # xdist: every worker writes under its own root
        root = root / config.workerinput.get("workerid", "gw")
    return root


# what a failing item can name besides an invariant id: nothing decided, a scenario that
# could not stage its race, a target that does not load
NOT_INVARIANTS = frozenset({"unknown", "could-not-run", "target"})


# target -> the item in which it hung (per process: each xdist worker learns on its own)
_HUNG: dict[str, str] = {}


def _violation(invariant: str, message: str, report: Path | None) -> FerryViolation:
    """The item's failure, its message naming the section of the rule it broke."""
    anchor = anchor_for(invariant, message)
    if invariant not in NOT_INVARIANTS and anchor not in message:
        message = (f"{message} (see {anchor}; installed with ferry: "
                   f"ferry-harness protocol {anchor.partition('#')[2] or invariant})")
    return FerryViolation(invariant, message, report)


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
        value = getattr(settings_of(self.config), name)
        if value is not None:
            return value
        return gate_value if gate_value is not None else default

    @property
    def _workers(self) -> int:
        return int(self._opt("workers", self.gate.workers, DEFAULT_WORKERS))

    def _dir(self) -> Path:
        """``ROOT/fuzz`` or ``ROOT/scenario/<name>`` (the paths the README names)."""
        if self.gate.report_dir:
            root = Path(self.gate.report_dir)
            if hasattr(self.config, "workerinput"):
                root = root / self.config.workerinput.get("workerid", "gw")
        else:
            root = _report_root(self.config)
        return root.joinpath(*self.name.split("/"))

    def runtest(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from ferry_harness.errors import TargetError
        from ferry_harness.runtime.target import load_factory

        try:
            factory = load_factory(self._target)
        except TargetError as exc:
            raise _violation("target", str(exc), None) from None
        from ferry_harness.runtime.backend import POSTGRES, backend_of  # lazy: as above

        if self.kind == "scenario" and backend_of(factory) == POSTGRES:
            pytest.skip("the scenarios run SQLite targets only; a Postgres target is fuzzed "
                        "(PROTOCOL.md#postgres-targets)")
        hung = _HUNG.get(self._target)
        if hung is not None:  # every further run would only wait out the same hang
            raise _violation("liveness", f"not run: the target hung in {hung} (see that "
                                 "item's report); a hanging target fails the whole gate", None)
        from ferry_harness.errors import FerryHarnessError  # lazy: as above

        try:
            if self.kind == "scenario":
                self._run_scenario()
            else:
                self._run_fuzz()
        except FerryHarnessError as exc:  # a factory that raises in a worker: one line, no traceback
            raise _violation("target", str(exc), None) from None
        except FerryViolation as exc:
            if exc.invariant == "liveness":
                _HUNG[self._target] = self.name
            raise

    def _run_scenario(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from ferry_harness.cli.scenario import run_scenarios, write_scenario_report
        from ferry_scenarios import SCENARIOS

        scenario = SCENARIOS[self.scenario]
        [result], _secs = run_scenarios([scenario], self._target, self._workers)
        if result.status == "skip":
            pytest.skip(result.explanation)
        if not result.passed:
            d = write_scenario_report(scenario, result, target=self._target,
                                      workers=self._workers, directory=self._dir())
            self.user_properties.append(("ferry_report", str(d)))
            if result.status == "error":  # nothing was decided about the invariant
                raise _violation("could-not-run", f"scenario {self.scenario} could not "
                                     f"run: {result.explanation}", d)
            self.user_properties.append(("ferry_invariant", result.invariant))
            raise _violation(result.invariant, result.explanation, d)

    def _run_fuzz(self) -> None:
        # lazy: this plugin loads in every pytest session; the harness only when used
        from ferry_harness.report.story import gate_message
        from ferry_harness.run.campaign import Campaign, CampaignConfig, write_report

        st = settings_of(self.config)
        defaults = profiles.campaign_defaults()
        budget = self._opt("budget", self.gate.budget, defaults["budget_s"])
        d = self._dir()
        cfg = CampaignConfig(
            target=self._target, workers=self._workers, budget_s=budget,
            seed=st.seed, report_dir=str(d),
            mode=self._opt("mode", self.gate.mode, "stress"),
            steps_per_example=defaults["steps_per_example"],
            database=_database(self.config, d, bool(st.report_dir or self.gate.report_dir)))
        outcome = Campaign(cfg, progress=self._progress(budget)).run()
        write_report(outcome)
        self.user_properties.append(("ferry_report", str(d)))
        report = outcome.report
        summary = _pass_summary(self.nodeid, report, st, d)
        self.user_properties.append(("ferry_summary", summary))
        # --hypothesis-show-statistics: ferry's own numbers for this item, not an empty line
        self.hypothesis_statistics = f"{self.nodeid}:\n\n  - {summary}"
        if outcome.verdict == "fail":
            # the top-ranked finding (safety first), its best reproduction, what the
            # example database replayed, then every other distinct invariant found
            invariant, message = gate_message(report)
            self.user_properties.append(("ferry_invariant", invariant))
            raise _violation(invariant, f"{message}; seed {st.seed}", d)
        if outcome.verdict == "interrupted":  # stopped before anything was decided
            raise _violation("unknown", "the run was interrupted before it decided "
                                 "anything: not a pass", d)
        if outcome.verdict == "unknown":  # nothing was decided: not a pass
            why = "; ".join((report.unknown or ())[:3]) or \
                "no example completed within the budget"
            raise _violation("unknown", f"the run decided nothing: {why}", d)

    def _progress(self, budget: float | None) -> Progress:
        """A line on the terminal when the campaign starts and every
        :data:`PROGRESS_EVERY_S` after (not with ``-q`` or under xdist, which has no
        terminal in its workers)."""
        tr = self.config.pluginmanager.getplugin("terminalreporter")
        if tr is None or self.config.get_verbosity() < 0 or hasattr(self.config, "workerinput"):
            return lambda _s: None
        capman = self.config.pluginmanager.getplugin("capturemanager")
        last = [-math.inf]
        of = f"/{budget:.0f}s" if budget else "s"

        def show(s: Snapshot) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S:
                return
            last[0] = now
            # the test's output is being captured: write past it, as live logging does
            with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
                tr.write_line(f"ferry: {self.nodeid} {s['phase']} {s['elapsed']:.0f}{of} "
                              f"examples={s['examples']} race_rounds={s['race_rounds']} "
                              f"ops={s['ops']} violations={s['violations']}")
        return show

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, FerryViolation):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"ferry {self.name} against {self._target}"


def _database(config: pytest.Config, report_dir: Path, explicit: bool) -> Any:
    """``--ferry-example-db`` / ``$FERRY_EXAMPLE_DB``, else the database of a user's own
    Hypothesis profile, else ``REPORT_DIR/examples`` for an explicit report directory and
    ``ferry-reports/examples`` (kept across the per-run directories) by default."""
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.errors import ExampleDbError
    from ferry_harness.run.example_db import ENV_VAR, open_example_db

    spec = settings_of(config).example_db or os.environ.get(ENV_VAR)
    default = str(report_dir / "examples" if explicit
                  else config.rootpath / DEFAULT_REPORT_DIR / "examples")
    if spec:
        try:
            return open_example_db(spec, default)
        except ExampleDbError as exc:
            raise pytest.UsageError(f"--ferry-example-db: {exc}") from None
    if profiles.current() not in (*profiles.PROFILES, "default", "ci"):
        return settings.default.database
    return DirectoryBasedExampleDatabase(default)


def _pass_summary(nodeid: str, report: Any, st: Settings, directory: Path) -> str:
    """One line per fuzz item for the session's end: what was explored and checked."""
    stats = report.stats
    inv = report.invariants or {}
    checked = [k for k, v in inv.items() if v.startswith("checked")]
    skipped = [k for k, v in inv.items() if v.startswith("skipped")]
    idle = [k for k, v in inv.items() if not v.startswith(("checked", "skipped"))]
    parts = [f"{nodeid}: {report.verdict.upper()} — {stats.examples} examples, "
             f"{stats.race_rounds} race rounds, {stats.ops} operations in {stats.seconds:.1f}s",
             f"invariants {len(checked)} checked"
             + (f", {len(skipped)} skipped ({', '.join(skipped)})" if skipped else "")
             + (f", {len(idle)} not exercised ({', '.join(idle)})" if idle else ""),
             f"seed {st.seed}" + (" (random; --ferry-seed fixes it)" if st.seed_is_random else ""),
             f"report {directory}"]
    return "; ".join(parts)


class FerryCollector(pytest.Collector):
    """A gate's items in a fixed order (so xdist workers collect the same list)."""

    def __init__(self, *, gate: FerryGate, **kw: Any) -> None:
        super().__init__(**kw)
        self.gate = gate

    def collect(self) -> list[pytest.Item]:
        items: list[pytest.Item] = []
        self._check_gate()
        if self.gate.scenarios and not settings_of(self.config).no_scenarios:
            # lazy: this plugin loads in every pytest session; the harness only when used
            from ferry_scenarios import SCENARIOS

            for name in SCENARIOS:
                items.append(FerryItem.from_parent(self, name=f"scenario/{name}",
                                                   kind="scenario", scenario=name,
                                                   gate=self.gate))
        items.append(FerryItem.from_parent(self, name="fuzz", kind="fuzz", gate=self.gate))
        return items

    def _check_gate(self) -> None:
        """A gate's own target and options, checked as the command line's are: a bad one
        is one line (a collection error naming the gate), not a failing item per scenario."""
        import argparse

        # lazy: this plugin loads in every pytest session; the harness only when used
        from ferry_harness.cli.args import positive_int, positive_seconds
        from ferry_harness.errors import TargetError
        from ferry_harness.runtime.target import load_factory

        g = self.gate
        try:
            load_factory(g.target)
            if g.budget is not None:
                positive_seconds(str(g.budget))
            if g.workers is not None and positive_int(str(g.workers)) < 2:
                raise argparse.ArgumentTypeError(f"a race needs at least 2 workers, got {g.workers}")
            if g.mode not in (None, "stress", "schedule"):
                raise argparse.ArgumentTypeError(f"mode must be stress or schedule, got {g.mode!r}")
        except (TargetError, argparse.ArgumentTypeError) as exc:
            raise self.CollectError(f"{g!r}: {exc}") from None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """``--ferry-target``: the session's collection gains the ``ferry`` collector, so its
    items are collected (and counted, selected, distributed) like any test file's."""
    report = yield
    target = settings_of(collector.config).target
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
    from ferry_harness.runtime.clock import SharedClock

    return SharedClock()


@pytest.fixture
def ferry_history() -> Any:
    """An empty history that ``ferry_race`` appends to and ``ferry_check`` judges."""
    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.check.history import History

    return History()


@pytest.fixture
def ferry_workers(request: pytest.FixtureRequest, tmp_path: Path, ferry_clock: Any) -> Iterator[Any]:
    """A pool of worker processes, each with its own store on one temp WAL database.

    The target is ``--ferry-target`` (default ferry_core:LeaseStore), or
    ``@pytest.mark.ferry_target("mod:factory")`` on the test; ``--ferry-workers`` of them
    (default 4). Every worker is stopped after.
    """
    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.runtime.client import WorkerPool
    from ferry_harness.runtime.target import DEFAULT_TARGET

    marker = request.node.get_closest_marker("ferry_target")
    st = settings_of(request.config)
    target = (marker.args[0] if marker else None) or st.target or DEFAULT_TARGET
    pool = WorkerPool(target, ferry_clock, st.workers or DEFAULT_WORKERS)
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
    from ferry_harness.runtime.client import PlannedCall

    def race(op: str, args: list[CallArgs] | CallArgs | None = None, *,
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
    or ``ferry_harness.tools.recorder``); raise on a violation or an undecided object (``strict``) or
    return the violations. ``capabilities`` holds a partial target to what it has (default:
    a full protocol store)."""
    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.check.checker import judge_history
    from ferry_harness.check.history import History

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
    config.stash[_SETTINGS] = _parse_settings(config)  # a bad value: UsageError, exit 4
    config.stash[_SUMMARIES] = _CURRENT["summaries"] = []
    os.environ.setdefault("FERRY_PYTEST", "1")


_SUMMARIES = pytest.StashKey[list[tuple[str, str, str]]]()  # (kind, outcome, summary)
# the running session's summary list (pytest_runtest_logreport is given no config)
_CURRENT: dict[str, Any] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker uses the controller's seed and run directory."""
    st = settings_of(node.config)
    node.workerinput["ferry_seed"] = st.seed
    node.workerinput["ferry_seed_random"] = st.seed_is_random
    node.workerinput["ferry_run_name"] = _run_name(node.config)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A ``--ferry-target`` whose factory raises is a usage error before anything runs: its
    store is opened once in two worker processes (never in this process)."""
    config = session.config
    st = settings_of(config)
    if hasattr(config, "workerinput"):
        return
    _check_example_db(config)
    if not st.target or config.option.collectonly:
        return
    import tempfile

    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.errors import FerryHarnessError
    from ferry_harness.runtime.backend import POSTGRES, backend_of
    from ferry_harness.runtime.client import WorkerPool
    from ferry_harness.runtime.clock import SharedClock
    from ferry_harness.runtime.target import load_factory

    try:
        if backend_of(load_factory(st.target)) == POSTGRES:
            return  # its factory needs a server: the fuzz item opens it (and says why not)
    except FerryHarnessError as exc:
        raise pytest.UsageError(f"{_raw(config, 'target')[1]} {st.target}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="ferry-probe-") as tmp:
        try:
            with WorkerPool(st.target, SharedClock(), 2) as pool:
                pool.open(os.path.join(tmp, "probe.db"))
        except FerryHarnessError as exc:
            raise pytest.UsageError(f"{_raw(config, 'target')[1]} {st.target}: {exc}") from None


def _check_example_db(config: pytest.Config) -> None:
    """A ``--ferry-example-db`` that cannot be opened is a usage error before anything runs
    (``github:`` specs are read when used, not here: no network at start)."""
    import tempfile

    # lazy: this plugin loads in every pytest session; the harness only when used
    from ferry_harness.errors import ExampleDbError
    from ferry_harness.run.example_db import ENV_VAR, open_example_db

    text, where = _raw(config, "example_db")
    if text is None and os.environ.get(ENV_VAR):
        text, where = os.environ[ENV_VAR], f"${ENV_VAR}"
    if not text or str(text).startswith("github:"):
        return
    with tempfile.TemporaryDirectory(prefix="ferry-db-") as tmp:
        try:
            open_example_db(str(text), os.path.join(tmp, "examples"))
        except ExampleDbError as exc:
            raise pytest.UsageError(f"{where}: {exc}") from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    st = settings_of(config)
    if not st.target:
        return None
    how = " (random; --ferry-seed fixes it)" if st.seed_is_random else ""
    return [f"ferry: target {st.target}, seed {st.seed}{how}"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect what every ferry item did (also from xdist workers: user_properties travel)."""
    props = dict(report.user_properties)
    kind = props.get("ferry_kind")
    if kind is None or not (report.when == "call" or (report.when == "setup" and report.skipped)):
        return
    summaries = _CURRENT.get("summaries")
    if summaries is not None:
        summaries.append((kind, report.outcome, str(props.get("ferry_summary", ""))))




def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The pass summary: per fuzz item what was explored and checked, and the scenarios."""
    rows = config.stash.get(_SUMMARIES, [])
    if not rows:
        return
    tr = terminalreporter
    tr.section("ferry")
    for kind, _outcome, text in rows:
        if kind == "fuzz" and text:
            tr.write_line(text)
    scen = [o for k, o, _t in rows if k == "scenario"]
    if scen:
        counts = ", ".join(f"{scen.count(o)} {o}" for o in ("passed", "failed", "skipped")
                           if scen.count(o))
        tr.write_line(f"scenarios: {counts} (of {len(scen)})")
    st = settings_of(config)
    if st.seed_is_random:
        tr.write_line(f"seed {st.seed} was drawn at random: --ferry-seed {st.seed} explores the "
                      "same examples again")
