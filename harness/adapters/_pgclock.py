"""The harness clock inside PostgreSQL, for libraries whose SQL asks the server for the time.

procrastinate and pgqueuer compute heartbeats and stall times with the server's ``now()``
(in their queries, their plpgsql functions and their column defaults). ferry's clock is
``clock()`` in the harness, set to exact milliseconds between calls. This module moves
the server's time functions onto it, without touching the libraries' SQL:

- a schema ``ferry_clock`` holds ``now()``, ``transaction_timestamp()``,
  ``statement_timestamp()`` and ``clock_timestamp()``, each returning
  ``to_timestamp(current_setting('ferry.now_ms') / 1000)``: the harness instant, in
  whole milliseconds, as a ``timestamptz``;
- every connection of an adapter runs with ``search_path = <example schema>,
  ferry_clock, pg_catalog``: with ``pg_catalog`` named explicitly it is searched *after*
  ``ferry_clock``, so an unqualified ``now()`` resolves to ours (the library's objects
  are still created in, and found in, the example's schema, the first of the path). SQL
  that PostgreSQL resolves when it is created (a column's ``DEFAULT now()``) binds to
  ours when the library's schema is installed through such a connection; plpgsql and
  plain queries resolve it when they run;
- before each store call the adapter runs ``SELECT set_config('ferry.now_ms', <clock()>,
  false)`` on its connection: a session setting, which assigns no transaction id and
  writes nothing (an idle poll stays idle). The value is read once per store call.
  An unset ``ferry.now_ms`` makes ``now()`` raise (``unrecognized configuration
  parameter``) rather than fall back to the wall clock.

What cannot be moved: the SQL keywords ``CURRENT_TIMESTAMP``, ``LOCALTIMESTAMP``,
``CURRENT_TIME``, ``CURRENT_DATE`` and literals such as ``'now'::timestamptz`` are parsed
by the server itself, not looked up. Neither library's SQL (procrastinate 3.10,
pgqueuer 1.6) uses them; :func:`unmovable_time` lists any in a library's SQL text so an
adapter can check and say so.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ferry_core.errors import InvalidArgument

CLOCK_SCHEMA = "ferry_clock"
SETTING = "ferry.now_ms"
FUNCTIONS = ("now", "transaction_timestamp", "statement_timestamp", "clock_timestamp")
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

#: one statement per function; run under an advisory lock by whoever installs first
CLOCK_SQL = [f"CREATE SCHEMA IF NOT EXISTS {CLOCK_SCHEMA}"] + [
    f"""CREATE OR REPLACE FUNCTION {CLOCK_SCHEMA}.{name}() RETURNS timestamptz
        LANGUAGE sql STABLE
        AS $$ SELECT pg_catalog.to_timestamp(
                  pg_catalog.current_setting('{SETTING}')::bigint / 1000.0) $$"""
    for name in FUNCTIONS
]
#: is the clock there already? (one row: true / false)
HAS_CLOCK_SQL = f"SELECT to_regprocedure('{CLOCK_SCHEMA}.clock_timestamp()') IS NOT NULL AS ok"
#: the key of the advisory lock that serialises installs (clock and library schemas)
INSTALL_LOCK_KEY = 0x66657272  # "ferr"
SET_NOW_SQL = f"SELECT pg_catalog.set_config('{SETTING}', %s, false)"

_UNMOVABLE = re.compile(r"\b(CURRENT_TIMESTAMP|LOCALTIMESTAMP|CURRENT_TIME|CURRENT_DATE|LOCALTIME)\b"
                        r"|'now'", re.IGNORECASE)


@dataclass(frozen=True)
class Where:
    """A libpq URI split into the connection (without ``options``) and the example's schema."""

    uri: str  # the URI without its options parameter
    schema: str  # the first schema of options=-c search_path=..., else "public"
    params: dict[str, str]  # the URI's query parameters, options removed

    @property
    def search_path(self) -> str:
        """The path every adapter connection uses (see the module docstring)."""
        return f'"{self.schema}", {CLOCK_SCHEMA}, pg_catalog'

    @property
    def libpq_options(self) -> str:
        """The ``options`` connection parameter that sets it (for psycopg)."""
        return f"-c search_path={self.search_path.replace(' ', '')}"


def parse_where(where: str) -> Where:
    """``postgresql://…?host=…&options=-c search_path=<schema>`` -> :class:`Where`."""
    if not isinstance(where, str) or not where.startswith(("postgresql://", "postgres://")):
        raise InvalidArgument(f"a Postgres target needs a libpq URI (postgresql://…), got {where!r}")
    parts = urlsplit(where)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    options = params.pop("options", "")
    schema = "public"
    m = re.search(r"search_path\s*=\s*([^\s,]+)", unquote(options))
    if m:
        schema = m.group(1).strip('"')
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", schema):
        raise InvalidArgument(f"schema name {schema!r} is not a plain identifier")
    uri = urlunsplit(parts._replace(query=urlencode(params)))
    return Where(uri=uri, schema=schema, params=params)


def to_datetime(ms: int) -> _dt.datetime:
    """Harness ms -> the ``timestamptz`` our ``now()`` returns (exact: integer arithmetic)."""
    return EPOCH + _dt.timedelta(milliseconds=int(ms))


def to_ms(value: _dt.datetime) -> int:
    """A ``timestamptz`` read back -> harness ms (naive values are UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def unmovable_time(sql_text: str) -> list[str]:
    """The time keywords and literals in ``sql_text`` that the clock schema cannot move."""
    return sorted({m.group(0).upper() for m in _UNMOVABLE.finditer(sql_text)})


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close an adapter's private event loop, cancelling what the library left running
    on it (a pool's background workers), so nothing complains at interpreter exit."""
    if loop.is_closed():
        return
    try:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    finally:
        loop.close()
