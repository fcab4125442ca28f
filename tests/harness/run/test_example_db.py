"""Counter-examples shared across machines: example database specs, and two gate runs
("CI runners" with their own report directories) sharing a real ``redis-server``: the
second replays the first's failure first."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from ferry_harness.errors import ExampleDbError
from ferry_harness.run.example_db import open_example_db
from tests.gate_sources import LOCK_BROKEN

pytest_plugins = ["pytester"]




def test_specs(tmp_path):
    default = str(tmp_path / "examples")
    assert isinstance(open_example_db(None, default), DirectoryBasedExampleDatabase)
    assert open_example_db("none", default) is None
    db = open_example_db(f"dir:{tmp_path / 'x'}", default)
    assert isinstance(db, DirectoryBasedExampleDatabase) and db.path == tmp_path / "x"
    assert open_example_db(str(tmp_path / "y"), default).path == tmp_path / "y"
    gh = open_example_db("github:acme/queue", default)
    assert isinstance(gh, MultiplexedDatabase)
    assert any(isinstance(d, ReadOnlyDatabase) for d in gh._wrapped)
    for bad in ("s3://bucket/x", "github:acme", "ftp:thing"):
        with pytest.raises(ExampleDbError):
            open_example_db(bad, default)


def test_unreachable_redis_is_a_usage_error(capsys):
    pytest.importorskip("redis", reason="the redis package is in the test extra")
    from ferry_harness.cli.main import main

    port = _free_port()  # nothing listens there
    assert main(["fuzz", "--example-db", f"redis://127.0.0.1:{port}/0", "--budget", "1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the example database" in err and "Traceback" not in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path) -> Iterator[str]:
    """A real redis-server on a free loopback port, stopped afterwards whatever happens."""
    redis = pytest.importorskip("redis", reason="the redis package is in the test extra")
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not found: apt-get install redis-server (.ci/run does)")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_two_gate_runs_share_a_failure_through_redis(pytester, redis_url, monkeypatch):
    root = Path(__file__).resolve().parents[3]  # the subprocesses import this checkout's ferry
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(broken=LOCK_BROKEN)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")

    def runner(name: str) -> tuple[pytest.RunResult, dict]:
        report_dir = pytester.path / name
        result = pytester.runpytest_subprocess(
            "--ferry-target", "broken:make", "--ferry-no-scenarios", "--ferry-budget", "6",
            "--ferry-workers", "3", "--ferry-seed", "0", "--ferry-example-db", redis_url,
            "--ferry-report-dir", str(report_dir), "-p", "no:randomly")
        return result, json.loads((report_dir / "fuzz" / "report.json").read_text())

    first, report = runner("runner-1")
    assert first.ret == 1 and "[lock-exclusive]" in first.stdout.str()
    assert report["example_database"]["failure_from_database"] is False
    second, report = runner("runner-2")  # another machine: nothing local, same Redis
    assert second.ret == 1
    assert report["example_database"]["failure_from_database"] is True
    assert report["violations"][0]["invariant"] == "lock-exclusive"
    assert "replayed first from the example database" in second.stdout.str()
