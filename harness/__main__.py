"""``python -m harness`` runs the ferry-harness command."""

import sys

from .cli import main

sys.exit(main())
