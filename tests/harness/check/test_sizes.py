"""One WAL bound and one size parser (:mod:`ferry_harness.check.sizes`), used by every size
option: ``fuzz --wal-bound`` and ``check --wal-bound`` take the same spellings."""

from __future__ import annotations

import pytest

from ferry_harness.check.annotations import WalSample, mark
from ferry_harness.check.history import OK, History, Op
from ferry_harness.check.sizes import WAL_BOUND_BYTES, parse_size
from ferry_harness.cli.main import build_parser, main


@pytest.mark.parametrize(("text", "want"), [
    ("500000", 500_000), ("64MiB", 64 << 20), ("64MB", 64 << 20), ("64mib", 64 << 20),
    ("8 MiB", 8 << 20), ("512KiB", 512 << 10), ("512KB", 512 << 10), ("1GiB", 1 << 30),
    ("2GB", 2 << 30), ("1.5MiB", 3 << 19), ("100B", 100), ("4K", 4096),
])
def test_sizes_in_bytes_or_with_a_unit(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("", "not a size"), ("lots", "not a size"), ("64XB", "not a size"), ("MiB", "not a size"),
    ("0", "must be positive"), ("-5MiB", "must be positive"), ("inf", "must be positive"),
])
def test_a_bad_size_says_what_it_takes(text, says):
    with pytest.raises(ValueError, match=says):
        parse_size(text)


def test_the_bound_is_64_mib_everywhere():
    assert WAL_BOUND_BYTES == 64 * 1024 * 1024
    fuzz = build_parser().parse_args(["fuzz"])
    assert fuzz.wal_bound == WAL_BOUND_BYTES


def _history_reaching(tmp_path, size: int):
    op = Op(index=0, process=0, agent="janitor", op="sweep", args={}, invoke_ns=1, now=0,
            complete_ns=2, type=OK, value=0)
    mark(op, WalSample(wal_after_step=size))
    path = tmp_path / "history.jsonl"
    path.write_text(History([op]).to_jsonl())
    return str(path)


@pytest.mark.parametrize(("bound", "rc"), [
    ("8MiB", 1), ("8388608", 1), ("8MB", 1), ("9MiB", 0), ("9437184", 0)])
def test_check_takes_the_same_sizes_as_fuzz(tmp_path, capsys, bound, rc):
    path = _history_reaching(tmp_path, 9 << 20)
    assert main(["check", path, "--wal-bound", bound]) == rc
    out = capsys.readouterr().out
    assert ("over the bound of 8388608" in out) == (rc == 1), out


@pytest.mark.parametrize("command", ["fuzz", "check"])
def test_a_bad_size_is_a_usage_error(tmp_path, capsys, command):
    args = [command] + ([_history_reaching(tmp_path, 1)] if command == "check" else [])
    with pytest.raises(SystemExit) as exc:
        main([*args, "--wal-bound", "lots"])
    assert exc.value.code == 2
    assert "not a size: 'lots'" in capsys.readouterr().err
