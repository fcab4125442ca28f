"""``ferry-harness bench``: claim throughput, tail latency and fairness under contention.

One module per job: :mod:`.stats` (percentiles, Jain, the latency histogram),
:mod:`.machine` (what the numbers were measured on), :mod:`.ceiling` (the raw single-process
rate), :mod:`.targets` (which store, how it is opened), :mod:`.worker` (the draining process),
:mod:`.runner` (one run: dispatch, start the workers, collect, verify), :mod:`.matrix` (every
run, interleaved, and the goal check), :mod:`.report` (tables and report.md) and
:mod:`.plots` (PNGs, needs matplotlib). The command line is :mod:`ferry_harness.cli.bench`.

W worker processes (forked, one store each, as in production) wait at one barrier, then
each drains the same queue of N pre-dispatched tasks: ``poll_next`` then ``fulfill``,
until the queue is empty. The whole loop runs inside the worker; the controller only
dispatches the tasks beforehand, reads lock-free per-worker counters for the progress
display, and receives one ``WorkerResult`` per worker at the end (plain data over a pipe).

Per run it reports:

- ``claims_per_s``: claims / (barrier release -> last successful claim), all workers.
- ``lifecycles_per_s``: fulfilled tasks / (barrier release -> last fulfill returned).
- ``latency_ms`` {p50, p99, p999, max}: time to obtain a claim, from the first
  ``poll_next`` attempt until one returns a claim (so it includes the store's own busy
  waits and internal retries, and any lost attempts that returned None or a lock error).
- ``cas_miss_ratio``: lost claim attempts / all claim attempts. For ferry_core the bench
  reads the store's own claim counters (``LeaseStore.claim_stats``,
  ``cas_miss_source="store-cas-update"``): a CAS UPDATE
  that changed no row because another worker took the task first is a miss. For any
  other target it counts ``poll_next`` calls (``"poll-none"``): a call that returned None
  while the shared claim counter said tasks remained is a miss.
  ferry_core's one-statement claim (in ``poll_next``) picks under the write lock and cannot
  miss; it counts as an attempt, and a None from it (nothing ready) as ``claim_empty``.
- ``verified``: every task claimed and completed exactly once, from the workers' own
  records (and, for ferry_core, the database); a run that fails it makes the exit code 1.
- ``lifecycle_ratio``: lifecycles/s over ``raw_half``, half the ceiling (a lifecycle is at
  least two writes). ``--target A,B`` compares stores in one interleaved run.
- ``busy_errors``: StoreError (or sqlite3.OperationalError) raised because a lock
  stayed busy past the store's timeout; the call is retried.
- ``jain_fairness``: Jain's index (sum x)^2 / (n * sum x^2) over per-worker claim counts.
- ``wal_bytes``: size of the ``-wal`` file when the drain ended (connections still open);
  ``wal_bytes_max``: the largest size the controller saw while the run was going.

- ``lifecycles_per_cpu_s``: lifecycles per CPU-second of the workers (on a shared machine
  the wall-clock rate follows the CPU share the workers got; this follows the work).
- ``same_sql_ratio``: lifecycles/s over the same-SQL ceiling at the same worker count in
  the same repetition; ``vs_1_worker``: over the same variant's 1-worker run there.
  ``same_sql_p99_ms`` / ``same_sql_p999_ms``: the claim tail of that same-SQL sample, so a
  tail the machine puts on the bare statements (checkpoint fsyncs on a disk) is told apart
  from one the store adds.

``ceiling`` is a raw single-process rate on the same machine in the same invocation:
autocommit ``UPDATE … WHERE id=? AND status=…`` of one integer-keyed row per statement, the
same pragmas as ferry_core (WAL, synchronous=NORMAL), best of a few samples taken before
and after the matrix. ``ceiling.same_sql`` is the second ceiling, for ferry_core targets:
the statements of a ferry_core lifecycle as the store runs them (traced), replayed by W
bare ``sqlite3`` processes with SQLite's own busy handler, at every worker count of the
run, once per repetition (:func:`.ceiling.measure_same_sql`).
"""
