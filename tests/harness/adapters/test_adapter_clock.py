"""ferry_harness.adapters.clock: a library's own time names moved onto the harness clock.

Each way a library can read time (``import time``, ``from time import …``, ``import
datetime``, ``from datetime import datetime``, a helper of its own) is built here as a
small module and patched; the process's real ``time`` and ``datetime`` must stay real.
"""

from __future__ import annotations

import datetime as dt
import time
import types

import pytest

from ferry_harness.adapters.clock import (
    EPOCH,
    SECOND,
    LibraryClock,
    patch_library_clock,
)

START_MS = 1_000_000_000

LIBRARY_SOURCE = """
import time
import datetime
from time import time as wall, monotonic
from datetime import datetime as DT, date

utcnow = datetime.datetime.utcnow
VERSION = "1.0"

def lease_end(timeout_s):
    return time.time() + timeout_s

def expired(deadline):
    return deadline < time.time()
"""


def library(name: str = "fake_queue") -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(LIBRARY_SOURCE, name, "exec"), module.__dict__)  # noqa: S102 - test fixture
    return module


class Clock:
    def __init__(self, ms: int = START_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def test_every_binding_style_reads_the_harness_clock():
    clock, lib = Clock(), library()
    patch = patch_library_clock([lib], clock)
    assert set(patch.names) == {f"fake_queue.{n}" for n in
                                ("time", "datetime", "wall", "monotonic", "DT", "date", "utcnow")}
    assert lib.time.time() == lib.wall() == lib.monotonic() == START_MS / 1000
    assert lib.time.time_ns() == START_MS * 1_000_000
    want = EPOCH + dt.timedelta(milliseconds=START_MS)
    assert lib.datetime.datetime.utcnow() == lib.DT.utcnow() == lib.utcnow() == want
    assert lib.DT.now(dt.timezone.utc) == want.replace(tzinfo=dt.timezone.utc)
    assert lib.date.today() == want.date()
    clock.ms += 1
    assert lib.DT.utcnow() - want == dt.timedelta(milliseconds=1)
    # the library's other uses of the names are untouched and real
    assert lib.time.sleep is time.sleep and lib.datetime.timedelta is dt.timedelta
    real = dt.datetime(2020, 1, 1)
    assert isinstance(real, lib.DT) and isinstance(lib.DT(2020, 1, 1), dt.datetime)
    assert isinstance(lib.datetime.datetime.now(), dt.datetime)
    assert lib.VERSION == "1.0"
    # the process's own clock is not the harness clock
    assert abs(time.time() - lib.time.time()) > 3600
    patch.undo()
    assert lib.time is time and lib.DT is dt.datetime and lib.wall is time.time
    assert lib.utcnow == dt.datetime.utcnow


def test_one_harness_ms_can_be_one_library_second_with_integer_boundaries():
    """At scale=SECOND a whole-second timeout is a whole number of harness ms and every
    lease end is exact; at ms scale ``clock()/1000`` float sums miss it now and then."""
    clock, lib = Clock(), library()
    with patch_library_clock([lib], clock, scale=SECOND) as patch:
        lc = patch.clock
        assert lib.time.time() == float(START_MS) and lc.seconds(30) == 30.0
        misses = 0
        for ms in range(START_MS, START_MS + 500):
            clock.ms = ms
            end = lib.lease_end(lc.seconds(10))
            assert lc.harness_ms(end) == ms + 10
            clock.ms = ms + 9
            assert not lib.expired(end)
            clock.ms = ms + 10
            assert not lib.expired(end)  # deadline < now: holds through the boundary ms
            clock.ms = ms + 11
            assert lib.expired(end)
    fine = LibraryClock(Clock(), scale=1)
    for ms in range(START_MS, START_MS + 500):
        fine.clock.ms = ms
        start = fine.time()
        fine.clock.ms = ms + 10
        misses += start + fine.seconds(10) != fine.time()
    assert misses > 0  # why the scale exists: float seconds do not add up exactly


def test_conversions_back_to_harness_ms_are_exact():
    lc = LibraryClock(Clock(), scale=SECOND)
    assert lc.harness_ms(30) == 30 and lc.harness_ms(30.0) == 30
    assert lc.harness_ms(dt.timedelta(seconds=30)) == 30
    assert lc.harness_ms(lc.utcnow()) == START_MS
    assert lc.harness_ms(lc.now(dt.timezone(dt.timedelta(hours=5)))) == START_MS
    assert lc.timedelta(7) == dt.timedelta(seconds=7)
    ms = LibraryClock(Clock(START_MS + 123))
    assert ms.harness_ms(ms.time()) == START_MS + 123  # float seconds, rounded back
    assert ms.harness_ms(ms.utcnow()) == START_MS + 123


def test_patching_twice_repoints_and_undo_restores_the_real_names():
    lib = library()
    first = patch_library_clock([lib], Clock(5_000))
    second = patch_library_clock([lib], Clock(9_000))  # a worker opening a second database
    assert lib.wall() == 9.0
    second.undo()
    assert lib.wall() == 5.0
    first.undo()
    assert lib.wall is time.time


def test_only_and_also_choose_what_moves():
    lib = library()
    lib.now_ms = lambda: 0  # a helper of the library's own
    with patch_library_clock([lib], Clock(), only={"DT", "now_ms"},
                             also={"now_ms": lambda lc: lc.ms}) as patch:
        assert sorted(patch.names) == ["fake_queue.DT", "fake_queue.now_ms"]
        assert lib.now_ms() == START_MS and lib.DT.utcnow().year == 1970
        assert lib.time is time and lib.monotonic is time.monotonic


def test_a_patch_that_moves_nothing_is_an_error():
    empty = types.ModuleType("no_clock")
    empty.x = 1
    with pytest.raises(ValueError, match="nothing to patch"):
        patch_library_clock([empty], Clock())
    with pytest.raises(ValueError, match="positive integer"):
        LibraryClock(Clock(), scale=0.5)  # type: ignore[arg-type]
