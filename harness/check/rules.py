"""Every rule that can file a finding, traced to the PROTOCOL.md sentence it enforces.

A *rule* is one place in ``harness/check/`` that binds an invariant id to a message (a
:class:`~ferry_harness.check.invariant.Violation`, a model verdict, a helper that builds one).
Each row names the module, the invariant id, a literal *fragment* of the message that
identifies the rule, the PROTOCOL.md section (its GitHub anchor) and a sentence of that
section, quoted as written (Markdown emphasis, code marks and link targets left out).
``tests/harness/check/test_rules.py`` walks the code with ``ast``: a message without a
row, a row whose anchor is no heading, or a sentence its section does not contain fails
the suite. :func:`anchor_for` is how a finding says where its rule is explained (its ``protocol``).

The rows match messages, not call sites, so the checks need no extra argument; a
*relay* (a row with an empty fragment) passes on a finding whose own rule is elsewhere
(the model's verdicts, a scenario's expectation).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One rule: where it is, what it files, and the protocol sentence behind it."""

    module: str  # path under harness/check/, e.g. "model.py", "invariants/lost.py"
    invariant: str  # the invariant id it files (PROTOCOL.md#invariants)
    fragment: str  # literal text of its message that identifies it ("" for a relay)
    anchor: str  # PROTOCOL.md heading, as GitHub anchors it
    sentence: str  # what that section says, verbatim


M, L, D, H, F, W = ("model.py", "invariants/lost.py", "invariants/dag.py",
                    "invariants/holders.py", "invariants/faults.py", "invariants/wal.py")
CA, CR = "invariants/crash_audit.py", "invariants/crash_rounds.py"

# sentences quoted by several rows
EXISTS = "Every dispatched task exists in exactly one valid state; final states never change"
KEPT = "an accepted result is kept and shown"
ORDER = "Every concurrent history can be put in one sequential order that the model of this page accepts."
NO_REFUSAL = ("a refusal of a poll, a claim (other than NotFound), a lock call or a read of an "
              "existing task is reported as a violation.")
ONE_WINNER = "of N processes racing to claim one ready task, exactly one wins"
NOT_EMPTY = "a poll or claim does not come back empty while a task is certainly ready for that caller"
HALF_OPEN = "the holder wins at expires - 1 and loses at expires"
RECLAIM = "a reclaimer loses at expires - 1 and can win at expires"
DEAD_HOLDER = "a killed or frozen holder's lease ends on time."
TWICE = ("so that issuing the same token twice, for any task, ever, is impossible rather "
         "than unlikely.")
RETIRED = "a retired token (released, expired, finished) is never accepted again"
NO_TOKEN_IN_VIEW = "A view never carries a token, under any field name, in any nested value"
FLAGGED = "a view of an out-of-date row says is_logically_expired"
COMPARED = "ferry compares the fields it can predict"
GUARD_OK = ("the genuine holder with the live token, inside its lease and its limits, is not "
            "refused; limits are enforced.")
ONLY_HOLDER = "Only the live holder changes a claimed task."
BAD_ARG = "InvalidArgument | a bad argument: non-positive TTL, payload that is not JSON, blank fail reason"
SALVAGE_KEPT = "Entries are never removed or changed, whatever happens to the task afterwards."
LOCK_ONE = "A daemon lock has at most one unexpired owner at any instant"
LOCK_EDGE = ("For a lock ending at E: at E - 1 another owner's acquire_lock returns False and "
             "lock_holder names the owner; at E and later another owner gets it")
TRUNCATE = ("The -wal file is 0 bytes right after checkpoint(\"TRUNCATE\") when no other "
            "process is reading")
