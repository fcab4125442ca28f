"""The store contract's types (:mod:`ferry_harness.check.store`) say what ``ops.py`` says:
the same operations, the same arguments in the same order, and a ``Capability`` for every
capability name ferry knows."""

from __future__ import annotations

import inspect

import ferry_core
from ferry_harness.check import ops
from ferry_harness.check.store import DEFINED, LIFECYCLE, Capability, LeasingStore
from ferry_harness.runtime.calls import capabilities

# ops.PROTOCOL writes the caller's agent as "agent" (where the harness puts it)
AS_PROTOCOL_NAMES = {"agent": "agent_id"}


def _methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(LeasingStore, name))
            for name in dir(LeasingStore)
            if not name.startswith("_") and callable(getattr(LeasingStore, name))}


def _positional(sig: inspect.Signature) -> list[inspect.Parameter]:
    return [p for p in sig.parameters.values() if p.name != "self"
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def mismatches(methods: dict[str, inspect.Signature]) -> list[str]:
    out = [f"ops.py has {op!r}, the Protocol does not" for op in ops.PROTOCOL if op not in methods]
    out += [f"the Protocol has {m!r}, ops.py does not" for m in methods
            if m not in ops.PROTOCOL and m not in LIFECYCLE]
    for op, names in ops.PROTOCOL.items():
        if op not in methods:
            continue
        params = _positional(methods[op])
        want = [AS_PROTOCOL_NAMES.get(n, n) for n in names]
        got = [p.name for p in params]
        if got[:len(want)] != want:
            out.append(f"{op}: ops.py passes {want}, the Protocol takes {got}")
        out += [f"{op}: {p.name} is not passed by ferry, so it needs a default"
                for p in params[len(want):] if p.default is p.empty]
        keywords = [p.name for p in methods[op].parameters.values() if p.kind is p.KEYWORD_ONLY]
        if keywords != list(ops.DISPATCH_KWARGS if op == "dispatch" else ()):
            out.append(f"{op}: keywords {keywords} are not ops.py's")
    return out


def test_the_protocol_and_ops_py_name_the_same_operations_and_arguments():
    assert mismatches(_methods()) == []


def test_the_cross_check_fails_on_a_drifted_protocol():
    sigs = _methods()
    renamed = dict(sigs, claim=sigs["claim"].replace(parameters=[
        p.replace(name="task") if p.name == "task_id" else p
        for p in sigs["claim"].parameters.values()]))
    assert mismatches(renamed) == ["claim: ops.py passes ['task_id', 'agent_id'], the Protocol "
                                   "takes ['task', 'agent_id']"]
    missing = {k: v for k, v in sigs.items() if k != "sweep"}
    assert mismatches(missing) == ["ops.py has 'sweep', the Protocol does not"]
    extra = dict(sigs, purge=sigs["sweep"])
    assert mismatches(extra) == ["the Protocol has 'purge', ops.py does not"]


def test_ferry_core_has_every_method_in_the_protocols_order():
    for name, sig in _methods().items():
        mine = [p.name for p in _positional(sig)]
        theirs = [p.name for p in _positional(inspect.signature(getattr(ferry_core.LeaseStore, name)))]
        assert theirs[:len(mine)] == mine, (name, theirs, mine)


def test_every_capability_name_is_a_member_and_no_other():
    assert {c.value for c in Capability} == DEFINED
    assert DEFINED >= set(ops.PROTOCOL) | set(ops.FEATURES)


def test_a_capability_is_its_name():
    caps = capabilities(ferry_core.LeaseStore)  # detected from the class: every operation
    assert Capability.LEASE in caps and Capability.CLAIM in caps and Capability.DAG in caps
    assert str(Capability.WAL_FILE) == "wal-file" and Capability("queue-ttl") is Capability.QUEUE_TTL
    assert {str(c) for c in caps} <= DEFINED
