"""ferry's harness: race real worker processes on one SQLite WAL file, record every
operation, and check the history against the store protocol (PROTOCOL.md).

The names below are the public API; everything else may move between releases. They load
on first use (PEP 562), so ``import ferry_harness`` stays cheap in worker processes and in every
pytest session the plugin joins.

>>> from ferry_harness import Campaign, CampaignConfig
>>> outcome = Campaign(CampaignConfig(target="ferry_core:LeaseStore", budget_s=5)).run()  # doctest: +SKIP
>>> outcome.report.verdict, outcome.report.violations  # doctest: +SKIP
('pass', ())

Layers, lowest first (each imports only its own layer or lower ones; tests/test_layers.py):
``errors`` → ``check`` (pure) → ``runtime``, ``adapters`` → ``report`` → ``run`` →
``scenarios`` → ``tools`` → ``cli``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_WHERE = {
    # errors and exit codes
    "ExitCode": "ferry_harness.errors", "FerryHarnessError": "ferry_harness.errors",
    "UsageError": "ferry_harness.errors", "TargetError": "ferry_harness.errors",
    "HarnessError": "ferry_harness.errors",
    # judging a history
    "History": "ferry_harness.check.history", "Op": "ferry_harness.check.history",
    "ModelConfig": "ferry_harness.check.model",
    "Checker": "ferry_harness.check.checker", "Violation": "ferry_harness.check.checker",
    # driving a store
    "SharedClock": "ferry_harness.runtime.clock", "load_factory": "ferry_harness.runtime.target",
    "WorkerPool": "ferry_harness.runtime.client", "PlannedCall": "ferry_harness.runtime.client",
    # campaigns and gates
    "Campaign": "ferry_harness.run.campaign", "CampaignConfig": "ferry_harness.run.campaign",
    "ferry_gate": "ferry_harness.cli.pytest_plugin",
    # recording a store's calls in your own tests (then Checker / ferry-harness check)
    "Recorder": "ferry_harness.tools.recorder",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name == "FerryError":  # deprecated: FerryHarnessError (warns, see ferry_harness.errors)
        return getattr(importlib.import_module("ferry_harness.errors"), name)
    if name not in _WHERE:
        raise AttributeError(f"module 'ferry_harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # the next lookup is a plain attribute read
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