SNAPSHOT = "one open read snapshot stops checkpoints from resetting the WAL, which then grows without bound."
IDLE = "A poll_next with nothing to do, and every read, append nothing to the -wal."
INTEGRITY = ("PRAGMA integrity_check (run in a separate process) says ok after faults (killed "
             "or frozen workers) and at the end of every example.")

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- the model: claims
    Rule(M, "lease-half-open", "but the claim returned nothing", "lease-half-open", RECLAIM),
    Rule(M, "no-lost-task", "but the claim returned nothing", "no-lost-task", NOT_EMPTY),
    Rule(M, "single-winner", "holds it until", "single-winner",
         "a task is not claimed again while its lease runs."),
    Rule(M, "no-lost-task", "claimed a ", "readiness", "its status is SUBMITTED"),
    Rule(M, "lease-half-open", "but its queue window ended", "the-queue-window-is-half-open",
         "from queued_at + queue_ttl_ms on it is TIMED_OUT."),
    Rule(M, "holder-guard", "which is for", "readiness", "target_agent is None or equals A."),
    Rule(M, "linearizable", "claim returned task", "claim", "Tries to take exactly the named task"),
    Rule(M, "linearizable", "says claimed_at=", "claim-fields",
         "now at the claim (from the injected clock)"),
    Rule(M, "lease-half-open", "expected claimed_at + exec_ttl_ms", "lease-half-open",
         "a claim's lease_expires_at is claimed_at + exec_ttl_ms"),
    Rule(M, "linearizable", "(attempt counts claims)", "claim-fields",
         "this claim's number for the task (1 for the first claim)"),
    Rule(M, "token-unique", "a claim came back without a token", "claim-fields",
         "the new token: the caller's only proof of holding the task"),
    Rule(M, "token-unique", "issued twice for", "claim", TWICE),
    Rule(M, "token-unique", "… issued twice", "claim", TWICE),
    # ------------------------------------------------------- the model: holder operations
    Rule(M, "lease-half-open", "although the lease of token", "lease-half-open", HALF_OPEN),
    Rule(M, "token-unique", "accepted a retired token", "token-unique", RETIRED),
    Rule(M, "no-lost-task", "in terminal state", "task-states",
         "Nothing ever leaves COMPLETED, FAILED or TIMED_OUT"),
    Rule(M, "holder-guard", "accepted on task", "the-holder-guard",
         "the task is CLAIMED, else WrongState;"),
    Rule(M, "holder-guard", "(PermissionDenied expected)", "the-holder-guard",
         "when the task has a target_agent, the caller is that agent, else PermissionDenied;"),
    Rule(M, "holder-guard", "the store declares holder-binding", "declaring-holder-binding",
         "An accepted call from another agent is then a holder-guard violation."),
    Rule(M, "holder-guard", "(only the current token may change a claimed task)",
         "holder-guard", ONLY_HOLDER),
    Rule(M, "typed-errors", "an invalid argument is refused with InvalidArgument and changes nothing",
         "error-classes", BAD_ARG),
    Rule(M, "lease-half-open", "(half-open: the holder still wins at expires-1)",
         "lease-half-open", HALF_OPEN),
    Rule(M, "lease-half-open", "(its holder check and its reaper disagree)", "lease-conventions",
         "A store that declares lease-closed but reaps at lease_expires_at (its holder check "
         "and its reaper disagree) is reported under lease-half-open or single-winner"),
    Rule(M, "holder-guard", "every check of PROTOCOL.md#the-holder-guard passes", "holder-guard",
         GUARD_OK),
    Rule(M, "lease-half-open", "so LeaseExpired or WrongState comes first", "at-the-boundaries",
         "refused: LeaseExpired (or WrongState / InvalidToken if the expiry was already applied)"),
    Rule(M, "refusal-order", "the store declares refusal-order", "declaring-refusal-order",
         "every refusal names the first failing check in the reference order"),
    Rule(M, "lease-half-open", "as if the lease were still live", "at-the-boundaries",
         "refused: LeaseExpired (or WrongState / InvalidToken if the expiry was already applied)"),
    Rule(M, "refusal-class", "(a refusal must name one of them)", "refusal-class",
         "When a call must be refused, the class it is refused with names a check that really fails"),
    Rule(M, "holder-guard", "must be refused with LimitExceeded", "holder-guard", GUARD_OK),
    Rule(M, "lease-half-open", "extend returned", "leases-are-half-open",
         "An extend at now moves the end to now + exec_ttl_ms (not the old end plus the TTL)."),
    # ------------------------------------------------------------- the model: reads
    Rule(M, "lease-half-open", "shows a live lease until", "lease-half-open", FLAGGED),
    Rule(M, "lease-half-open", "shows SUBMITTED without is_logically_expired", "taskview-fields",
         "the row says SUBMITTED and now >= queued_at + queue_ttl_ms."),
    Rule(M, "lease-half-open", "the boundary the store reaps at differs", "lease-conventions",
         "the holder is refused exactly when somebody else may take the task."),
    Rule(M, "no-lost-task", ", the model says", "no-lost-task", EXISTS),
    Rule(M, "linearizable", ", the model says", "linearizable", ORDER),
    Rule(M, "no-lost-task", "(a refused call changed it, or the store counts it differently)",
         "no-lost-task", "counters change only with accepted calls."),
    Rule(M, "token-unique", "a read API exposed the claim token", "taskview-fields",
         NO_TOKEN_IN_VIEW),
    Rule(M, "no-lost-task", "accepted was", "no-lost-task", KEPT),
    Rule(M, "single-winner", "shows holder", "taskview-fields", COMPARED),
    Rule(M, "no-lost-task", "lost a ", "salvage-entries", SALVAGE_KEPT),
    Rule(M, "no-lost-task", "in append order", "salvage-entries",
         "A refused call adds no entry, except a late result."),
    # ---------------------------------------------------- the model: every other step
    Rule(M, "typed-errors", "an invalid argument is refused with InvalidArgument", "dispatch",
         "InvalidArgument for a TTL or max_attempts that is not a positive integer"),
    Rule(M, "token-unique", "was issued twice", "token-unique", "task ids are never reused"),
    Rule(M, "linearizable", "before its dispatch", "linearizable", ORDER),
    Rule(M, "no-lost-task", "claim says task", "no-lost-task", EXISTS),
    Rule(M, "linearizable", "claim refused with", "operations", NO_REFUSAL),
    Rule(M, "no-lost-task", "is gone", "no-lost-task", EXISTS),
    Rule(M, "no-lost-task", "refused:", "operations", NO_REFUSAL),
    Rule(M, "linearizable", "indeterminate claim of a task that is not ready", "linearizable",
         ORDER),
    Rule(M, "linearizable", "indeterminate op that could not have succeeded", "linearizable",
         ORDER),
    Rule(M, "lock-exclusive", "refused with", "operations", NO_REFUSAL),
    Rule(M, "lock-exclusive", "acquired lock", "lock-exclusive", LOCK_ONE),
    Rule(M, "lease-half-open", "acquired lock", "at-the-boundaries", LOCK_EDGE),
    Rule(M, "lock-exclusive", "was refused lock", "acquire_lock",
         "returns True when it is free (never taken, released, or expires_at <= now) or "
         "already held by owner"),
    Rule(M, "lease-half-open", "was refused lock", "at-the-boundaries", LOCK_EDGE),
    Rule(M, "lock-exclusive", "release_lock(", "release_lock",
         "Drops the lock and returns True if owner holds it now (unexpired). When another "
         "owner holds it, or nobody has ever held it, returns False and writes nothing."),
    Rule(M, "lock-exclusive", "lock_holder(", "lock_holder",
         "The owner of the lock if its expires_at > now, else None."),
    Rule(M, "lease-half-open", "lock_holder(", "at-the-boundaries", LOCK_EDGE),
    Rule(M, "linearizable", "dispatch refused with", "operations", NO_REFUSAL),
    Rule(M, "dag-order", "dispatch accepted unknown dependencies",
         "dependencies-and-the-failure-cascade",
         "dispatch refuses a dependency id that does not exist with NotFound."),
    Rule(M, "no-lost-task", "returned nothing at t=", "no-lost-task", NOT_EMPTY),
    Rule(M, "dag-order", "not ready", "dependencies-and-the-failure-cascade",
         "no claim or poll may return it earlier."),
    Rule(M, "single-winner", "not ready", "single-winner", ONE_WINNER),
    Rule(M, "linearizable", "oldest ready is", "poll_next",
         "smallest queued_at, ties broken by dispatch order."),
    Rule(M, "dag-order", "claimed before its dependencies completed", "dag-order",
         "A task can be claimed only once every one of its dependencies is COMPLETED"),
    Rule(M, "no-lost-task", "returned nothing but it is ready", "claim",
         "it succeeds only when the task is ready for agent_id"),
    # ----------------------------------------------------------------- during a run
    Rule(L, "no-lost-task", "inspect() lists task", "inspect", "Every task, each exactly once"),
    Rule(L, "no-lost-task", "not a state of PROTOCOL.md#task-states", "no-lost-task", EXISTS),
    Rule(L, "no-lost-task", "is missing from inspect()", "inspect", "Every task, each exactly once"),
    Rule(L, "no-lost-task", "but inspect() shows", "no-lost-task", KEPT),
    Rule(L, "no-lost-task", "was ready for it", "no-lost-task", NOT_EMPTY),
    Rule(D, "dag-order", "before its dependency", "dag-order",
         "A task can be claimed only once every one of its dependencies is COMPLETED"),
    Rule(D, "dag-order", "the failure must cascade", "dependencies-and-the-failure-cascade",
         "it is materialised no later than the next sweep()."),
    Rule(H, "single-winner", "has two live holders", "single-winner", ONE_WINNER),
    Rule(H, "token-unique", "read APIs never carry a token", "taskview-fields", NO_TOKEN_IN_VIEW),
    Rule(H, "token-unique", "issued twice", "claim", TWICE),
    Rule("invariants/typed.py", "typed-errors", "error class", "typed-errors",
         "Every refusal is one of the error classes; any other exception is a finding."),
    Rule("invariants/liveness.py", "liveness", "did not return within", "liveness",
         "Every call returns or raises within bounded time"),
    Rule("invariants/liveness.py", "liveness", "with no fault injected", "liveness",
         "no worker process dies unless ferry killed it."),
    Rule(W, "idle-no-write", "grew the -wal file", "idle-no-write", IDLE),
    Rule(W, "idle-no-write", "appended to the WAL", "idle-no-write", IDLE),
    Rule(W, "idle-no-write", "assigned a transaction id", "postgres-targets",
         "An idle poll and every read assign no transaction id."),
    Rule(W, "wal-bounded", "was left idle in transaction", "postgres-targets",
         "No connection is left idle in transaction between calls."),
    Rule(W, "wal-bounded", "still waiting", "sqlite-rules", SNAPSHOT),
    Rule(W, "wal-bounded", "with no reader it must empty the -wal", "wal-bounded", TRUNCATE),
    Rule(W, "wal-bounded", "is still open", "wal-bounded", TRUNCATE),
    Rule(W, "wal-bounded", "over the bound of", "wal-bounded",
         "stays under 64 MiB however long the store runs its ordinary workload."),
    # ------------------------------------------------------------- after faults
    Rule(F, "integrity", "PRAGMA integrity_check after faults", "integrity", INTEGRITY),
    Rule(F, "lease-half-open", "a zombie's result must be refused", "lease-half-open",
         DEAD_HOLDER),
    Rule(F, "lease-half-open", "still held", "lease-half-open", RECLAIM),
    Rule(F, "single-winner", "exactly one may", "single-winner", ONE_WINNER),
    Rule(F, "lease-half-open", "a dead holder's lease must end at lease_expires_at", "lease-half-open",
         DEAD_HOLDER),
    # ------------------------------------------------------ the crash campaign
    Rule(CA, "no-lost-task", "inspect() failed", "operations", NO_REFUSAL),
    Rule(CA, "no-lost-task", "inspect() lists task", "inspect", "Every task, each exactly once"),
    Rule(CA, "no-lost-task", "was completed", "no-lost-task", EXISTS),
    Rule(CA, "no-lost-task", "is missing from the store", "no-lost-task", EXISTS),
    Rule(CA, "no-lost-task", ", not COMPLETED", "no-lost-task", KEPT),
    Rule(CA, "no-lost-task", "accepted result", "no-lost-task", KEPT),
    Rule(CA, "no-lost-task", "which no fulfill (accepted or killed) delivered", "no-lost-task",
         KEPT),
    Rule(CA, "token-unique", "claim token(s) issued twice", "claim", TWICE),
    Rule(CA, "integrity", "PRAGMA integrity_check", "integrity", INTEGRITY),
    Rule(CA, "wal-bounded", "-wal left at", "wal-bounded", TRUNCATE),
    Rule(CA, "wal-bounded", "was left idle in transaction", "postgres-targets",
         "No connection is left idle in transaction between calls."),
    Rule(CR, "no-lost-task", "dispatch refused", "no-lost-task", EXISTS),
    Rule(CR, "single-winner", "pollers in one round", "single-winner", ONE_WINNER),
    Rule(CR, "holder-guard", "the holder's fulfill of task", "holder-guard", GUARD_OK),
    Rule(CR, "no-lost-task", "failed:", "operations", NO_REFUSAL),
    Rule(CR, "no-lost-task", "which holds no claim on it", "no-lost-task", EXISTS),
    Rule(CR, "no-lost-task", "after a worker was killed", "no-lost-task", EXISTS),
    Rule(CR, "lease-half-open", "but its lease_expires_at is", "lease-half-open",
         "a claim's lease_expires_at is claimed_at + exec_ttl_ms"),
    Rule(CR, "lease-half-open", "before its dead holder's lease ends", "lease-half-open", RECLAIM),
    Rule(CR, "single-winner", "rescuers reclaimed task", "single-winner", ONE_WINNER),
    Rule(CR, "lease-half-open", "but it could only be reclaimed at", "lease-half-open", DEAD_HOLDER),
    Rule(CR, "lease-half-open", ": lost", "lease-half-open", DEAD_HOLDER),
    Rule(CR, "holder-guard", "the rescuer's fulfill of task", "holder-guard", GUARD_OK),
    # ------------------------------------------------------------------- relays
    Rule("invariants/linearizable.py", "linearizable", "", "linearizable", ORDER),
    Rule("invariants/expectations.py", "*", "", "invariants",
         "Every finding in a ferry report is filed under one of these ids"),
)


def rule_for(invariant: str, message: str) -> Rule | None:
    """The row that explains a finding: the longest fragment of its invariant's rows that
    its message contains (relays never match: their findings are explained elsewhere)."""
    best: Rule | None = None
    for r in RULES:
        if (r.invariant == invariant and r.fragment and r.fragment in message
                and (best is None or len(r.fragment) > len(best.fragment))):
            best = r
    return best


def anchor_for(invariant: str, message: str) -> str:
    """Where the rule behind a finding is explained (``PROTOCOL.md#`` and its anchor), else
    the invariant's own section."""
    r = rule_for(invariant, message)
    return f"PROTOCOL.md#{r.anchor if r else invariant}"
