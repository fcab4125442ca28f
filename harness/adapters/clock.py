"""Put a library's clock on the harness clock: the names it reads time through, replaced.

ferry controls time through ``clock()`` (integer milliseconds, shared by every worker),
but a PyPI queue reads time itself, in one of a few ways, each bound in *its own* module:

- ``import time`` then ``time.time()`` / ``time.monotonic()`` / ``time.time_ns()``;
- ``from time import time, monotonic``;
- ``import datetime`` then ``datetime.datetime.now()`` / ``datetime.datetime.utcnow()``;
- ``from datetime import datetime`` then ``datetime.now()`` / ``datetime.utcnow()``;
- a helper of its own (``utcnow = datetime.datetime.utcnow``).

:func:`patch_library_clock` walks the given modules' globals and replaces each of those
names *in that module only* (the process's ``time`` and ``datetime`` stay real, so the
harness's own timing is untouched): a module name gets a stand-in module whose clock
functions read the harness clock and whose other attributes are the real ones; a
function or class name gets its harness-clock twin. Call it in the factory (each worker
process runs the factory), keep the :class:`ClockPatch` it returns, and undo it in
``close()`` if the process lives on.

**Scale.** Many libraries count whole seconds (``visibility_timeout=30``): a 10 ms harness
lease cannot be written in them, and ``clock()/1000`` puts every boundary at the mercy of
float rounding. ``LibraryClock(clock, scale=SECOND)`` makes one harness millisecond one
library second: ``time.time()`` is then ``clock()`` as a float with no fraction, a
30-second timeout is 30 harness ms, and every boundary is an integer on both sides.
Convert with :meth:`LibraryClock.seconds` (harness ms -> library seconds, for the
library's arguments) and :meth:`LibraryClock.harness_ms` (a library instant or
duration -> harness ms, for ``lease_expires_at``), both exact at ``scale=SECOND``.

``datetime`` readings are naive UTC (``EPOCH + timedelta``, integer arithmetic); a naive
``now()`` is treated as UTC too (as if ``TZ=UTC``), ``now(tz)`` is converted to ``tz``.
"""

from __future__ import annotations

import datetime as _dt
import time as _time
import types
from collections.abc import Callable, Iterable
from typing import Any

EPOCH = _dt.datetime(1970, 1, 1)
MILLISECOND = 1
SECOND = 1000


