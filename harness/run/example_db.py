"""Where failing examples are kept between runs: a Hypothesis example database from a spec.

CI gates run on many machines; a counter-example found on one runner is worth replaying
first on every other. Hypothesis already has databases for that, so a spec string picks
one (``ferry-harness fuzz --example-db SPEC``, ``pytest --ferry-example-db SPEC`` or the
``FERRY_EXAMPLE_DB`` environment variable):

- ``none``: keep nothing;
- ``dir:PATH`` (or a plain path): a ``DirectoryBasedExampleDatabase`` at PATH;
- ``redis://HOST:PORT/N`` (``rediss://`` for TLS): the report directory's own ``examples/``
  plus a shared ``RedisExampleDatabase`` (needs ``pip install redis``), joined by a
  ``MultiplexedDatabase`` so a failure is saved to both and replayed from either;
- ``github:OWNER/REPO[/ARTIFACT]``: the local directory plus a read-only
  ``GitHubArtifactDatabase`` (artifact ``hypothesis-example-db`` unless named; it reads
  ``GITHUB_TOKEN``).
"""

from __future__ import annotations

import os
from typing import Any

from ferry_harness.errors import ExampleDbError

ENV_VAR = "FERRY_EXAMPLE_DB"
SPEC_HELP = ("none | dir:PATH | redis://HOST:PORT/N | github:OWNER/REPO[/ARTIFACT] "
             "(default: DIR/examples under the report directory)")


def open_example_db(spec: str | None, default_dir: str) -> Any:
    """The database a spec names; ``None`` spec means ``default_dir``; ``none`` means no
    database. Raises :class:`ExampleDbError` with what to fix."""
    # why: the CLI and the pytest plugin import this module for SPEC_HELP; Hypothesis loads only when a database is opened
    from hypothesis.database import DirectoryBasedExampleDatabase, MultiplexedDatabase

    spec = (spec or "").strip()
    if not spec:
        return DirectoryBasedExampleDatabase(default_dir)
    if spec.lower() == "none":
        return None
    if spec.startswith("dir:"):
        return DirectoryBasedExampleDatabase(spec[4:] or default_dir)
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return MultiplexedDatabase(DirectoryBasedExampleDatabase(default_dir), _redis(spec))
    if spec.startswith("github:"):
        return MultiplexedDatabase(DirectoryBasedExampleDatabase(default_dir), _github(spec))
    if "://" in spec or (":" in spec.split(os.sep)[0] and not os.path.isabs(spec)):
        raise ExampleDbError(f"unknown example database {spec!r}; use {SPEC_HELP}")
    return DirectoryBasedExampleDatabase(spec)


def _redis(url: str) -> Any:
    try:  # why: redis is an optional extra, needed only for redis:// databases
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ExampleDbError(f"the example database {url} needs the redis package: "
                             "pip install 'ferry-harness[redis]' (or pip install redis)") from None
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
    try:
        client.ping()  # fail now, with the address, rather than on the first save
    except redis.RedisError as exc:
        raise ExampleDbError(f"cannot reach the example database {url}: {exc}") from None
    return RedisExampleDatabase(client, key_prefix=b"ferry-example:")


def _github(spec: str) -> Any:
    # why: as in open_example_db, Hypothesis loads only when a database is opened
    from hypothesis.database import GitHubArtifactDatabase, ReadOnlyDatabase

    parts = spec[len("github:"):].strip("/").split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ExampleDbError(f"expected github:OWNER/REPO[/ARTIFACT], got {spec!r}")
    kwargs = {"artifact_name": parts[2]} if len(parts) == 3 else {}
    return ReadOnlyDatabase(GitHubArtifactDatabase(parts[0], parts[1], **kwargs))
