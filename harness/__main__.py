"""``python -m harness`` runs the ferry-harness command."""

import sys

from harness.cli.main import main

sys.exit(main())