class LibraryClock:
    """The harness clock as a library sees it: ``scale`` library ms per harness ms."""

    def __init__(self, clock: Callable[[], int], *, scale: int = MILLISECOND) -> None:
        if not isinstance(scale, int) or isinstance(scale, bool) or scale <= 0:
            raise ValueError(f"scale must be a positive integer (library ms per harness ms), "
                             f"got {scale!r}")
        self.clock = clock
        self.scale = scale

    # ------------------------------------------------------------------ readings
    def ms(self) -> int:
        """Library time in integer milliseconds since the epoch."""
        return int(self.clock()) * self.scale

    def time(self) -> float:
        """``time.time()``: seconds as a float (no fraction when ``scale`` is whole seconds)."""
        ms = self.ms()
        return float(ms // 1000) if ms % 1000 == 0 else ms / 1000

    def time_ns(self) -> int:
        return self.ms() * 1_000_000

    def utcnow(self) -> _dt.datetime:
        """``datetime.utcnow()``: naive UTC, exact (``EPOCH + timedelta(milliseconds=…)``)."""
        return EPOCH + _dt.timedelta(milliseconds=self.ms())

    def now(self, tz: _dt.tzinfo | None = None) -> _dt.datetime:
        """``datetime.now(tz)``: naive UTC without ``tz`` (as if TZ=UTC), else in ``tz``."""
        naive = self.utcnow()
        if tz is None:
            return naive
        return naive.replace(tzinfo=_dt.timezone.utc).astimezone(tz)

    def today(self) -> _dt.date:
        return self.utcnow().date()

    # ------------------------------------------------------------------ conversions
    def seconds(self, ms: int) -> float:
        """A harness duration in library seconds (an integer-valued float at scale SECOND)."""
        lib_ms = int(ms) * self.scale
        return float(lib_ms // 1000) if lib_ms % 1000 == 0 else lib_ms / 1000

    def timedelta(self, ms: int) -> _dt.timedelta:
        """A harness duration as the library's ``timedelta``."""
        return _dt.timedelta(milliseconds=int(ms) * self.scale)

    def harness_ms(self, value: float | int | _dt.datetime | _dt.timedelta) -> int:
        """A library instant or duration back in harness ms: seconds (float or int), a
        ``timedelta``, or a ``datetime`` (naive = UTC). Rounded to the nearest harness ms,
        which undoes a float's last-bit error; exact at ``scale=SECOND``."""
        if isinstance(value, _dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
            value = value - EPOCH
        if isinstance(value, _dt.timedelta):
            lib_us = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
            return _div_round(lib_us, 1000 * self.scale)
        if isinstance(value, int):
            return _div_round(value * 1000, self.scale)
        return round(value * 1000 / self.scale)


def _div_round(a: int, b: int) -> int:
    q, r = divmod(a, b)
    return q + (1 if 2 * r >= b else 0)


# ---------------------------------------------------------------------- stand-ins
def _mark(obj: Any, original: Any) -> Any:
    obj._ferry_original = original
    return obj


def _original(value: Any) -> Any:
    """What a name held before any patch of ours (patching twice re-points, never stacks)."""
    return getattr(value, "_ferry_original", value)


def _fake_time_module(lc: LibraryClock) -> types.ModuleType:
    """A ``time`` module whose clock reads are the harness clock; the rest is real."""
    fake = types.ModuleType("time", "time, on the harness clock (ferry_harness.adapters.clock)")
    fake.__dict__.update({k: v for k, v in vars(_time).items() if not k.startswith("__")})
    seconds = lc.time
    fake.time = fake.monotonic = fake.perf_counter = seconds
    fake.time_ns = fake.monotonic_ns = fake.perf_counter_ns = lc.time_ns
    fake.gmtime = lambda secs=None: _time.gmtime(seconds() if secs is None else secs)
    fake.localtime = lambda secs=None: _time.gmtime(seconds() if secs is None else secs)
    return _mark(fake, _time)


def _fake_datetime_class(lc: LibraryClock) -> type:
    """``datetime.datetime`` with ``now`` / ``utcnow`` / ``today`` on the harness clock.

    Instances are real ``datetime`` objects, and ``isinstance(x, <this class>)`` holds for
    every real datetime, so a library's type checks and arithmetic are unchanged."""

    class _Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, _dt.datetime)

        def __subclasscheck__(cls, sub: type) -> bool:
            return issubclass(sub, _dt.datetime)

    class datetime(_dt.datetime, metaclass=_Meta):  # noqa: N801 - the name libraries use
        def __new__(cls, *args: Any, **kwargs: Any) -> _dt.datetime:  # type: ignore[misc]
            return _dt.datetime(*args, **kwargs)

        @classmethod
        def now(cls, tz: _dt.tzinfo | None = None) -> _dt.datetime:  # type: ignore[override]
            return lc.now(tz)

        @classmethod
        def utcnow(cls) -> _dt.datetime:  # type: ignore[override]
            return lc.utcnow()

        @classmethod
        def today(cls) -> _dt.datetime:  # type: ignore[override]
            return lc.utcnow()

    return _mark(datetime, _dt.datetime)


def _fake_date_class(lc: LibraryClock) -> type:
    class _Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, _dt.date)

    class date(_dt.date, metaclass=_Meta):  # noqa: N801 - the name libraries use
        def __new__(cls, *args: Any, **kwargs: Any) -> _dt.date:  # type: ignore[misc]
            return _dt.date(*args, **kwargs)

        @classmethod
        def today(cls) -> _dt.date:  # type: ignore[override]
            return lc.today()

    return _mark(date, _dt.date)


def _fake_datetime_module(lc: LibraryClock) -> types.ModuleType:
    fake = types.ModuleType("datetime", "datetime, on the harness clock (ferry_harness.adapters.clock)")
    fake.__dict__.update({k: v for k, v in vars(_dt).items() if not k.startswith("__")})
    fake.datetime = _fake_datetime_class(lc)
    fake.date = _fake_date_class(lc)
    return _mark(fake, _dt)


def _replacement(value: Any, lc: LibraryClock) -> Any | None:
    """The harness-clock twin of a module global, or None if it does not read time."""
    v = _original(value)
    if v is _time:
        return _fake_time_module(lc)
    if v is _dt:
        return _fake_datetime_module(lc)
    if v is _dt.datetime:
        return _fake_datetime_class(lc)
    if v is _dt.date:
        return _fake_date_class(lc)
    functions: list[tuple[Any, Callable[..., Any]]] = [
        (_time.time, lc.time), (_time.monotonic, lc.time), (_time.perf_counter, lc.time),
        (_time.time_ns, lc.time_ns), (_time.monotonic_ns, lc.time_ns),
        (_time.perf_counter_ns, lc.time_ns),
        (_dt.datetime.now, lc.now), (_dt.datetime.utcnow, lc.utcnow),
        (_dt.datetime.today, lc.utcnow), (_dt.date.today, lc.today),
    ]
    for real, twin in functions:
        try:
            same = v is real or v == real
        except Exception:  # an object with a hostile __eq__: not a clock
            same = False
        if same:
            return _mark(lambda *a, _f=twin, **k: _f(*a, **k), real)
    return None


class ClockPatch:
    """The names one :func:`patch_library_clock` call replaced; :meth:`undo` puts them back."""

    def __init__(self, clock: LibraryClock) -> None:
        self.clock = clock
        self.replaced: list[tuple[types.ModuleType, str, Any]] = []  # (module, name, before)

    @property
    def names(self) -> list[str]:
        """``module.name`` of every replaced global (say what was moved onto the clock)."""
        return [f"{m.__name__}.{n}" for m, n, _ in self.replaced]

    def undo(self) -> None:
        for module, name, before in reversed(self.replaced):
            setattr(module, name, before)
        self.replaced.clear()

    def __enter__(self) -> ClockPatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


def patch_library_clock(modules: Iterable[types.ModuleType], clock: LibraryClock | Callable[[], int],
                        *, scale: int = MILLISECOND, only: Iterable[str] | None = None,
                        also: dict[str, Callable[[LibraryClock], Any]] | None = None) -> ClockPatch:
    """Move the time reads of ``modules`` onto the harness clock (see the module docstring).

    ``clock`` is the factory's ``clock`` (then ``scale`` applies) or a :class:`LibraryClock`.
    ``only`` limits the patch to these global names (leave a library's ``time.monotonic``
    real where it times a blocking wait: a stopped clock would never end it). ``also``
    maps a library's own helper names to a builder of their replacement, e.g.
    ``{"now_ms": lambda lc: lc.ms}``; they are replaced in every module that has them.
    Raises ``ValueError`` when none of the modules reads time in a way this can replace:
    a patch that silently moves nothing leaves the library on the wall clock.
    """
    lc = clock if isinstance(clock, LibraryClock) else LibraryClock(clock, scale=scale)
    patch = ClockPatch(lc)
    modules = list(modules)
    wanted = None if only is None else set(only)
    for module in modules:
        for name, value in list(vars(module).items()):
            if name.startswith("__") or (wanted is not None and name not in wanted):
                continue
            new = None
            if also and name in also:
                twin = also[name](lc)
                new = _mark(lambda *a, _f=twin, **k: _f(*a, **k), _original(value))
            elif isinstance(value, (types.ModuleType, type)) or callable(value):
                new = _replacement(value, lc)
            if new is not None:
                patch.replaced.append((module, name, value))
                setattr(module, name, new)
    if not patch.replaced:
        raise ValueError(f"nothing to patch: {[m.__name__ for m in modules]} bind none of "
                         "time, datetime or their clock functions by name")
    return patch
