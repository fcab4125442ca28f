"""``python -m ferry_harness`` runs the ferry-harness command."""

import sys

from ferry_harness.cli.main import main

sys.exit(main())
