"""The checks the :class:`ferry_harness.check.checker.Checker` composes, one concept per module.

Each module holds small :class:`ferry_harness.check.invariant.Invariant` classes: the fuzz
checks (``faults``, ``liveness``, ``holders``, ``linearizable``, ``dag``, ``wal``,
``typed``, ``lost``), a crash campaign's in-round judgements (``crash_rounds``) and its
closing audit (``crash_audit``), and a scenario's own expectations (``expectations``).
"""
