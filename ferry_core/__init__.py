"""ferry_core: a compact leasing store on SQLite WAL (the reference target of ferry), and the
same store on a PostgreSQL schema (``PgLeaseStore``, needs psycopg 3)."""

from __future__ import annotations

from . import errors
from .clock import Clock, ManualClock, SystemClock
from .errors import (
    FerryError,
    InvalidArgument,
    InvalidToken,
    LeaseExpired,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    StoreError,
    TokenRequired,
    WrongState,
)
from .pgstore import PgLeaseStore
from .schema import SCHEMA_VERSION
from .store import LeaseStore, cas_store, immediate_store
from .types import (
    CLAIMED,
    COMPLETED,
    FAILED,
    STATES,
    SUBMITTED,
    TERMINAL,
    TIMED_OUT,
    Claim,
    ClaimStats,
    Salvage,
    TaskView,
)

__all__ = [
    "CLAIMED", "COMPLETED", "FAILED", "STATES", "SUBMITTED", "TERMINAL", "TIMED_OUT",
    "SCHEMA_VERSION", "Claim", "ClaimStats", "Clock", "FerryError", "InvalidArgument", "InvalidToken",
    "LeaseExpired", "LeaseStore", "LimitExceeded", "ManualClock", "NotFound",
    "PermissionDenied", "PgLeaseStore", "Salvage", "StoreError", "SystemClock", "TaskView", "TokenRequired",
    "WrongState", "cas_store", "errors", "immediate_store",
]
__version__ = "0.1.0"
