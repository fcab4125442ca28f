"""The checks the :class:`harness.check.checker.Checker` composes, one concept per module.

Each module holds small :class:`harness.check.invariant.Invariant` classes: the fuzz
checks (``faults``, ``liveness``, ``holders``, ``linearizable``, ``tokens``, ``dag``,
``wal``, ``typed``, ``lost``) and the closing audit of a crash campaign (``crash_audit``).
"""
