"""Typed refusals (PROTOCOL.md#error-classes). Every refusal is one of these, so callers can branch on class."""

from __future__ import annotations


class FerryError(Exception):
    """Base of every refusal a store raises."""


class NotFound(FerryError):
    """The task (or dependency) id does not exist."""


class PermissionDenied(FerryError):
    """The caller is not the agent this task is for, or not the agent that holds it."""


class WrongState(FerryError):
    """The task is not in the state the operation needs (e.g. not CLAIMED)."""


class LeaseExpired(FerryError):
    """The lease ended (t >= lease_expires_at); the expiry has been applied."""


class TokenRequired(FerryError):
    """A holder operation came without a claim token while strict_tokens is on."""


class InvalidToken(FerryError):
    """The token is not the task's current one (wrong, forged or retired)."""


class LimitExceeded(FerryError):
    """An extend or release limit was reached."""


class InvalidArgument(FerryError):
    """A bad argument: negative TTL, non-JSON payload, empty fail reason, ..."""


class StoreError(FerryError):
    """The database cannot be used: not SQLite, newer schema, unwritable, corrupt."""


REFUSALS: tuple[type[FerryError], ...] = (
    NotFound,
    PermissionDenied,
    WrongState,
    LeaseExpired,
    TokenRequired,
    InvalidToken,
    LimitExceeded,
    InvalidArgument,
    StoreError,
)
