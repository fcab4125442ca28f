"""Which ferry wrote a report: its version and, in a git checkout, the commit.

Reports are compared across machines and months; a verdict without the checker that made
it cannot be trusted or reproduced.
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path

#: the distribution ferry is published as, then the name older checkouts were installed as
DISTRIBUTIONS = ("ferry-harness", "ferry")


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, str | None]:
    """``{"version": "0.1.0", "commit": "69c3ee0…" or None, "dirty": "yes"/"no"/None}``."""
    version = None
    for dist in DISTRIBUTIONS:
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    if version is None:
        # why: ferry_core is only consulted when ferry is not pip-installed (a bare checkout)
        from ferry_core import __version__ as version
    root = Path(__file__).resolve().parents[1]
    commit = dirty = None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True, timeout=5).stdout.strip() or None
        # "dirty" is about the code, not the committed reports: regenerating reports/ one
        # run after another must not mark the later runs dirty (the earlier ones rewrote files)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no", "--", ":/", ":(top,exclude)reports"],
                                check=True, capture_output=True, text=True, timeout=5).stdout
        dirty = "yes" if status.strip() else "no"
    except (OSError, subprocess.SubprocessError):
        pass  # an installed copy, not a checkout
    return {"version": version, "commit": commit, "dirty": dirty}
